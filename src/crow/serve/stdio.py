"""Run the agent on stdio: one process, one connection, a shared durable store.

``serve_connection`` serves any one connection (stdio here, each HTTP or
WebSocket connection in ``crow.serve.http``): the router reads its first
``initialize`` and hands it to ACP v2 (``crow.acp.AgentSide``) or, for
``protocolVersion`` 1, to the v1 face (``crow.agent.v1``, imported on the first
v1 connection: the ``acp`` package takes ~0.6 s to import).  ``[acp] v2 =
false`` in config.toml leaves v1 only.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable
from importlib.metadata import version

from crow.acp import AgentSide, ProtocolRouter, Transport, open_stdio, schema
from crow.acp.transports.memory import memory_pair
from crow.agent.service import CrowAgent
from crow.config import Config
from crow.runtime.gc_tuning import settle
from crow.runtime.imports import import_off_loop
from crow.store.db import open_store

__all__ = ["open_follower", "serve_connection", "serve_stdio", "start_agent"]

#: What crow serve adds to its agent before serving (crow.cli: the resident judge).
Setup = Callable[[CrowAgent], None]

log = logging.getLogger("crow.agent")


@functools.cache
def agent_info() -> schema.Implementation:
    """Crow's ``info``, read once per process (a metadata lookup scans ``sys.path``)."""
    return schema.Implementation(name="crow", title="Crow", version=version("crow-cli"))


def start_agent(config: Config, *, clients_authenticated: bool = True) -> CrowAgent:
    """The agent on the configured store; the store is closed again if the agent
    cannot start (its recovery of interrupted turns runs here, and may fail)."""
    store = open_store(config.store_location)
    try:
        return CrowAgent(config, store, clients_authenticated=clients_authenticated)
    except BaseException:
        store.close()
        raise


async def serve_stdio(config: Config, *, setup: Setup | None = None) -> None:
    agent = start_agent(config)
    try:
        if setup is not None:
            setup(agent)
        ready = asyncio.Event()
        warm = asyncio.create_task(_warm_up(ready))
        try:
            await serve_connection(agent, await open_stdio(), ready=ready)
        finally:
            warm.cancel()
            await agent.shutdown()
    finally:
        await agent.store.aclose()


async def serve_connection(
    agent: CrowAgent, transport: Transport, *, ready: asyncio.Event | None = None
) -> None:
    """Serve one connection in the protocol version its initialize asks for.

    ``ready`` is set once the client is initialized (either version).
    """

    async def v2(routed: Transport) -> None:
        side = AgentSide(routed, info=agent_info(), capabilities=agent.capabilities())
        watcher = agent.attach(side)
        relay = asyncio.create_task(_relay(side.initialized, ready)) if ready else None
        try:
            await side.serve()
        finally:
            if relay is not None:
                relay.cancel()
            agent.detach(watcher)

    async def v1(routed: Transport) -> None:
        # Imported in a thread: other connections keep being served meanwhile.
        module = await import_off_loop("crow.agent.v1")
        await module.serve_v1(agent, routed, ready=ready)

    router = ProtocolRouter(v1=v1, v2=v2 if agent.config.acp.v2 else None)
    await router.serve(transport)


def open_follower(agent: CrowAgent) -> Transport:
    """An in-process ACP v2 connection to ``agent`` whose watchers are followers
    (crow.orchestra.resident, the judge inside crow serve); returns the client's end."""
    ours, theirs = memory_pair()

    async def serve() -> None:
        side = AgentSide(theirs, info=agent_info(), capabilities=agent.capabilities())
        watcher = agent.attach(side, follower=True)
        try:
            await side.serve()
        finally:
            agent.detach(watcher)

    agent.spawn(serve(), name="follower-connection")
    return ours


async def _relay(source: asyncio.Event, target: asyncio.Event) -> None:
    await source.wait()
    target.set()


async def _warm_up(ready: asyncio.Event) -> None:
    """Import the model client and the MCP SDK in the background once the client is
    served: together they take ~0.7 s, which would otherwise delay initialize or the
    first turn.
    First the wire models initialize did not need (~50 ms, see crow.acp.schema): the
    client's next request needs them.  Then what was imported lives as long as the
    process: out of the collector's view (crow.runtime.gc_tuning)."""
    await ready.wait()
    modules = ("crow.acp.schema._generated", "crow.models.transport", "mcp", "mcp.server.mcpserver")
    for module in modules:
        with contextlib.suppress(ImportError):
            await import_off_loop(module)
    settle()
