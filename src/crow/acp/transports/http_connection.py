"""One ACP connection over HTTP + SSE or WebSocket, server side (ACP-V2.md §11): its
output, buffered per stream until a reader takes it, and the limits that drop a client
too far behind.

``HttpTransport`` is the connection's ``Transport`` (crow.acp.jsonrpc).  What the agent
writes never waits for the client: each frame goes to the stream it belongs to (the
session's, read off a ``session/update`` frame by ``crow.acp.frames`` without parsing
it, or the connection's), counted in bytes until read.  ``sse_events`` and
``pump_websocket`` are the loops that hand a stream to its reader.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from starlette.websockets import WebSocket

from ..frames import session_of_update

__all__ = ["HttpLimits", "HttpTransport", "Stream", "pump_websocket", "sse_events"]

log = logging.getLogger("crow.acp.http")

#: The most one SSE write takes from its buffer at once.
SSE_BATCH_BYTES = 256 * 1024


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


class Stream:
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
    streams: dict[str | None, Stream] = field(default_factory=dict)  # None: the connection's
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

    def stream(self, session_id: str | None) -> Stream:
        stream = self.streams.get(session_id)
        if stream is None:
            stream = self.streams[session_id] = Stream(self, session_id)
        return stream

    def session_stream(self, session_id: str) -> Stream:
        """Where a message of ``session_id`` goes: its stream, or the connection's
        while a session attached without ``Acp-Session-Id`` has no stream open."""
        if session_id in self.unopened:
            return self.stream(None)
        return self.stream(session_id)

    def opened(self, stream: Stream) -> None:
        """A reader took ``stream``: its session's traffic goes there from now on."""
        stream.reader = True
        if stream.session_id is not None:
            self.unopened.discard(stream.session_id)

    def left(self, stream: Stream) -> None:
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
                    self.initializing.add(id_key(message.get("id")))
        self.inbound.put_nowait(frame)

    def _check_initialized(self, frame: bytes) -> None:
        with contextlib.suppress(orjson.JSONDecodeError):
            message = orjson.loads(frame)
            if (
                isinstance(message, dict)
                and "result" in message
                and id_key(message.get("id")) in self.initializing
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
            session = self.request_sessions.pop(id_key(message.get("id")), None)
        elif isinstance(message, dict):
            session = session_of(message)
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


def id_key(value: Any) -> Any:
    """A request id as a key: ``"7"`` and ``7`` name the same request."""
    return str(value) if isinstance(value, (int, str)) else value


def session_of(message: dict[str, Any]) -> str | None:
    """The message's ``params.sessionId``, if it is a string."""
    params = message.get("params")
    session = params.get("sessionId") if isinstance(params, dict) else None
    return session if isinstance(session, str) else None


async def sse_events(stream: Stream) -> AsyncIterator[bytes]:
    """A stream's SSE body: its frames as ``data:`` events, a burst per write, and a
    keepalive comment when it has been idle for ``keepalive_s``."""
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


async def pump_websocket(stream: Stream, websocket: WebSocket) -> None:
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
