"""ACP over streamable HTTP + SSE and WebSocket, server side (ACP-V2.md §11).

One endpoint (``/acp``):

- ``POST`` without ``Acp-Connection-Id`` must carry ``initialize``: it opens a
  connection and is answered ``200`` with the JSON-RPC response in the body and
  the new ``Acp-Connection-Id`` header.  Every other ``POST`` names its
  connection (400 without, 404 unknown, 410 expired or dropped) and is answered
  ``202``; its response arrives on an SSE stream.  A ``POST`` about a session
  (``session/prompt`` and the others in ``SESSION_METHODS``, or any message with
  ``params.sessionId``) must name it in ``Acp-Session-Id`` too (400 without or
  mismatched), as in the TS SDK.  A session the agent does not know is no HTTP
  error: the agent answers the request with -32002 on that session's stream, as
  the TS SDK's server does (its client takes a 404 for "the connection is gone"
  and closes it, every other session with it).
- ``session/load`` and ``session/resume`` may come without ``Acp-Session-Id``
  (the Python SDK's client sends them so): they are answered on the connection's
  stream, and so is the rest of that session's traffic until its client opens
  the session's stream.
- ``GET`` (``Accept: text/event-stream``) opens the connection's stream or, with
  ``Acp-Session-Id``, a session's stream (any id: a request about an unknown
  session is answered there).  Messages of a session (its ``session/update``s,
  the agent's requests about it, responses to ``POST``s that named it) go to
  that session's stream; the rest to the connection's.  A stream with no reader
  buffers, so a client that reconnects its stream misses nothing; a session's
  stream its reader left empty is forgotten.  Idle streams get ``: keepalive``
  comments.
- ``DELETE`` ends the connection (``202``).
- A WebSocket on the same path is one connection: a text frame per message.

Output is never written while the agent waits: each connection buffers what its
client has not read yet, counted in bytes.  A client more than
``max_buffered_bytes`` behind that reads nothing for ``max_output_stall_s`` (or
stays four times that far behind that long) is dropped, so a stalled reader
neither grows the server without bound nor slows the turn for the session's
other watchers; it can come back and resume with its ``_crow/after`` cursor.
An HTTP connection with no request and no open stream for ``idle_timeout_s``
expires.  A WebSocket that has not initialized within ``init_timeout_s`` is
closed (1008).  Connections waiting for their initialize answer count against
``max_pending_connections``, not ``max_connections``, and when that is full the
oldest silent WebSocket makes room: clients that connect and say nothing cannot
lock the others out.

The app knows nothing of agents: ``serve`` is called with each new
connection's transport and serves it until it ends.  Authentication and the
Origin check happen before any ACP processing.

This module is the ASGI app: the connections, the requests, the WebSockets.  One
connection's output and its limits are ``http_connection``; what a request must carry
and the refusals, ``http_requests``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket

from .http_connection import HttpLimits, HttpTransport, id_key, pump_websocket, sse_events
from .http_requests import (
    CONNECTION_HEADER,
    SESSION_HEADER,
    http_error,
    is_id,
    read_body,
    refuse_websocket,
    reply,
    rpc_error,
    session_route,
)

__all__ = ["AcpHttpApp", "HttpLimits", "HttpTransport"]

log = logging.getLogger("crow.acp.http")

#: How long the initialize POST waits for its answer.
INITIALIZE_WAIT_S = 30.0
#: How long a closing WebSocket waits to flush its last frames and close frame.
CLOSE_WAIT_S = 10.0
#: How long a dropped WebSocket waits for its client to read up to the close frame
#: (uvicorn's own ping timeout ends a client that never reads again sooner).
DROP_CLOSE_WAIT_S = 120.0
#: How many ended connections keep a tombstone, so their client learns why.
TOMBSTONES = 4096

Serve = Callable[[HttpTransport], Awaitable[None]]


class AcpHttpApp:
    """The ASGI app.

    ``check(scope)`` returns an error response to refuse a request.  ``on_expired()``
    is called after idle connections expired (the server's memory policy: crow serve
    collects their reference cycles there).
    """

    def __init__(
        self,
        serve: Serve,
        *,
        path: str = "/acp",
        limits: HttpLimits | None = None,
        check: Callable[[Scope], Response | None] | None = None,
        on_expired: Callable[[], object] | None = None,
    ) -> None:
        self.serve = serve
        self.path = path
        self.limits = limits or HttpLimits()
        self.check = check
        self.on_expired = on_expired
        self.connections: dict[str, HttpTransport] = {}
        self.gone: OrderedDict[str, str] = OrderedDict()  # ended connection -> why
        self.tasks: set[asyncio.Task[None]] = set()
        self.reaper: asyncio.Task[None] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] not in ("http", "websocket"):
            return
        refusal = self._refusal(scope)
        if refusal is not None:
            await reply(scope, receive, send, refusal)
            return
        if scope["type"] == "websocket":
            await self._websocket(WebSocket(scope, receive, send))
            return
        request = Request(scope, receive)
        handler = {"POST": self._post, "GET": self._get, "DELETE": self._delete}.get(request.method)
        response = await handler(request) if handler else http_error(405, "use POST, GET or DELETE")
        await response(scope, receive, send)

    def _refusal(self, scope: Scope) -> Response | None:
        if scope["path"].rstrip("/") != self.path:
            return JSONResponse({"error": "not found"}, 404)
        for name, value in scope.get("headers", []):
            try:
                name.decode(), value.decode()
            except UnicodeDecodeError:
                shown = name.decode("latin-1")[:40]
                return http_error(400, f"header {shown!r} is not valid UTF-8")
        return self.check(scope) if self.check else None

    # ---- connections --------------------------------------------------------------
    def _open(self, *, websocket: bool = False) -> HttpTransport | Response:
        self._start_reaper()
        self._make_pending_room()
        refusal = self._over_limit()
        if refusal is not None:
            self._expire_idle()
            refusal = self._over_limit()
        if refusal is not None:
            return http_error(503, refusal)
        transport = HttpTransport(
            id=secrets.token_urlsafe(16), limits=self.limits, websocket=websocket
        )
        transport.touch()
        self.connections[transport.id] = transport
        if websocket:
            asyncio.get_running_loop().call_later(
                self.limits.init_timeout_s, self._check_init, transport
            )

        async def run() -> None:
            try:
                await self.serve(transport)
            except Exception:
                log.exception("connection %s failed", transport.id)
            finally:
                transport.close()
                self._forget(transport, None)

        task = asyncio.create_task(run(), name=f"acp-http-{transport.id}")
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return transport

    def _over_limit(self) -> str | None:
        """Why a new connection is refused now, if it is."""
        pending = sum(1 for t in self.connections.values() if not t.initialized)
        if pending >= self.limits.max_pending_connections:
            limit = self.limits.max_pending_connections
            return f"too many connections waiting for initialize (limit {limit})"
        if len(self.connections) - pending >= self.limits.max_connections:
            return f"too many connections (limit {self.limits.max_connections})"
        return None

    def _make_pending_room(self) -> None:
        """Drop the oldest WebSocket still waiting to initialize while the pending
        budget is full (an initialize POST in flight is bounded by its own wait)."""
        pending = [t for t in self.connections.values() if not t.initialized]
        if len(pending) < self.limits.max_pending_connections:
            return
        silent = next((t for t in pending if t.websocket and not t.initializing), None)
        if silent is not None:
            silent.drop("no initialize yet, and newer connections need the room")
            self._forget(silent, None)

    def _check_init(self, transport: HttpTransport) -> None:
        if not (transport.initialized or transport.closed):
            limit = self.limits.init_timeout_s
            transport.drop(f"no initialize within {limit:g} s of connecting")

    def _forget(self, transport: HttpTransport, why: str | None) -> None:
        """Free the connection's slot; ``why`` (or its drop reason) stays as a tombstone."""
        if self.connections.pop(transport.id, None) is None:
            return
        why = transport.dropped or why
        if why is None:
            return  # ended as asked (DELETE): unknown from now on, as in the TS SDK
        self.gone[transport.id] = why
        while len(self.gone) > TOMBSTONES:
            self.gone.popitem(last=False)

    def _connection(self, request: Request) -> HttpTransport | Response:
        connection_id = request.headers.get(CONNECTION_HEADER)
        if not connection_id:
            return http_error(400, "missing Acp-Connection-Id header")
        transport = self.connections.get(connection_id)
        if transport is not None and not transport.closed:
            transport.touch()
            return transport
        why = transport.dropped if transport is not None else self.gone.get(connection_id)
        if why:
            return http_error(410, f"Acp-Connection-Id {connection_id} is gone: {why}")
        return http_error(404, "unknown Acp-Connection-Id: initialize a new connection")

    def close_all(self) -> None:
        """End every connection: the server stops.  Call it before the ASGI server
        waits for its responses to finish (uvicorn's shutdown, before the lifespan's
        end), or an open SSE stream is waited for, then cancelled with a traceback."""
        for transport in list(self.connections.values()):
            transport.close()

    # ---- idle expiry ------------------------------------------------------------------
    def _start_reaper(self) -> None:
        if self.reaper is None or self.reaper.done():
            self.reaper = asyncio.create_task(self._reap(), name="acp-http-reaper")

    async def _reap(self) -> None:
        interval = max(0.05, min(self.limits.idle_timeout_s / 4, 10.0))
        while self.connections:
            await asyncio.sleep(interval)
            self._expire_idle()

    def _expire_idle(self) -> None:
        now = asyncio.get_running_loop().time()
        limit = self.limits.idle_timeout_s
        expired = 0
        for transport in list(self.connections.values()):
            if transport.idle_for(now) > limit:
                log.info("connection %s expired after %.0f s idle", transport.id, limit)
                transport.close(discard=True)  # nobody will read what it buffered
                self._forget(transport, f"expired after {limit:g} s without a request or stream")
                expired += 1
        if expired and self.on_expired is not None:
            self.on_expired()

    # ---- POST ---------------------------------------------------------------------
    async def _post(self, request: Request) -> Response:
        if not request.headers.get("content-type", "").startswith("application/json"):
            return http_error(415, "POST needs Content-Type: application/json")
        body = await read_body(request, self.limits.max_message_bytes)
        if body is None:
            return http_error(413, f"message larger than {self.limits.max_message_bytes} bytes")
        try:
            message = orjson.loads(body)
        except orjson.JSONDecodeError:
            return rpc_error(400, -32700, "Parse error: the body is not valid JSON")
        if isinstance(message, list):
            return rpc_error(400, -32600, "JSON-RPC batches are not supported")
        if not isinstance(message, dict):
            return rpc_error(400, -32600, "A message must be a JSON object")
        if CONNECTION_HEADER not in request.headers:
            return await self._initialize(message, body)
        transport = self._connection(request)
        if isinstance(transport, Response):
            return transport
        session = session_route(transport, message, request.headers.get(SESSION_HEADER))
        if isinstance(session, Response):
            return session
        if session and "method" in message and is_id(message.get("id")):
            transport.request_sessions[id_key(message["id"])] = session
        transport.inbound.put_nowait(body)
        return Response(status_code=202)

    async def _initialize(self, message: dict[str, Any], body: bytes) -> Response:
        if message.get("method") != "initialize" or "id" not in message:
            return http_error(
                400, "missing Acp-Connection-Id header: only initialize opens a connection"
            )
        if not is_id(message["id"]):
            return rpc_error(400, -32600, "initialize needs a string or integer id")
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
            self._fail(transport)
            return http_error(503, "the agent did not answer initialize")
        if b'"error"' in frame and orjson.loads(frame).get("error") is not None:
            self._fail(transport)  # a failed initialize opens no connection
            return Response(frame, 200, media_type="application/json")
        transport.initialized = True
        return Response(
            frame, 200, media_type="application/json", headers={"Acp-Connection-Id": transport.id}
        )

    def _fail(self, transport: HttpTransport) -> None:
        """Close a connection whose initialize failed; it frees its slot at once."""
        transport.close()
        self.connections.pop(transport.id, None)

    # ---- GET: SSE streams -----------------------------------------------------------
    async def _get(self, request: Request) -> Response:
        if "text/event-stream" not in request.headers.get("accept", ""):
            return http_error(406, "GET needs Accept: text/event-stream")
        transport = self._connection(request)
        if isinstance(transport, Response):
            return transport
        session = request.headers.get(SESSION_HEADER) or None
        stream = transport.stream(session)
        if stream.reader:
            return http_error(409, "this stream already has a reader")
        transport.opened(stream)
        return StreamingResponse(
            sse_events(stream),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "Acp-Connection-Id": transport.id},
        )

    async def _delete(self, request: Request) -> Response:
        transport = self._connection(request)
        if isinstance(transport, Response):
            return transport
        transport.close()
        self._forget(transport, None)
        return Response(status_code=202)

    # ---- WebSocket ------------------------------------------------------------------
    async def _websocket(self, websocket: WebSocket) -> None:
        opened = self._open(websocket=True)
        if isinstance(opened, Response):  # 503: too many connections
            await refuse_websocket(websocket, opened)
            return
        await websocket.accept(headers=[(b"acp-connection-id", opened.id.encode())])
        stream = opened.stream(None)
        stream.reader = True
        reader = asyncio.create_task(self._read_socket(opened, websocket))
        pump = asyncio.create_task(pump_websocket(stream, websocket))
        pump.add_done_callback(lambda _: opened.close())
        await opened.done.wait()
        reader.cancel()
        if opened.dropped is None:
            await asyncio.wait({pump}, timeout=CLOSE_WAIT_S)  # flush what is left
        pump.cancel()
        reason = opened.dropped or ("message too large" if opened.close_code == 1009 else "")
        with contextlib.suppress(Exception):
            async with asyncio.timeout(DROP_CLOSE_WAIT_S if opened.dropped else CLOSE_WAIT_S):
                await websocket.close(code=opened.close_code, reason=reason[:120])

    async def _read_socket(self, transport: HttpTransport, websocket: WebSocket) -> None:
        try:
            while True:
                message = await websocket.receive()
                if message["type"] == "websocket.disconnect":
                    break
                text = message.get("text")
                if text is None:
                    continue  # binary frames are ignored (§11)
                if len(text) > self.limits.max_message_bytes:
                    transport.close_code = 1009
                    break
                transport.received(text.encode())
        except Exception as exc:  # a broken socket ends its connection, nothing more
            log.debug("WebSocket %s: %s", transport.id, exc)
        finally:
            transport.close()

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                self.close_all()
                if self.reaper is not None:
                    self.reaper.cancel()
                if self.tasks:
                    await asyncio.wait(self.tasks, timeout=2.0)
                await send({"type": "lifespan.shutdown.complete"})
                return
