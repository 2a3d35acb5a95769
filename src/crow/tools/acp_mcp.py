"""MCP over ACP, the agent's side: MCP servers that live in the ACP client.

A client (an editor, or a proxy of a chain) may declare ``{"type": "acp", "name",
"serverId"}`` in ``session/new``: an MCP server it serves itself, reached over the
ACP connection (PROXY-CHAINS.md §9; an unstable surface, off unless
``[mcp] acp_servers = true``).  ``AcpMcpTransport`` is an MCP client transport for
the ``mcp`` SDK's ``Client`` that carries the MCP messages as ACP requests:

    mcp/connect {serverId}                   -> {connectionId}
    mcp/message {connectionId, method, params}  (request: the raw MCP result back;
                                              notification: nothing back)
    mcp/disconnect {connectionId}            -> {}

Messages the server sends first (its notifications, its requests such as ``ping``)
arrive as ``mcp/message`` from the client; ``AcpMcpLinks`` (one per ACP connection)
hands them to the transport of their ``connectionId``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from typing import Any

import anyio

from crow.acp import AcpError, InvalidParams, Peer, ResourceNotFound

# The ``mcp`` SDK (~0.6 s to import) is imported where a transport is opened: a
# connection that never opens one (most) never pays for it.

__all__ = ["AcpMcpLinks", "AcpMcpTransport", "McpRelay", "in_memory_transport"]

log = logging.getLogger("crow.tools.acp")

MCP_CONNECT = "mcp/connect"
MCP_MESSAGE = "mcp/message"
MCP_DISCONNECT = "mcp/disconnect"


class AcpMcpLinks:
    """The MCP-over-ACP connections open on one ACP connection."""

    def __init__(self, peer: Peer) -> None:
        self.peer = peer
        self.open: dict[str, AcpMcpTransport] = {}

    def transport(self, server_id: str) -> AcpMcpTransport:
        return AcpMcpTransport(self, server_id)

    async def on_request(self, params: Any) -> Any:
        """The server's own request (``mcp/message`` from the client): its result."""
        transport, method, inner = self._route(params)
        return await transport.server_request(method, inner)

    async def on_notification(self, params: Any) -> None:
        with contextlib.suppress(AcpError):
            transport, method, inner = self._route(params)
            await transport.server_notification(method, inner)

    def _route(self, params: Any) -> tuple[AcpMcpTransport, str, Any]:
        params = params if isinstance(params, dict) else {}
        connection, method = params.get("connectionId"), params.get("method")
        if not isinstance(method, str):
            raise InvalidParams("mcp/message needs the MCP method")
        transport = self.open.get(connection) if isinstance(connection, str) else None
        if transport is None:
            raise ResourceNotFound(
                f"no MCP connection {connection!r} here", data={"connectionId": connection}
            )
        return transport, method, params.get("params")


class _RawMcp:
    """Raw JSON-RPC with an MCP peer over the SDK's streams: our requests carry ids of
    our own (``<prefix>-<n>``) and their replies are matched here."""

    id_prefix = "crow"

    def __init__(self) -> None:
        self._ids = itertools.count(1)
        self._waiting: dict[str, asyncio.Future[Any]] = {}

    async def _send(self, message: dict[str, Any]) -> None:
        raise NotImplementedError

    async def _request(self, method: str, params: Any) -> Any:
        """The peer's raw result, or its error raised as an ``AcpError``."""
        rid = f"{self.id_prefix}-{next(self._ids)}"
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[rid] = future
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            message["params"] = params
        await self._send(message)
        try:
            reply = await future
        finally:
            self._waiting.pop(rid, None)
        error = getattr(reply, "error", None)
        if error is not None:
            raise AcpError.from_error(error.model_dump(exclude_none=True))
        return reply.result

    async def _notify(self, method: str, params: Any) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        await self._send(message)

    def _resolve(self, reply: Any) -> None:
        """A response from the peer: to the request of ours it answers."""
        future = self._waiting.pop(str(reply.id), None)
        if future is not None and not future.done():
            future.set_result(reply)


