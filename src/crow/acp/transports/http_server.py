"""ACP over streamable HTTP + SSE and WebSocket, server side (ACP-V2.md §11).

One endpoint (``/acp``):

- ``POST`` without ``Acp-Connection-Id`` must carry ``initialize``: it opens a
  connection and is answered ``200`` with the JSON-RPC response in the body and
  the new ``Acp-Connection-Id`` header.  Every other ``POST`` names its
  connection (400 without, 404 unknown) and is answered ``202``; its response
  arrives on an SSE stream.
- ``GET`` (``Accept: text/event-stream``) opens the connection's stream or, with
  ``Acp-Session-Id``, a session's stream.  Messages of a session (its
  ``session/update``s, the agent's requests about it, responses to ``POST``s
  that named it) go to that session's stream; the rest to the connection's.
  A stream with no reader buffers, so a client that reconnects its stream
  misses nothing.  Idle streams get ``: keepalive`` comments.
- ``DELETE`` ends the connection (``202``).
- A WebSocket on the same path is one connection: a text frame per message.

The app knows nothing of agents: ``serve`` is called with each new
connection's transport and serves it until it ends.  Authentication and the
Origin check happen before any ACP processing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket, WebSocketDisconnect

__all__ = ["AcpHttpApp", "HttpLimits", "HttpTransport"]

log = logging.getLogger("crow.acp.http")

CONNECTION_HEADER = "acp-connection-id"
SESSION_HEADER = "acp-session-id"
#: Idle SSE streams get a comment this often, so proxies keep them open (§11).
KEEPALIVE_S = 15.0
#: How long the initialize POST waits for its answer.
INITIALIZE_WAIT_S = 30.0

Serve = Callable[["HttpTransport"], Awaitable[None]]


@dataclass(frozen=True, kw_only=True)
class HttpLimits:
    max_message_bytes: int = 64 * 1024 * 1024  # one POST body or WebSocket message
    max_connections: int = 256
    max_buffered_frames: int = 100_000  # per stream without a reader


class _Stream:
    """Frames for one SSE stream; buffered until (and while) no one reads."""

    def __init__(self, limit: int) -> None:
        self.frames: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.limit = limit
        self.reader = False

    def put(self, frame: bytes | None) -> bool:
        if frame is not None and self.frames.qsize() >= self.limit:
            return False
        self.frames.put_nowait(frame)
        return True


@dataclass(eq=False)
class HttpTransport:
    """The ``Transport`` of one HTTP or WebSocket connection (see crow.acp.jsonrpc)."""

    id: str
    limits: HttpLimits
    inbound: asyncio.Queue[bytes | None] = field(default_factory=asyncio.Queue)
    streams: dict[str | None, _Stream] = field(default_factory=dict)  # None: the connection's
    request_sessions: dict[Any, str] = field(default_factory=dict)  # inbound id -> session
    direct: dict[Any, asyncio.Future[bytes]] = field(default_factory=dict)  # answered in-body
    websocket: WebSocket | None = None
    closed: bool = False

    def stream(self, session_id: str | None) -> _Stream:
        stream = self.streams.get(session_id)
        if stream is None:
            stream = self.streams[session_id] = _Stream(self.limits.max_buffered_frames)
        return stream

    async def read_frame(self) -> bytes | None:
        return await self.inbound.get()

    async def write_frames(self, frames: Sequence[bytes]) -> None:
        if self.closed:
            raise ConnectionError("the HTTP connection is closed")
        if self.websocket is not None:
            for frame in frames:
                await self.websocket.send_text(frame.decode())
            return
        for frame in frames:
            self._route(frame)

    def _route(self, frame: bytes) -> None:
        message = orjson.loads(frame)
        if isinstance(message, dict) and "method" not in message:  # a response
            future = self.direct.pop(message.get("id"), None)
            if future is not None and not future.done():
                future.set_result(frame)
                return
            session = self.request_sessions.pop(_key(message.get("id")), None)
        elif isinstance(message, dict):
            session = (message.get("params") or {}).get("sessionId")
        else:
            session = None
        if not self.stream(session if isinstance(session, str) else None).put(frame):
            log.warning("connection %s: stream buffer full, closing", self.id)
            self.close()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.inbound.put_nowait(None)
        for stream in self.streams.values():
            stream.put(None)
        for future in self.direct.values():
            if not future.done():
                future.cancel()

    async def aclose(self) -> None:
        self.close()
        if self.websocket is not None:
            with contextlib.suppress(Exception):
                await self.websocket.close()


def _key(value: Any) -> Any:
    return str(value) if isinstance(value, (int, str)) else value


class AcpHttpApp:
    """The ASGI app.  ``check(scope)`` returns an error response to refuse a request."""

    def __init__(
        self,
        serve: Serve,
        *,
        path: str = "/acp",
        limits: HttpLimits | None = None,
        check: Callable[[Scope], Response | None] | None = None,
    ) -> None:
        self.serve = serve
        self.path = path
        self.limits = limits or HttpLimits()
        self.check = check
        self.connections: dict[str, HttpTransport] = {}
        self.tasks: set[asyncio.Task[None]] = set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] not in ("http", "websocket"):
            return
        if scope["path"].rstrip("/") != self.path:
            await _reply(scope, receive, send, JSONResponse({"error": "not found"}, 404))
            return
        refusal = self.check(scope) if self.check else None
        if refusal is not None:
            await _reply(scope, receive, send, refusal)
            return
        if scope["type"] == "websocket":
            await self._websocket(WebSocket(scope, receive, send))
            return
        request = Request(scope, receive)
        handler = {"POST": self._post, "GET": self._get, "DELETE": self._delete}.get(request.method)
        response = await handler(request) if handler else _text(405, "use POST, GET or DELETE")
        await response(scope, receive, send)

    # ---- connections --------------------------------------------------------------
    def _open(self, websocket: WebSocket | None = None) -> HttpTransport | Response:
        if len(self.connections) >= self.limits.max_connections:
            return _text(503, f"too many connections (limit {self.limits.max_connections})")
        transport = HttpTransport(
            id=secrets.token_urlsafe(16), limits=self.limits, websocket=websocket
        )
        self.connections[transport.id] = transport

        async def run() -> None:
            try:
                await self.serve(transport)
            except Exception:
                log.exception("connection %s failed", transport.id)
            finally:
                transport.close()
                self.connections.pop(transport.id, None)

        task = asyncio.create_task(run(), name=f"acp-http-{transport.id}")
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return transport

    def _connection(self, request: Request) -> HttpTransport | Response:
        connection_id = request.headers.get(CONNECTION_HEADER)
        if not connection_id:
            return _text(400, "missing Acp-Connection-Id header")
        transport = self.connections.get(connection_id)
        if transport is None or transport.closed:
            return _text(404, "unknown Acp-Connection-Id: initialize a new connection")
        return transport

    # ---- POST ---------------------------------------------------------------------
    async def _post(self, request: Request) -> Response:
        if not request.headers.get("content-type", "").startswith("application/json"):
            return _text(415, "POST needs Content-Type: application/json")
        body = await _body(request, self.limits.max_message_bytes)
        if body is None:
            return _text(413, f"message larger than {self.limits.max_message_bytes} bytes")
        try:
            message = orjson.loads(body)
        except orjson.JSONDecodeError:
            return _rpc_error(400, -32700, "Parse error: the body is not valid JSON")
        if isinstance(message, list):
            return _rpc_error(400, -32600, "JSON-RPC batches are not supported")
        if not isinstance(message, dict):
            return _rpc_error(400, -32600, "A message must be a JSON object")
        if CONNECTION_HEADER not in request.headers:
            return await self._initialize(message, body)
        transport = self._connection(request)
        if isinstance(transport, Response):
            return transport
        session = request.headers.get(SESSION_HEADER)
        if session and "method" in message and "id" in message:
            transport.request_sessions[_key(message["id"])] = session
        transport.inbound.put_nowait(body)
        return Response(status_code=202)

    async def _initialize(self, message: dict[str, Any], body: bytes) -> Response:
        if message.get("method") != "initialize" or "id" not in message:
            return _text(
                400, "missing Acp-Connection-Id header: only initialize opens a connection"
            )
        transport = self._open()
        if isinstance(transport, Response):
            return transport
        answer: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        transport.direct[message["id"]] = answer
        transport.inbound.put_nowait(body)
        try:
            async with asyncio.timeout(INITIALIZE_WAIT_S):
                frame = await answer
        except (TimeoutError, asyncio.CancelledError):
            transport.close()
            return _text(503, "the agent did not answer initialize")
        if b'"error"' in frame and orjson.loads(frame).get("error") is not None:
            transport.close()  # a failed initialize opens no connection
            return Response(frame, 200, media_type="application/json")
        return Response(
            frame, 200, media_type="application/json", headers={"Acp-Connection-Id": transport.id}
        )

    # ---- GET: SSE streams -----------------------------------------------------------
    async def _get(self, request: Request) -> Response:
        if "text/event-stream" not in request.headers.get("accept", ""):
            return _text(406, "GET needs Accept: text/event-stream")
        transport = self._connection(request)
        if isinstance(transport, Response):
            return transport
        stream = transport.stream(request.headers.get(SESSION_HEADER) or None)
        if stream.reader:
            return _text(409, "this stream already has a reader")
        stream.reader = True
        return StreamingResponse(
            _events(stream),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "Acp-Connection-Id": transport.id},
        )

    async def _delete(self, request: Request) -> Response:
        transport = self._connection(request)
        if isinstance(transport, Response):
            return transport
        await transport.aclose()
        return Response(status_code=202)

    # ---- WebSocket ------------------------------------------------------------------
    async def _websocket(self, websocket: WebSocket) -> None:
        opened = self._open(websocket)
        if isinstance(opened, Response):
            await websocket.close(code=1013, reason="too many connections")
            return
        await websocket.accept(headers=[(b"acp-connection-id", opened.id.encode())])
        try:
            while True:
                message = await websocket.receive()
                if message["type"] == "websocket.disconnect":
                    break
                text = message.get("text")
                if text is None:
                    continue  # binary frames are ignored (§11)
                if len(text) > self.limits.max_message_bytes:
                    await websocket.close(code=1009, reason="message too large")
                    break
                opened.inbound.put_nowait(text.encode())
        except WebSocketDisconnect:
            pass
        finally:
            opened.close()

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                for transport in list(self.connections.values()):
                    transport.close()
                if self.tasks:
                    await asyncio.wait(self.tasks, timeout=2.0)
                await send({"type": "lifespan.shutdown.complete"})
                return


async def _events(stream: _Stream) -> AsyncIterator[bytes]:
    try:
        while True:
            try:
                async with asyncio.timeout(KEEPALIVE_S):
                    frame = await stream.frames.get()
            except TimeoutError:
                yield b": keepalive\n\n"
                continue
            if frame is None:
                return
            yield b"data: " + frame + b"\n\n"
    finally:
        stream.reader = False  # a reconnecting reader gets what is still queued


async def _body(request: Request, limit: int) -> bytes | None:
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def _text(status: int, message: str) -> Response:
    return JSONResponse({"error": message}, status_code=status)


def _rpc_error(status: int, code: int, message: str) -> Response:
    return JSONResponse(
        {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}, status
    )


async def _reply(scope: Scope, receive: Receive, send: Send, response: Response) -> None:
    if scope["type"] == "websocket":
        websocket = WebSocket(scope, receive, send)
        await websocket.close(code=1008, reason=_reason(response))
        return
    await response(scope, receive, send)


def _reason(response: Response) -> str:
    with contextlib.suppress(Exception):
        return str(orjson.loads(response.body).get("error", ""))[:120]
    return ""
