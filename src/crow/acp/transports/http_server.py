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
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import secrets
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket

from ..frames import session_of_update

__all__ = ["AcpHttpApp", "HttpLimits", "HttpTransport"]

log = logging.getLogger("crow.acp.http")

CONNECTION_HEADER = "acp-connection-id"
SESSION_HEADER = "acp-session-id"
#: How long the initialize POST waits for its answer.
INITIALIZE_WAIT_S = 30.0
#: How long a closing WebSocket waits to flush its last frames and close frame.
CLOSE_WAIT_S = 10.0
#: How long a dropped WebSocket waits for its client to read up to the close frame
#: (uvicorn's own ping timeout ends a client that never reads again sooner).
DROP_CLOSE_WAIT_S = 120.0
#: The most one SSE write takes from its buffer at once.
SSE_BATCH_BYTES = 256 * 1024
#: How many ended connections keep a tombstone, so their client learns why.
TOMBSTONES = 4096
#: Methods that concern one session: their POST needs ``Acp-Session-Id`` (TS SDK 2.4.0).
SESSION_METHODS = frozenset(
    {
        "session/cancel",
        "session/close",
        "session/delete",
        "session/fork",
        "session/load",
        "session/prompt",
        "session/resume",
        "session/set_config_option",
        "session/set_mode",
        "session/set_model",
    }
)

#: Session methods that may come without ``Acp-Session-Id``: they (re)attach a session,
#: and the Python SDK's client (agent-client-protocol 0.12) sends them on the connection.
ATTACH_METHODS = frozenset({"session/load", "session/resume"})

Serve = Callable[["HttpTransport"], Awaitable[None]]


@dataclass(frozen=True, kw_only=True)
class HttpLimits:
    max_message_bytes: int = 64 * 1024 * 1024  # one POST body or WebSocket message
    max_connections: int = 256
    #: Output a connection may hold for a client that does not read it (all its streams).
    max_buffered_bytes: int = 16 * 1024 * 1024
    #: How long a reader past ``max_buffered_bytes`` may take nothing before it is dropped.
    max_output_stall_s: float = 5.0
    #: An HTTP connection with no request and no open stream for this long expires.
    idle_timeout_s: float = 60.0
    #: A WebSocket whose initialize has not been answered this long after it opened
    #: is closed.
    init_timeout_s: float = 10.0
    #: Connections not yet initialized (counted apart from ``max_connections``).
    max_pending_connections: int = 64
    #: Idle SSE streams get a comment this often, so proxies keep them open (§11).
    keepalive_s: float = 15.0
    #: Session streams a connection may hold with no reader (the TS SDK's limit): each
    #: request about a new session id makes one, and it holds its answer until read.
    max_session_streams: int = 1024


class _Stream:
    """Output for one SSE stream (or a WebSocket), kept until its reader takes it."""

    def __init__(self, owner: HttpTransport, session_id: str | None) -> None:
        self.owner = owner
        self.session_id = session_id
        self.frames: deque[bytes] = deque()
        self.ready = asyncio.Event()
        self.reader = False
        self.ended = False

    def put(self, frame: bytes) -> None:
        self.frames.append(frame)
        self.owner.buffered += len(frame)
        self.ready.set()

    def take(self, budget: int) -> list[bytes]:
        """The oldest frames, about ``budget`` bytes (at least one if any)."""
        taken: list[bytes] = []
        size = 0
        while self.frames and size < budget:
            frame = self.frames.popleft()
            taken.append(frame)
            size += len(frame)
        self.owner.taken(size)
        return taken

    async def wait(self) -> None:
        """Until there is something to take, or the stream has ended."""
        if not self.frames and not self.ended:
            self.ready.clear()
            await self.ready.wait()

    def end(self, *, discard: bool) -> None:
        if discard:
            self.owner.taken(sum(len(frame) for frame in self.frames))
            self.frames.clear()
        self.ended = True
        self.ready.set()