class AcpMcpTransport(_RawMcp):
    """An MCP client transport (``async with`` gives the SDK its two streams)."""

    id_prefix = "acp"

    def __init__(self, links: AcpMcpLinks, server_id: str) -> None:
        super().__init__()
        self.links = links
        self.server_id = server_id
        self.connection_id: str | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    async def __aenter__(self) -> tuple[Any, Any]:
        answer = await self.links.peer.request(MCP_CONNECT, {"serverId": self.server_id})
        connection = answer.get("connectionId") if isinstance(answer, dict) else None
        if not isinstance(connection, str):
            raise ConnectionError(f"mcp/connect to {self.server_id!r} gave no connectionId")
        self.connection_id = connection
        self.links.open[connection] = self
        self._to_client, self.read = anyio.create_memory_object_stream[Any](1024)
        self.write, self._from_client = anyio.create_memory_object_stream[Any](1024)
        self._pump = asyncio.create_task(self._forward(), name=f"mcp-acp-{self.server_id}")
        return self.read, self.write

    async def __aexit__(self, *exc: object) -> None:
        self._pump.cancel()
        for task in list(self._tasks):
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._pump
        self.links.open.pop(self.connection_id or "", None)
        for stream in (self._to_client, self.read, self.write, self._from_client):
            await stream.aclose()
        with contextlib.suppress(AcpError, ConnectionError):
            await self.links.peer.request(MCP_DISCONNECT, {"connectionId": self.connection_id})

    # ---- what the SDK's client sends ------------------------------------------
    async def _forward(self) -> None:
        from mcp_types import JSONRPCNotification, JSONRPCRequest  # the SDK: see the top

        async for session_message in self._from_client:
            message = session_message.message
            if isinstance(message, JSONRPCRequest):
                task = asyncio.create_task(self._forward_request(message))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            elif isinstance(message, JSONRPCNotification):
                await self.links.peer.notify(MCP_MESSAGE, self._envelope(message))
            else:  # a response to one of the server's own requests
                self._resolve(message)

    async def _forward_request(self, request: Any) -> None:
        from mcp_types import CONNECTION_CLOSED, JSONRPCResponse  # the SDK: see the note at the top

        try:
            result = await self.links.peer.request(MCP_MESSAGE, self._envelope(request))
            reply: Any = JSONRPCResponse(
                jsonrpc="2.0", id=request.id, result=result if isinstance(result, dict) else {}
            )
        except AcpError as exc:
            reply = {"jsonrpc": "2.0", "id": request.id, "error": exc.to_error()}
        except ConnectionError as exc:
            error = {"code": CONNECTION_CLOSED, "message": f"the ACP client went away: {exc}"}
            reply = {"jsonrpc": "2.0", "id": request.id, "error": error}
        await self._send(reply)

    async def _send(self, message: Any) -> None:
        """One message to the SDK's client (a dict is validated into its model)."""
        from mcp.shared.message import SessionMessage  # the SDK: see the note at the top
        from mcp_types import jsonrpc_message_adapter

        if isinstance(message, dict):
            message = jsonrpc_message_adapter.validate_python(message)
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            await self._to_client.send(SessionMessage(message=message))

    def _envelope(self, message: Any) -> dict[str, Any]:
        params: dict[str, Any] = {"connectionId": self.connection_id, "method": message.method}
        if message.params is not None:
            params["params"] = message.params
        return params

    # ---- what the server sends first --------------------------------------------
    async def server_request(self, method: str, params: Any) -> Any:
        return await self._request(method, params)

    async def server_notification(self, method: str, params: Any) -> None:
        await self._notify(method, params)


def in_memory_transport(server: Any) -> Any:
    """The MCP SDK's in-memory transport to ``server`` (client streams to a server run
    in this process).  It is private in mcp 2.x (``mcp.client._memory``): imported
    guarded, so a release that moves it fails here with a sentence, not as a task
    that never starts.  Raises ConnectionError."""
    try:
        from mcp.client._memory import InMemoryTransport  # the SDK: see the note at the top
    except ImportError as exc:
        from importlib.metadata import version  # only to say which mcp is installed

        raise ConnectionError(
            f"the installed mcp {version('mcp')} has no in-memory transport where Crow "
            "looks for it (mcp.client._memory.InMemoryTransport, as in mcp 2.3): MCP "
            "over ACP cannot serve; install the mcp version pyproject.toml names"
        ) from exc
    return InMemoryTransport(server)


class McpRelay(_RawMcp):
    """The provider's side: one in-process MCP server, spoken to in raw JSON-RPC.

    A proxy (``crow proxy memory``) serves an MCP server to the agent behind it: the
    agent's ``mcp/message`` requests become JSON-RPC requests to the server (with
    ids of the relay's own) and their results go back raw.  What the server says
    first (notifications, requests) goes to ``send_first(method, params, is_request)``.
    One task owns the server's transport, as the SDK needs (ECOSYSTEM.md trap 6).
    """

    id_prefix = "relay"

    def __init__(self, server: Any, send_first: Any) -> None:
        super().__init__()
        self.server = server
        self.send_first = send_first
        self._ready = asyncio.Event()
        self._stop = asyncio.Event()
        self._owner: asyncio.Task[None] | None = None
        self._write: Any = None
        self._tasks: set[asyncio.Future[None]] = set()

    async def start(self) -> None:
        """Start the server; raises ConnectionError when it cannot run."""
        transport = in_memory_transport(self.server)
        self._owner = asyncio.create_task(self._own(transport), name="mcp-relay")
        await self._ready.wait()
        if self._write is None:
            raise ConnectionError("the MCP server did not start")

    async def _own(self, transport: Any) -> None:
        try:
            async with transport as (read, write):
                self._write = write
                self._ready.set()
                reader = asyncio.create_task(self._read(read))
                await self._stop.wait()
                reader.cancel()
        finally:
            self._ready.set()
            for future in self._waiting.values():
                if not future.done():
                    future.set_exception(ConnectionError("the MCP server stopped"))

    async def _read(self, read: Any) -> None:
        async for item in read:
            message = getattr(item, "message", None)
            if message is None:
                continue
            method = getattr(message, "method", None)
            if method is None:  # a response to one of ours
                self._resolve(message)
            else:
                task = asyncio.ensure_future(self._first(message))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def _first(self, message: Any) -> None:
        """The server's own message, out through the ACP connection."""
        is_request = hasattr(message, "id")
        try:
            result = await self.send_first(message.method, message.params, is_request)
        except AcpError as exc:
            if is_request:
                await self._send({"jsonrpc": "2.0", "id": message.id, "error": exc.to_error()})
            return
        if is_request:
            await self._send({"jsonrpc": "2.0", "id": message.id, "result": result or {}})

    async def request(self, method: str, params: Any) -> Any:
        """Ask the server; its raw result, or its error raised as an ``AcpError``."""
        return await self._request(method, params)

    async def notify(self, method: str, params: Any) -> None:
        await self._notify(method, params)

    async def _send(self, message: dict[str, Any]) -> None:
        from mcp.shared.message import SessionMessage  # the SDK: see the note at the top
        from mcp_types import jsonrpc_message_adapter

        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            await self._write.send(SessionMessage(jsonrpc_message_adapter.validate_python(message)))

    async def aclose(self) -> None:
        self._stop.set()
        if self._owner is not None:
            with contextlib.suppress(Exception):
                await self._owner
