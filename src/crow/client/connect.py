"""Reaching an agent: spawn ``crow serve`` (or any ACP v2 agent command) on stdio.

Every line-client command goes through ``connect``: it starts the agent,
initializes, and hands back a ``ClientSide`` whose projections every renderer
reads.  Failures to start or to speak v2 become ``AgentUnavailable`` with one
sentence for people.
"""

from __future__ import annotations

import contextlib
import shlex
import sys
from collections.abc import AsyncIterator
from importlib.metadata import version
from typing import Any

from crow.acp import AcpError, ClientSide, schema, spawn
from crow.acp.transports.http_client import connect_url

__all__ = ["AgentUnavailable", "connect", "default_command"]


class AgentUnavailable(Exception):
    """The agent could not be started, or does not speak ACP v2."""


def default_command() -> list[str]:
    """This Python's ``crow serve``: the agent the line client uses by default."""
    return [sys.executable, "-m", "crow", "serve"]


@contextlib.asynccontextmanager
async def connect(
    command: str | None,
    *,
    url: str | None = None,
    token: str | None = None,
    on_permission: Any = None,
) -> AsyncIterator[ClientSide]:
    """An initialized client connected to the agent: spawned from ``command`` (default
    ``crow serve``) or reached at ``url``; closed (and a spawned agent ended) after."""
    argv = shlex.split(command) if command else default_command()
    transport: Any
    try:
        transport = await connect_url(url, token=token) if url else await spawn(argv)
    except ConnectionError as exc:
        raise AgentUnavailable(str(exc)) from None
    if url:
        argv = [url]
    info = schema.Implementation(name="crow", title="Crow line client", version=version("crow-cli"))
    client = ClientSide(transport, info=info, on_permission=on_permission)
    async with client:
        try:
            await client.initialize()
        except (AcpError, ConnectionError) as exc:
            status = transport.process.returncode if getattr(transport, "process", None) else None
            detail = getattr(exc, "message", None) or str(exc) or "the connection closed"
            if status is not None:
                detail += f" (the agent exited with status {status})"
            raise AgentUnavailable(
                f"{argv[0]} did not start as an ACP v2 agent: {detail}"
            ) from None
        yield client