@dataclass(eq=False)
class HttpTransport:
    """The ``Transport`` of one HTTP or WebSocket connection (see crow.acp.jsonrpc)."""

    id: str
    limits: HttpLimits
    websocket: bool = False
    inbound: asyncio.Queue[bytes | None] = field(default_factory=asyncio.Queue)
    streams: dict[str | None, _Stream] = field(default_factory=dict)  # None: the connection's
    request_sessions: dict[Any, str] = field(default_factory=dict)  # inbound id -> session
    direct: dict[Any, asyncio.Future[bytes]] = field(default_factory=dict)  # answered in-body
    #: Sessions attached without ``Acp-Session-Id`` whose stream was never opened:
    #: their traffic goes to the connection's stream meanwhile.
    unopened: set[str] = field(default_factory=set)
    buffered: int = 0  # bytes written and not yet taken by a reader
    over_since: float | None = None  # when ``buffered`` went past the limit
    last_taken: float = 0.0  # when a reader last took output
    last_active: float = 0.0
    closed: bool = False
    #: Its initialize was answered with a result (an HTTP connection exists only then).
    initialized: bool = False
    initializing: set[Any] = field(default_factory=set)  # ids of initialize requests seen
    dropped: str | None = None  # why the connection was dropped, if it was
    close_code: int = 1000  # for a WebSocket
    done: asyncio.Event = field(default_factory=asyncio.Event)

    def stream(self, session_id: str | None) -> _Stream:
        stream = self.streams.get(session_id)
        if stream is None:
            stream = self.streams[session_id] = _Stream(self, session_id)
        return stream

    def session_stream(self, session_id: str) -> _Stream:
        """Where a message of ``session_id`` goes: its stream, or the connection's
        while a session attached without ``Acp-Session-Id`` has no stream open."""
        if session_id in self.unopened:
            return self.stream(None)
        return self.stream(session_id)

    def opened(self, stream: _Stream) -> None:
        """A reader took ``stream``: its session's traffic goes there from now on."""
        stream.reader = True
        if stream.session_id is not None:
            self.unopened.discard(stream.session_id)

    def left(self, stream: _Stream) -> None:
        """The reader of ``stream`` left: a session's stream with nothing queued is
        forgotten (one for an unknown session id would otherwise stay forever)."""
        stream.reader = False
        key = stream.session_id
        if key is not None and not stream.frames and self.streams.get(key) is stream:
            del self.streams[key]

    def touch(self) -> None:
        self.last_active = asyncio.get_running_loop().time()

    def idle_for(self, now: float) -> float:
        if self.websocket or self.direct or any(s.reader for s in self.streams.values()):
            return 0.0
        return now - self.last_active

    async def read_frame(self) -> bytes | None:
        return await self.inbound.get()

    async def write_frames(self, frames: Sequence[bytes]) -> None:
        self.write_frames_nowait(frames)

    def write_frames_nowait(self, frames: Sequence[bytes]) -> None:
        """Buffer the frames for their streams; never waits for the client."""
        if self.closed:
            raise ConnectionError(self.dropped or "the HTTP connection is closed")
        if self.websocket:
            stream = self.stream(None)
            for frame in frames:
                stream.put(frame)
                if self.initializing:
                    self._check_initialized(frame)
        else:
            for frame in frames:
                self._route(frame)
        self._check_backlog()

    def received(self, frame: bytes) -> None:
        """An inbound frame of a WebSocket: an initialize is noted, to see its answer."""
        if not self.initialized and b'"initialize"' in frame:
            with contextlib.suppress(orjson.JSONDecodeError):
                message = orjson.loads(frame)
                if isinstance(message, dict) and message.get("method") == "initialize":
                    self.initializing.add(_key(message.get("id")))
        self.inbound.put_nowait(frame)

    def _check_initialized(self, frame: bytes) -> None:
        with contextlib.suppress(orjson.JSONDecodeError):
            message = orjson.loads(frame)
            if (
                isinstance(message, dict)
                and "result" in message
                and _key(message.get("id")) in self.initializing
            ):
                self.initialized = True
                self.initializing.clear()

    def _route(self, frame: bytes) -> None:
        update_of = session_of_update(frame)  # most frames: no need to parse them
        if update_of is not None:
            self.session_stream(update_of).put(frame)
            return
        message = orjson.loads(frame)
        session: Any = None
        if isinstance(message, dict) and "method" not in message:  # a response
            future = self.direct.pop(message.get("id"), None)
            if future is not None and not future.done():
                future.set_result(frame)
                return
            session = self.request_sessions.pop(_key(message.get("id")), None)
        elif isinstance(message, dict):
            session = _session_of(message)
        stream = self.session_stream(session) if isinstance(session, str) else self.stream(None)
        stream.put(frame)

    def _check_backlog(self) -> None:
        if len(self.streams) > self.limits.max_session_streams:
            self._check_unread_streams()
        limit = self.limits.max_buffered_bytes
        if self.buffered <= limit:
            return
        now = asyncio.get_running_loop().time()
        if self.over_since is None:
            self.over_since = now
        # Behind is fine while the reader keeps taking (a replay arrives all at once);
        # it is stalled once it stops, and too slow once it stays far behind.
        stall = self.limits.max_output_stall_s
        quiet = now - max(self.over_since, self.last_taken)
        far_behind = self.buffered > 4 * limit and now - self.over_since >= stall
        if quiet >= stall or far_behind:
            self.drop(
                f"the client fell behind: over {limit} bytes of output unread; "
                "resume the session on a new connection with replayFrom _crow/after"
            )

    def _check_unread_streams(self) -> None:
        limit = self.limits.max_session_streams
        unread = sum(1 for s in self.streams.values() if s.frames and not s.reader)
        if unread > limit:
            self.drop(
                f"over {limit} session streams hold output nobody reads: open each "
                "session's stream (GET with Acp-Session-Id) or use fewer sessions"
            )

    def taken(self, size: int) -> None:
        self.buffered -= size
        if size:
            self.last_taken = asyncio.get_running_loop().time()
        if self.buffered <= self.limits.max_buffered_bytes:
            self.over_since = None

    def drop(self, reason: str) -> None:
        """End the connection now, discarding what its client has not read."""
        if self.closed:
            return
        log.warning("connection %s dropped: %s", self.id, reason)
        self.dropped = reason
        self.close_code = 1008  # policy, as the TS SDK closes for its connection limits
        self.close(discard=True)

    def close(self, *, discard: bool = False) -> None:
        if self.closed:
            return
        self.closed = True
        self.inbound.put_nowait(None)
        for stream in self.streams.values():
            stream.end(discard=discard)
        for future in self.direct.values():
            if not future.done():
                future.cancel()
        self.done.set()

    async def aclose(self) -> None:
        self.close()


