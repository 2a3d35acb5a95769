"""``crow proxy memory``: Crow's memory tools for any agent behind it.

    crow conductor agent "crow proxy memory" "ANY-AGENT ..."

Every ``session/new`` and ``session/resume`` (v1: ``session/load`` too) that passes
through gets one more MCP server, named ``crow-memory``, with the tools of Crow's
memory (remember, recall, list, forget) over the home's memory store, scoped to the
session's project:

- as MCP over ACP, ``{"type": "acp", "name", "serverId"}``, when the agent says it
  takes such servers (v2 ``capabilities.session.mcp.acp``, v1
  ``agentCapabilities.mcpCapabilities.acp``): the server runs inside this proxy and
  the agent reaches it with ``mcp/connect``, ``mcp/message``, ``mcp/disconnect``;
- otherwise as a stdio server, ``crow mcp memory --cwd CWD``, which the agent starts
  (every v1 agent takes those; a v2 agent says so in ``capabilities.session.mcp.stdio``).

A v2 agent that takes neither gets its sessions' requests unchanged (one more server
would make it refuse them, and the whole chain with them): memory is not available to
it, which is said once on stderr.

Other ``mcp/*`` traffic (servers this proxy does not serve) passes through.
"""

from __future__ import annotations

import logging
import sys
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from crow.acp.proxy import ProxySide
from crow.tools.acp_mcp import McpRelay

__all__ = ["SERVER_NAME", "MemoryProxy"]

log = logging.getLogger("crow.proxy.memory")

SERVER_NAME = "crow-memory"

#: Makes the in-process memory MCP server for a session's cwd (and id, when known).
ServerFactory = Callable[[str, "str | None"], Any]


class MemoryProxy:
    """Wires the memory server into a ``ProxySide``."""

    def __init__(self, proxy: ProxySide, make_server: ServerFactory) -> None:
        self.proxy = proxy
        self.make_server = make_server
        self.over_acp = False  # the agent takes acp servers
        self.over_stdio = True  # ... or stdio ones (neither: memory cannot reach it)
        self.said_unavailable = False
        self.places: dict[str, tuple[str, str | None]] = {}  # serverId -> (cwd, session)
        self.relays: dict[str, Any] = {}  # connectionId -> McpRelay
        proxy.on_predecessor("_proxy/initialize", self._initialize)
        for method in ("session/new", "session/load", "session/resume"):
            proxy.on_predecessor(method, self._setup(method))
        proxy.on_successor("mcp/connect", self._connect)
        proxy.on_successor("mcp/message", self._message)
        proxy.on_successor_notification("mcp/message", self._notification)
        proxy.on_successor("mcp/disconnect", self._disconnect)

    async def _initialize(self, params: Any) -> Any:
        result = await self.proxy.request_successor("initialize", params)
        result = result if isinstance(result, dict) else {}
        if self.proxy.v1:
            mcp = (result.get("agentCapabilities") or {}).get("mcpCapabilities") or {}
            self.over_acp = mcp.get("acp") is True
            self.over_stdio = True  # v1: every agent takes stdio servers
        else:
            session = (result.get("capabilities") or {}).get("session") or {}
            mcp = session.get("mcp")
            mcp = mcp if isinstance(mcp, dict) else {}
            self.over_acp = isinstance(mcp.get("acp"), dict)
            self.over_stdio = isinstance(mcp.get("stdio"), dict)
        return result

    def _setup(self, method: str) -> Callable[[Any], Awaitable[Any]]:
        async def setup(params: Any) -> Any:
            if not (self.over_acp or self.over_stdio):
                self._say_unavailable()
                return await self.proxy.request_successor(method, params)
            params = dict(params or {})
            cwd = str(params.get("cwd") or ".")
            sid = params.get("sessionId")
            entry = self._entry(cwd, sid if isinstance(sid, str) else None)
            params["mcpServers"] = [*(params.get("mcpServers") or []), entry]
            return await self.proxy.request_successor(method, params)

        return setup

    def _say_unavailable(self) -> None:
        if self.said_unavailable:
            return
        self.said_unavailable = True
        log.warning(
            "the agent takes no MCP servers (its capabilities.session.mcp has neither "
            "stdio nor acp): Crow's memory is not available to it; its sessions pass "
            "through unchanged"
        )

    def _entry(self, cwd: str, session_id: str | None) -> dict[str, Any]:
        if self.over_acp:
            server_id = f"crow-memory-{uuid.uuid4().hex[:12]}"
            self.places[server_id] = (cwd, session_id)
            return {"type": "acp", "name": SERVER_NAME, "serverId": server_id}
        args = ["-m", "crow", "mcp", "memory", "--cwd", cwd]
        if session_id is not None:
            args += ["--session", session_id]
        command = {"name": SERVER_NAME, "command": sys.executable, "args": args, "env": []}
        return command if self.proxy.v1 else {"type": "stdio", **command}

    # ---- MCP over ACP: the agent reaches the server here -------------------------
    async def _connect(self, params: Any) -> Any:
        place = self.places.get(str((params or {}).get("serverId")))
        if place is None:  # not ours: someone before us serves it
            return await self.proxy.request_predecessor("mcp/connect", params)
        connection = f"conn-{uuid.uuid4().hex[:12]}"

        async def first(method: str, inner: Any, is_request: bool) -> Any:
            message = {"connectionId": connection, "method": method, "params": inner}
            if is_request:
                return await self.proxy.request_successor("mcp/message", message)
            await self.proxy.notify_successor("mcp/message", message)
            return None

        relay = McpRelay(self.make_server(*place), first)
        await relay.start()
        self.relays[connection] = relay
        return {"connectionId": connection}

    def _relay(self, params: Any) -> Any:
        return self.relays.get(str((params or {}).get("connectionId")))

    async def _message(self, params: Any) -> Any:
        relay = self._relay(params)
        if relay is None:
            return await self.proxy.request_predecessor("mcp/message", params)
        return await relay.request(params.get("method"), params.get("params"))

    async def _notification(self, params: Any) -> None:
        relay = self._relay(params)
        if relay is None:
            await self.proxy.notify_predecessor("mcp/message", params)
            return
        await relay.notify(params.get("method"), params.get("params"))

    async def _disconnect(self, params: Any) -> Any:
        relay = self.relays.pop(str((params or {}).get("connectionId")), None)
        if relay is None:
            return await self.proxy.request_predecessor("mcp/disconnect", params)
        await relay.aclose()
        return {}

    async def aclose(self) -> None:
        for relay in list(self.relays.values()):
            await relay.aclose()
        self.relays.clear()
