"""A session's tools: which MCP servers it gets, and starting them.

Every session gets, at its first turn, the built-in servers (fs confined to its cwd and
additional directories, terminal in its cwd, web, memory for its project: one server of
each kind shared by the process's sessions, each session on a connection of its own in
its own scope, ``crow.servers.shared``), the servers of
``[mcp.servers]`` in config.toml, and the ``mcpServers`` its client named in
``session/new`` or ``session/resume`` (ACP-V2.md §5.1): stdio and http, each
name once, an unknown transport refused with ``-32602``.

A client-named stdio server is a command Crow runs as its user.  A server that
runs without a token (``crow serve --http --no-token``) cannot tell who is
asking, so it refuses client-named servers (``-32000``).  With
``[mcp] ask_client_servers = true`` each one waits for a permission question
(a ``command`` subject, kind ``execute``) and is left out if nobody allows it.
Client-named servers are never trusted: their tools ask like ``other``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

from crow.acp import AuthRequired, InvalidParams, schema
from crow.config import Config, McpServerSpec
from crow.memory import has_memories
from crow.memory.scopes import OWN, READ_ALL, MemoryPlace
from crow.servers.roots import Roots
from crow.servers.shared import Scoped, shared
from crow.tools.hub import ToolHub
from crow.tools.permissions import Permissions

from .asking import Question
from .session import LiveSession

__all__ = ["client_servers", "mcp_capabilities", "start_tools"]

ACCEPTED_TRANSPORTS = ("stdio", "http")


def mcp_capabilities(config: Config) -> schema.McpCapabilities:
    capabilities = schema.McpCapabilities(
        stdio=schema.McpStdioCapabilities(), http=schema.McpHttpCapabilities()
    )
    if config.tools.acp_servers:  # MCP over ACP (unstable): servers the client serves
        capabilities.acp = {}  # type: ignore[attr-defined]
    return capabilities


def client_servers(servers: Any, config: Config, *, allowed: bool = True) -> list[McpServerSpec]:
    """The client's MCP servers as specs.  Raises InvalidParams for a bad list,
    AuthRequired if this server does not let unauthenticated clients name any."""
    if servers in (schema.UNSET, None) or not servers:
        return []
    if not allowed:
        raise AuthRequired(
            "this Crow server runs without a token (--no-token), so clients may not "
            "name MCP servers: restart it with a token to use mcpServers",
            data={"mcpServers": len(servers)},
        )
    taken = set(config.tools.builtin) | {s.name for s in config.tools.servers}
    accepted = (*ACCEPTED_TRANSPORTS, "acp") if config.tools.acp_servers else ACCEPTED_TRANSPORTS
    specs = []
    for index, server in enumerate(servers):
        kind = getattr(server, "type", None)
        extra = getattr(server, "model_extra", None) or {}
        name = getattr(server, "name", extra.get("name"))
        if kind not in accepted:
            raise InvalidParams(
                f"mcpServers[{index}]: transport {kind!r} is not supported; Crow accepts "
                f"{' and '.join(accepted)}",
                data={"type": kind},
            )
        if not isinstance(name, str) or not name or name in taken:
            raise InvalidParams(
                f"mcpServers[{index}]: the name {name!r} is already taken", data={"name": name}
            )
        taken.add(name)
        specs.append(_spec(server, index, config.tools.timeout_s))
    return specs


def _spec(server: Any, index: int, timeout_s: float) -> McpServerSpec:
    if server.type == "acp":
        extra = server.model_extra or {}
        server_id = extra.get("serverId")
        if not isinstance(server_id, str) or not server_id:
            raise InvalidParams(
                f"mcpServers[{index}]: an acp server needs its serverId", data={"type": "acp"}
            )
        return McpServerSpec(name=extra["name"], acp_server_id=server_id, timeout_s=timeout_s)
    if server.type == "stdio":
        if not os.path.isabs(server.command):
            raise InvalidParams(
                f"mcpServers[{index}]: command must be an absolute path",
                data={"command": server.command},
            )
        env = _pairs(server.env)
        args = tuple(server.args or ()) if server.args is not schema.UNSET else ()
        return McpServerSpec(
            name=server.name, command=server.command, args=args, env=env, timeout_s=timeout_s
        )
    headers = _pairs(server.headers)
    return McpServerSpec(name=server.name, url=server.url, headers=headers, timeout_s=timeout_s)


def _pairs(items: Any) -> dict[str, str]:
    """ACP's ``[{name, value}]`` lists (env, headers) as a dict."""
    if items in (schema.UNSET, None):
        return {}
    return {item.name: item.value for item in items}