def _key(value: Any) -> Any:
    return str(value) if isinstance(value, (int, str)) else value


def _session_of(message: dict[str, Any]) -> str | None:
    params = message.get("params")
    session = params.get("sessionId") if isinstance(params, dict) else None
    return session if isinstance(session, str) else None


def _session_route(
    transport: HttpTransport, message: dict[str, Any], header: str | None
) -> str | Response | None:
    """The session a POST concerns (None: the connection), or why it is refused.

    A session the agent does not know is not refused here: the agent answers the
    request with -32002, on that session's stream (ACP-V2.md §11, as the TS SDK)."""
    if "method" not in message:  # a response to the agent: routed by its id
        return header or None
    named = _session_of(message)
    if not header:
        if message["method"] in ATTACH_METHODS:
            stream = transport.streams.get(named) if named is not None else None
            if named is not None and (stream is None or not stream.reader):
                transport.unopened.add(named)  # answered on the connection's stream
            return None
        if named is not None or message["method"] in SESSION_METHODS:
            return _text(
                400, f"missing Acp-Session-Id header: {message['method']} concerns a session"
            )
        return None
    if named is not None and named != header:
        return _text(400, "mismatched Acp-Session-Id: the header and params.sessionId differ")
    return header


def _is_id(value: Any) -> bool:
    return isinstance(value, (str, int)) and not isinstance(value, bool)


