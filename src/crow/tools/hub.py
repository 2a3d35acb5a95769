"""The MCP client hub of one session: its servers, their tools, calls to them.

Each server is owned by one task that opens the ``mcp`` client, lists its tools
and keeps the connection until the hub closes (the SDK's clients must be closed
by the task that opened them: ECOSYSTEM.md trap 6).  Built-in servers run
in-process (no subprocess, no framing), one of each kind shared by the process's
sessions: the hub opens the session's own connection to it and gives it the
session's scope as it opens (``crow.servers.shared``).  Its tools are listed once
per process, so a session's connection opens at the first call of one of them (a
session that never calls the terminal has no terminal).  Configured and
client-named servers run over stdio or streamable HTTP, each started with the hub.

A server that fails to start, times out, or dies mid-session is reported
through ``on_event`` (the agent shows it to the user) and its tools are
withdrawn; the other servers keep working.

A stdio server leads a process group of its own (the SDK starts it with
``start_new_session``).  It is tagged and its group registered with
``crow.runtime.children``, so it and what it starts die with Crow however Crow dies; and
when the SDK has shut it down (stdin closed, then SIGTERM and SIGKILL to the group
if it lingers), what it left behind is killed too: the SDK stops there when the
server itself exits in time.

Tool names the model sees are namespaced ``<server>__<tool>``.  The ``mcp``
package is imported in a worker thread on first use: it costs ~0.6 s.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import secrets
import signal
import weakref
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack, suppress
from dataclasses import dataclass, field
from typing import Any

from crow.config import McpServerSpec
from crow.extensions import SCOPE_ARGUMENT, TOOL_KIND
from crow.runtime import children
from crow.runtime.imports import import_off_loop
from crow.servers.shared import Scoped, opening

__all__ = ["MCP_SERVER_START_S", "ToolHub", "ToolInfo", "ToolResult", "ToolServerError"]

log = logging.getLogger("crow.tools")

#: How long a server gets to start and list its tools.
MCP_SERVER_START_S = 30.0
#: How long closing the hub waits for each server's task.
MCP_SERVER_STOP_S = 3.0
SEPARATOR = "__"
_NAME = re.compile(r"[^A-Za-z0-9_-]")

EventSink = Callable[[str, str], Awaitable[None]]  # (message, severity)
ProgressSink = Callable[[str], Awaitable[None]]  # a progress message (terminal output)


class ToolServerError(Exception):
    """A tool server failed (not the tool: that is a result with ``is_error``)."""


@dataclass(frozen=True, kw_only=True)
class ToolInfo:
    qualified: str  # what the model calls it: server__tool
    server: str
    name: str
    description: str
    input_schema: dict[str, Any]
    kind: str  # the ACP tool kind: read, edit, execute, ... (as its server describes it)
    title: str | None = None
    trusted: bool = False  # a built-in or config-trusted server: its kind sets the permission
    #: The argument naming the memory scope a call writes to (a trusted server's
    #: ``_meta["crow/scopeArgument"]``): a write beyond the session's own asks first.
    scope_argument: str | None = None

    @property
    def permission_kind(self) -> str:
        """The kind whose policy decides: an untrusted server's tools ask like ``other``,
        whatever they claim (a read-only hint must not lower a permission)."""
        return self.kind if self.trusted else "other"

    def openai(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.qualified,
                "description": self.description,
                "parameters": self.input_schema or {"type": "object", "properties": {}},
            },
        }


@dataclass(frozen=True, kw_only=True)
class ToolResult:
    text: str  # the result for the model
    is_error: bool
    content: list[dict[str, Any]] = field(default_factory=list)  # MCP content blocks, JSON
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Server:
    name: str
    target: Any  # a Scoped built-in, an MCPServer, StdioServerParameters or URL
    timeout_s: float
    client: Any = None
    tools: list[ToolInfo] = field(default_factory=list)
    task: asyncio.Task[None] | None = None
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    error: str | None = None
    dead: bool = False
    trusted: bool = False
    label: str | None = None  # a stdio server's tag value (crow.runtime.children) until released
    pgid: int | None = None  # its process group, once found


class ToolHub:
    def __init__(self, *, on_event: EventSink) -> None:
        self.on_event = on_event
        self.servers: dict[str, _Server] = {}
        self.closed = False  # aclose has begun: no connection opens any more

    # ---- starting and stopping --------------------------------------------------
    async def start(
        self,
        builtins: dict[str, Callable[[], Any]],
        specs: list[McpServerSpec],
        *,
        builtin_timeout_s: float,
        acp: Any = None,
    ) -> None:
        """Start every server and wait until each has listed its tools or failed.
        ``acp``: an ``AcpMcpLinks``, for the servers the ACP client serves itself."""
        await import_off_loop("mcp")
        from mcp.client.stdio import StdioServerParameters  # the SDK, just imported off the loop

        for name, factory in builtins.items():
            try:
                target: Any = factory()
            except Exception as exc:  # a broken built-in must not take the session down
                log.exception("built-in MCP server %s cannot be created", name)
                self._failed(name, _describe(exc))
                continue
            self._launch(name, target, builtin_timeout_s, trusted=True)
        for spec in specs:
            target = spec.url
            label = None
            if spec.acp_server_id is not None:
                if acp is None:  # a connection without MCP over ACP (v1) named one
                    self._failed(spec.name, "this connection cannot reach acp servers")
                    continue
                target = acp.transport(spec.acp_server_id)
            elif spec.command is not None:
                label = secrets.token_hex(8)
                env = children.tagged_env(spec.env, label)
                target = StdioServerParameters(command=spec.command, args=list(spec.args), env=env)
            self._launch(
                spec.name,
                target,
                spec.timeout_s,
                headers=spec.headers,
                label=label,
                trusted=spec.trusted,
            )
        await asyncio.gather(
            *(self._await_ready(s) for s in self.servers.values() if s.task is not None)
        )

    def _failed(self, name: str, error: str) -> None:
        """A server that could not even be launched (reported with the others)."""
        self.servers[name] = failed = _Server(name=name, target=None, timeout_s=0)
        failed.error = error
        failed.ready.set()

    def _launch(
        self,
        name: str,
        target: Any,
        timeout_s: float,
        headers: dict[str, str] | None = None,
        label: str | None = None,
        trusted: bool = False,
    ) -> None:
        if headers and isinstance(target, str):
            target = _http_transport(target, headers)
        server = _Server(
            name=name, target=target, timeout_s=timeout_s, label=label, trusted=trusted
        )
        self.servers[name] = server
        known = _known_tools(server)
        if known is not None:  # a shared built-in listed before: connect at its first call
            server.tools = known
            return
        self._connect(server)

    def _connect(self, server: _Server) -> None:
        if self.closed:  # a call racing the session's close: nothing may outlive the hub
            server.error = "the session's tools have been stopped"
            server.ready.set()
        elif server.task is None:
            server.task = asyncio.create_task(self._own(server), name=f"mcp-{server.name}")

    async def _await_ready(self, server: _Server) -> None:
        try:
            async with asyncio.timeout(MCP_SERVER_START_S):
                await server.ready.wait()
        except TimeoutError:
            server.error = f"it did not start within {MCP_SERVER_START_S:.0f} s"
            server.stop.set()
        if server.error is not None and not server.dead:
            server.dead = True
            await self.on_event(
                f"MCP server {server.name!r} failed to start: "
                f"{server.error}. Its tools are not available.",
                "error",
            )

    async def _own(self, server: _Server) -> None:
        """The one task that opens, holds and closes this server's client."""
        from mcp import Client  # the SDK: imported on first use (see the module)

        target, scope, shared, mode = server.target, None, None, "auto"
        if isinstance(target, Scoped):  # a shared built-in: this connection's scope
            target = shared = server.target.server
            scope = server.target.scope
            mode = _in_process_mode()  # nothing to discover: it is Crow's own
        try:
            async with AsyncExitStack() as stack:
                with opening(scope):  # read by the server's lifespan as it opens, and only then
                    client = await stack.enter_async_context(
                        Client(target, client_info=_client_info(), mode=mode)
                    )
                _adopt(server)
                server.tools = await _list_tools(server, client, shared)
                server.client = client
                server.ready.set()
                await server.stop.wait()
        except Exception as exc:  # the SDK raises many kinds; all mean "this server failed"
            server.error = _describe(exc)
            log.warning("MCP server %s: %s", server.name, server.error, exc_info=True)
        finally:
            server.client = None
            server.ready.set()
            _release(server)

    async def aclose(self) -> None:
        self.closed = True
        for server in self.servers.values():
            server.stop.set()
        tasks = [s.task for s in self.servers.values() if s.task is not None]
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=MCP_SERVER_STOP_S)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=MCP_SERVER_STOP_S)
        for server in self.servers.values():
            _release(server)  # one whose task is still stuck in the SDK's shutdown

    # ---- tools ----------------------------------------------------------------------
    def tools(self) -> list[ToolInfo]:
        return [t for s in self.servers.values() if not s.dead for t in s.tools]

    def find(self, qualified: str) -> ToolInfo | None:
        return next((t for t in self.tools() if t.qualified == qualified), None)

    async def call(
        self,
        tool: ToolInfo,
        arguments: dict[str, Any],
        *,
        on_progress: ProgressSink | None = None,
        meta: dict[str, Any] | None = None,
    ) -> ToolResult:
        """Call a tool (with the request's ``meta``, Crow's own, never the model's).
        Raises ToolServerError if its server fails; the caller owns cancellation
        (cancelling this cancels the call on the server)."""
        server = self.servers[tool.server]
        if server.task is None and not server.dead:  # a shared built-in's first call
            self._connect(server)
            await self._await_ready(server)
        elif not server.ready.is_set():  # another call is connecting it
            await self._await_ready(server)
        if server.dead or server.client is None:
            raise ToolServerError(f"MCP server {tool.server!r} is not running")

        async def progress(done: float, total: float | None, message: str | None) -> None:
            if message and on_progress is not None:
                await on_progress(message)

        try:
            async with asyncio.timeout(server.timeout_s):
                result = await server.client.call_tool(
                    tool.name,
                    arguments,
                    progress_callback=progress,
                    meta=meta,
                )
        except TimeoutError:
            return ToolResult(
                text=f"The tool timed out after {server.timeout_s:.0f} s.", is_error=True
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if _is_tool_level(exc):
                return ToolResult(text=f"Tool error: {_describe(exc)}", is_error=True)
            await self._died(server, exc)
            raise ToolServerError(f"MCP server {tool.server!r} failed: {_describe(exc)}") from exc
        content = [
            c.model_dump(mode="json", by_alias=True, exclude_none=True) for c in result.content
        ]
        text = "\n".join(c.get("text", f"[{c.get('type')} content]") for c in content)
        return ToolResult(
            text=text, is_error=bool(result.is_error), content=content, meta=dict(result.meta or {})
        )

    async def _died(self, server: _Server, exc: BaseException) -> None:
        if server.dead:
            return
        server.dead = True
        server.stop.set()
        await self.on_event(
            f"MCP server {server.name!r} stopped working "
            f"({_describe(exc)}); its tools were withdrawn.",
            "error",
        )


#: The tools of each shared built-in server, by the name the hub gives it: listed by its
#: first connection, the same for every session's (its tools are fixed when it is made).
_LISTED: weakref.WeakKeyDictionary[Any, dict[str, list[ToolInfo]]] = weakref.WeakKeyDictionary()


def _known_tools(server: _Server) -> list[ToolInfo] | None:
    """A shared built-in's tools if another session has listed them (else None)."""
    if not isinstance(server.target, Scoped):
        return None
    tools = _LISTED.get(server.target.server, {}).get(server.name)
    return None if tools is None else list(tools)


async def _list_tools(server: _Server, client: Any, shared: Any) -> list[ToolInfo]:
    """The server's tools; a shared server's are listed once and kept for all sessions."""
    known = _LISTED.get(shared, {}) if shared is not None else {}
    tools = known.get(server.name)
    if tools is None:
        listed = await client.list_tools()
        tools = [_tool_info(server, t) for t in listed.tools]
        if shared is not None:
            _LISTED.setdefault(shared, {})[server.name] = tools
    return list(tools)  # the hub's own list; the ToolInfos (frozen) are shared


def _in_process_mode() -> str:
    from mcp_types.version import LATEST_MODERN_VERSION  # the SDK: imported on first use

    return LATEST_MODERN_VERSION


def _adopt(server: _Server) -> None:
    """Register the group of the stdio server just started (the SDK does not tell its pid)."""
    if server.label is not None:
        server.pgid = children.child_with(server.label)
        if server.pgid is not None:
            # start_new_session: its pid is its group's id
            children.register(server.pgid, label=server.label)


def _release(server: _Server) -> None:
    """Kill what a stdio server left behind, once the SDK has shut the server down.

    SIGKILL at once: the server had its graceful shutdown; these are orphans.  Synchronous
    (no await), so a cancelled task still does it all.
    """
    if server.label is None:
        return
    if server.pgid is not None:
        with suppress(OSError):
            os.killpg(server.pgid, signal.SIGKILL)
        children.unregister(server.pgid)
    children.kill_tagged(server.label)
    server.label = server.pgid = None


def _tool_info(server: _Server, tool: Any) -> ToolInfo:
    meta = tool.meta or {}
    annotations = tool.annotations
    kind = meta.get(TOOL_KIND)
    if kind is None:
        read_only = bool(annotations and annotations.read_only_hint)
        kind = "read" if read_only else "other"
    title = tool.title or (annotations.title if annotations else None)
    scoped = meta.get(SCOPE_ARGUMENT)
    return ToolInfo(
        qualified=_NAME.sub("_", f"{server.name}{SEPARATOR}{tool.name}")[:64],
        server=server.name,
        name=tool.name,
        description=tool.description or "",
        input_schema=tool.input_schema,
        kind=str(kind),
        title=title,
        trusted=server.trusted,
        scope_argument=scoped if server.trusted and isinstance(scoped, str) else None,
    )


def _client_info() -> Any:
    from mcp_types import Implementation  # the SDK: imported on first use (see the module)

    return Implementation(name="crow", version="2")


def _http_transport(url: str, headers: dict[str, str]) -> Any:
    # httpx and the SDK's HTTP client: only for a server reached over HTTP.
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    from crow.tls import client_context

    client = httpx2.AsyncClient(headers=headers, verify=client_context())
    return streamable_http_client(url, http_client=client)


def _is_tool_level(exc: BaseException) -> bool:
    """An MCP error answer (bad arguments, unknown tool) rather than a broken server."""
    from mcp.shared.exceptions import MCPError  # the SDK: imported on first use (see the module)
    from mcp_types import INVALID_PARAMS, METHOD_NOT_FOUND  # the SDK's codes: the same

    code = getattr(exc, "code", 0)
    return isinstance(exc, MCPError) and code in (INVALID_PARAMS, METHOD_NOT_FOUND)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return _describe(exc.exceptions[0])
    return str(exc) or type(exc).__name__