def builtin_servers(
    config: Config, cwd: str, extra: list[str], session_id: str | None = None
) -> dict[str, Callable[[], Any]]:
    """Factories for the built-in servers of one session (they import mcp: call late).

    Each gives the process's one server of its kind (made at the first session's first
    turn, ``crow.servers.shared``) with this session's scope, which the hub hands it as
    it connects: fs confined to the cwd and ``extra`` (and the session's own folder of
    cut tool results), a terminal of its own in the cwd, memory at the session's place.
    """

    def fs() -> Scoped:
        from crow.servers.fs import build_server  # mcp (~0.6 s): not at start-up

        # The session's cut tool results are kept whole there (crow.tools.caps): its
        # own folder only, so no session reads another's.
        kept = (config.paths.tool_output(session_id),) if session_id else ()
        roots = Roots(cwd=Path(cwd), extra=(*(Path(d) for d in extra), *kept))
        return Scoped(shared(("fs",), build_server), roots)

    def terminal() -> Scoped:
        from crow.servers.terminal import build_server  # mcp: not at start-up

        timeout_s = config.tools.timeout_s
        server = shared(("terminal", timeout_s), lambda: build_server(default_timeout_s=timeout_s))
        return Scoped(server, Path(cwd))

    def web() -> Scoped:
        from crow.servers.web import build_server  # mcp, httpx: not at start-up

        search, allow = config.tools.search_url, config.tools.fetch_allow_hosts
        server = shared(
            ("web", search, allow), lambda: build_server(search_url=search, allow_hosts=allow)
        )
        return Scoped(server, None)  # nothing of a session's: the same for all

    def memory() -> Scoped:
        from crow.memory.shared import shared_store  # LanceDB, numpy: not at start-up
        from crow.servers.memory import build_server  # mcp: not at start-up

        folder, settings = config.paths.memory, config.memory
        reach = READ_ALL if settings.model_reads == "all" else OWN
        server = shared(
            ("memory", folder, settings),
            # approvals: Crow's runner asks the person before a write beyond the place
            lambda: build_server(lambda: shared_store(folder, settings), approvals=True),
        )
        return Scoped(server, MemoryPlace(cwd, session_id, reach))

    factories = {"fs": fs, "terminal": terminal, "web": web, "memory": memory}
    return {name: factories[name] for name in config.tools.builtin}


def start_tools(
    session: LiveSession,
    config: Config,
    specs: list[McpServerSpec],
    extra_dirs: list[str],
    acp: Any = None,
    released: Callable[[], None] | None = None,
) -> None:
    """Set the session's servers to start at its first turn (``LiveSession.ready_tools``),
    in the background; that turn waits.  An idle session holds no servers: a thousand
    open sessions cost no more than their state.  They stop again once the session has
    been idle for ``[server] unload_idle_s`` (unless a client named servers of its own:
    their state is theirs), and its next turn starts them anew.  ``acp``: the ``AcpMcpLinks`` of the
    client that named acp servers, if any; ``released``: called once they have stopped."""
    session.permissions = session.permissions or Permissions(config.tools, config.paths)

    def launch() -> None:
        hub = session.tools = ToolHub(on_event=session.note)
        builtins = builtin_servers(config, session.record.cwd, extra_dirs, session.id)

        async def start() -> None:
            chosen = await _approved(session, specs) if config.tools.ask_client_servers else specs
            servers = hub.start(
                builtins,
                [*config.tools.servers, *chosen],
                builtin_timeout_s=config.tools.timeout_s,
                acp=acp,
            )
            await asyncio.gather(servers, _warm_memory(config))

        session.tools_started = asyncio.create_task(start(), name=f"tools-{session.id}")
        if config.server.unload_idle_s > 0 and not specs:  # a client's own servers stay up
            session.release_when_idle(config.server.unload_idle_s, launch, released)

    session.tools_pending = launch


async def _warm_memory(config: Config) -> None:
    """Open the memory store while the servers start: the first prompt recalls."""
    if "memory" not in config.tools.builtin or not config.memory.auto_recall:
        return
    if not has_memories(config.paths.memory):
        return  # nothing to recall: no LanceDB, no numpy

    def warm() -> None:
        from crow.memory.shared import shared_store  # numpy: off the event loop too

        shared_store(config.paths.memory, config.memory).warm()

    try:
        await asyncio.to_thread(warm)
    except Exception:  # recall will say what is wrong, or do without
        logging.getLogger("crow.agent").exception("memory: warming the store failed")


START_OPTIONS = (
    schema.PermissionOption(option_id="allow_once", name="Start it", kind="allow_once"),
    schema.PermissionOption(option_id="reject_once", name="Do not start it", kind="reject_once"),
)


async def _approved(session: LiveSession, specs: list[McpServerSpec]) -> list[McpServerSpec]:
    """The client-named servers someone allowed to start (stdio ones ask; http ones
    run nothing here).  Asked one after another, of every watcher, like a tool call."""
    chosen = []
    for spec in specs:
        if spec.command is None or await _allowed_to_start(session, spec):  # acp: nothing runs
            chosen.append(spec)
        else:
            await session.note(
                f"MCP server {spec.name!r} was not started: its start was not allowed.", "warning"
            )
    return chosen


async def _allowed_to_start(session: LiveSession, spec: McpServerSpec) -> bool:
    command = shlex.join([spec.command or "", *spec.args])
    question = Question(
        schema.RequestPermissionRequest(
            session_id=session.id,
            title=f"Start the MCP server {spec.name!r}?",
            description=f"The client asks Crow to run {command} as an MCP server.",
            subject=schema.CommandPermissionSubject(command=command, cwd=session.record.cwd),
            options=list(START_OPTIONS),
        )
    )
    outcome = await session.ask(question)
    chosen = getattr(outcome, "option_id", None)
    return getattr(outcome, "outcome", None) == "selected" and chosen == "allow_once"