class AcpHttpApp:
    """The ASGI app.

    ``check(scope)`` returns an error response to refuse a request.
    """

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
            await _reply(scope, receive, send, refusal)
            return
        if scope["type"] == "websocket":
            await self._websocket(WebSocket(scope, receive, send))
            return
        request = Request(scope, receive)
        handler = {"POST": self._post, "GET": self._get, "DELETE": self._delete}.get(request.method)
        response = await handler(request) if handler else _text(405, "use POST, GET or DELETE")
        await response(scope, receive, send)

    def _refusal(self, scope: Scope) -> Response | None:
        if scope["path"].rstrip("/") != self.path:
            return JSONResponse({"error": "not found"}, 404)
        for name, value in scope.get("headers", []):
            try:
                name.decode(), value.decode()
            except UnicodeDecodeError:
                shown = name.decode("latin-1")[:40]
                return _text(400, f"header {shown!r} is not valid UTF-8")
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
            return _text(503, refusal)
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
            return _text(400, "missing Acp-Connection-Id header")
        transport = self.connections.get(connection_id)
        if transport is not None and not transport.closed:
            transport.touch()
            return transport
        why = transport.dropped if transport is not None else self.gone.get(connection_id)
        if why:
            return _text(410, f"Acp-Connection-Id {connection_id} is gone: {why}")
        return _text(404, "unknown Acp-Connection-Id: initialize a new connection")

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
        if expired:
            # A connection's transport, peer and tasks form reference cycles: free
            # them now, not at some later full collection (the soak test watches RSS).
            gc.collect()

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
        session = _session_route(transport, message, request.headers.get(SESSION_HEADER))
        if isinstance(session, Response):
            return session
        if session and "method" in message and _is_id(message.get("id")):
            transport.request_sessions[_key(message["id"])] = session
        transport.inbound.put_nowait(body)
        return Response(status_code=202)

    async def _initialize(self, message: dict[str, Any], body: bytes) -> Response:
        if message.get("method") != "initialize" or "id" not in message:
            return _text(
                400, "missing Acp-Connection-Id header: only initialize opens a connection"
            )
        if not _is_id(message["id"]):
            return _rpc_error(400, -32600, "initialize needs a string or integer id")
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
            return _text(503, "the agent did not answer initialize")
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
            return _text(406, "GET needs Accept: text/event-stream")
        transport = self._connection(request)
        if isinstance(transport, Response):
            return transport
        session = request.headers.get(SESSION_HEADER) or None
        stream = transport.stream(session)
        if stream.reader:
            return _text(409, "this stream already has a reader")
        transport.opened(stream)
        return StreamingResponse(
            _events(stream),
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
            await _refuse_websocket(websocket, opened)
            return
        await websocket.accept(headers=[(b"acp-connection-id", opened.id.encode())])
        stream = opened.stream(None)
        stream.reader = True
        reader = asyncio.create_task(self._read_socket(opened, websocket))
        pump = asyncio.create_task(_pump_socket(stream, websocket))
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
                for transport in list(self.connections.values()):
                    transport.close()
                if self.reaper is not None:
                    self.reaper.cancel()
                if self.tasks:
                    await asyncio.wait(self.tasks, timeout=2.0)
                await send({"type": "lifespan.shutdown.complete"})
                return


async def _events(stream: _Stream) -> AsyncIterator[bytes]:
    loop = asyncio.get_running_loop()
    try:
        while True:
            if not stream.frames:
                if stream.ended:
                    return
                # A plain timer, not asyncio.timeout: this wait runs for every burst
                # of every stream, and the context manager cost more than the wait.
                wake = loop.call_later(stream.owner.limits.keepalive_s, stream.ready.set)
                try:
                    await stream.wait()
                finally:
                    wake.cancel()
                if not stream.frames and not stream.ended:
                    yield b": keepalive\n\n"  # the timer woke it: nothing to send
                    continue
                # A turn emits its updates in bursts: let the rest of this one arrive,
                # so one write (one syscall, one h11 event) carries them all.
                await asyncio.sleep(0)
            frames = stream.take(SSE_BATCH_BYTES)
            if frames:
                yield b"".join([b"data: " + frame + b"\n\n" for frame in frames])
    finally:
        stream.owner.left(stream)  # a reconnecting reader gets what is still queued
        stream.owner.touch()


async def _pump_socket(stream: _Stream, websocket: WebSocket) -> None:
    """Send a WebSocket's frames in order until its connection ends."""
    with contextlib.suppress(Exception):  # the socket is gone: the connection ends
        while True:
            if not stream.frames:
                if stream.ended:
                    return
                await stream.wait()
                continue
            for frame in stream.take(SSE_BATCH_BYTES):
                await websocket.send_text(frame.decode())


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
        await _refuse_websocket(WebSocket(scope, receive, send), response)
        return
    await response(scope, receive, send)


async def _refuse_websocket(websocket: WebSocket, response: Response) -> None:
    """Refuse an upgrade with the refusal's own status (401, 403, 404, 503) and body,
    where the server can send them; else close with its reason (a bare 403)."""
    if "websocket.http.response" in websocket.scope.get("extensions", {}):
        await websocket.send_denial_response(response)
        return
    code = 1013 if response.status_code == 503 else 1008  # 1013: try again later
    await websocket.close(code=code, reason=_reason(response))


def _reason(response: Response) -> str:
    with contextlib.suppress(Exception):
        return str(orjson.loads(response.body).get("error", ""))[:120]
    return ""
