"""The v1|v2 router: a connection's first ``initialize`` decides who serves it.

ACP-V2.md §3.3: read the first ``initialize``, choose the implementation, hand
the connection over; after that exactly one version is spoken on it.  Here:

- ``protocolVersion`` exactly 1 goes to the v1 handler (the official ``acp``
  package behind Crow's sessions); 2 or newer goes to the v2 handler
  (``crow.acp``'s ``AgentSide``, which answers 2).  A v2 initialize that
  reached a v1 implementation would be misread (``info`` is not ``clientInfo``),
  so it is never downgraded.
- A version nobody here serves (0, a negative number, 1 without v1, 2+ with v2
  switched off) gets ``-32022`` with ``{requested, supported}``; a
  ``protocolVersion`` that is not an integer gets ``-32602``.  Either way the
  connection stays uninitialized and the router waits for another
  ``initialize`` (§3.4: a failed initialize leaves the client free to retry).
- Before that, the router is the initialize gate of §3.4: other requests get
  ``-32600``, notifications and responses are dropped, bad JSON gets ``-32700``
  and a batch one ``-32600`` (the same sans-I/O ``Connection`` rules as v2).

The chosen handler gets the transport with the ``initialize`` frame replayed
first, so it answers that request itself.  ``MessageTransport`` adapts a frame
transport to the message-level Transport of the ``acp`` package (``send``,
``receive``, ``close`` on decoded dicts), covering what that package's
connection does not (ECOSYSTEM.md trap 1).  Nothing here imports ``acp``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import orjson

from .connection import (
    CANCEL_REQUEST,
    Connection,
    EncodeError,
    Request,
    Send,
    TooDeep,
    decode,
    encode,
)
from .errors import (
    AcpError,
    InternalError,
    InvalidParams,
    InvalidRequest,
    MessageTooLarge,
    ParseError,
    RequestCancelled,
    UnsupportedProtocolVersion,
)
from .jsonrpc import Transport

__all__ = ["ConnectionHandler", "MessageTransport", "ProtocolRouter", "ReplayTransport"]

log = logging.getLogger("crow.acp")

ConnectionHandler = Callable[[Transport], Awaitable[None]]

#: Queued outbound messages past which ``MessageTransport.backed_up`` is true
#: (the same high-water mark as ``Peer``).
OUTBOX_HIGH_WATER = 4096
#: How long ``MessageTransport.close`` waits for queued messages to be written.
CLOSE_FLUSH_S = 0.5


class ProtocolRouter:
    """Serves connections with ``v1`` or ``v2`` by their initialize (None: not offered)."""

    def __init__(
        self, *, v2: ConnectionHandler | None, v1: ConnectionHandler | None = None
    ) -> None:
        if v1 is None and v2 is None:
            raise ValueError("a router needs at least one protocol handler")
        self.v1 = v1
        self.v2 = v2

    @property
    def supported(self) -> list[int]:
        return [v for v, handler in ((1, self.v1), (2, self.v2)) if handler is not None]

    async def serve(self, transport: Transport) -> None:
        """Serve one connection until its handler returns (or it ends uninitialized)."""
        routed = await self.negotiate(transport)
        if routed is None:
            with contextlib.suppress(Exception):
                await transport.aclose()
            return
        handler, first = routed
        await handler(ReplayTransport(transport, [first]))

    async def negotiate(self, transport: Transport) -> tuple[ConnectionHandler, bytes] | None:
        """Read up to the first routable initialize; returns its handler and frame.

        None when the peer goes away first.  Everything before is answered here.
        """
        gate = Connection(require_initialize=True)
        while True:
            try:
                frame = await transport.read_frame()
            except MessageTooLarge as exc:
                events = gate.receive_oversized(getattr(exc, "prefix", b""))
            else:
                if frame is None:
                    return None
                events = gate.receive(frame)
            replies: list[Any] = []
            for event in events:
                if isinstance(event, Send):
                    replies.append(event.message)
                elif isinstance(event, Request):  # only initialize passes the gate
                    handler, refusal = self.choose(event.params)
                    if handler is not None:
                        assert frame is not None
                        await _write(transport, replies)
                        return handler, frame
                    assert refusal is not None
                    replies.append(gate.error(event.id, refusal))
                    gate.release()  # nothing is held: frames are read one at a time
                # Notifications, responses and cancels before initialize: dropped (§3.4).
            if not await _write(transport, replies):
                return None

    def choose(
        self, params: dict[str, Any] | None
    ) -> tuple[ConnectionHandler | None, AcpError | None]:
        """The handler for an initialize's params, or the error that refuses it."""
        requested = (params or {}).get("protocolVersion")
        if type(requested) is not int:
            return None, InvalidParams(
                f"initialize: protocolVersion must be an integer (this agent speaks "
                f"{self.supported}), got {requested!r}",
                data={"protocolVersion": requested, "supported": self.supported},
            )
        if requested == 1 and self.v1 is not None:
            return self.v1, None
        if requested >= 2 and self.v2 is not None:
            return self.v2, None
        return None, UnsupportedProtocolVersion.for_versions(requested, self.supported)


async def _write(transport: Transport, messages: list[Any]) -> bool:
    """Write error replies; False if the peer has gone."""
    if not messages:
        return True
    try:
        frames = [f for f in map(_encode, messages) if f is not None]
        await transport.write_frames(frames)
    except (ConnectionError, OSError, RuntimeError):
        return False
    return True


class ReplayTransport:
    """A transport whose first frames were already read: ``read_frame`` gives them again."""

    def __init__(self, inner: Transport, frames: Sequence[bytes]) -> None:
        self.inner = inner
        self._frames = list(frames)
        nowait = getattr(inner, "write_frames_nowait", None)
        if nowait is not None:  # a BufferingTransport stays one (see Peer)
            self.write_frames_nowait = nowait

    async def read_frame(self) -> bytes | None:
        if self._frames:
            return self._frames.pop(0)
        return await self.inner.read_frame()

    async def write_frames(self, frames: list[bytes]) -> None:
        await self.inner.write_frames(frames)

    async def aclose(self) -> None:
        await self.inner.aclose()


class MessageTransport:
    """A frame ``Transport`` as the ``acp`` package's message-level Transport.

    Inbound, frames become dicts; what ``acp``'s connection mishandles is
    answered here instead: bad JSON (or JSON nested too deeply) gets ``-32700``,
    a batch or a non-object one ``-32600`` (a batch would kill its receive
    loop), an oversized frame ``-32600``, a request whose id is neither a string
    nor an integer ``-32600`` (as in v2; a response with one is dropped);
    ``$/cancel_request`` (which it does not implement) is dropped, a v1
    notification sent as a request
    (``session/cancel`` with an id) is passed on as the notification and
    answered ``{}``, and a response id echoed as a string of digits is turned
    back into the integer it was sent as (it matches ids as ints).

    It also keeps count of the requests it handed over that are still owed a
    reply: ``settled`` waits (bounded) for them at the end of input, and
    ``close`` answers the ones left ``-32800`` rather than dropping them.

    Outbound, ``send_nowait`` queues synchronously and one writer task writes in
    order, so a synchronous caller (a session watcher) keeps its order.
    """

    #: v1 methods that are notifications (the client sends, the agent never answers).
    NOTIFICATIONS = frozenset({"session/cancel"})

    def __init__(self, frames: Transport) -> None:
        self.frames = frames
        self._outbox: list[bytes] = []
        self._wake = asyncio.Event()
        self._drained = asyncio.Event()
        self._drained.set()
        self._writer: asyncio.Task[None] | None = None
        self._owed: dict[str, Any] = {}  # repr(id) -> id, for requests handed over
        self._all_answered = asyncio.Event()
        self._all_answered.set()
        self.closed = False

    # ---- receiving ------------------------------------------------------------
    async def receive(self) -> dict[str, Any] | None:
        while True:
            try:
                frame = await self.frames.read_frame()
            except MessageTooLarge as exc:
                prefix = getattr(exc, "prefix", b"")
                for event in Connection().receive_oversized(prefix):
                    if isinstance(event, Send) and isinstance(event.message, dict):
                        self._queue(event.message)
                continue
            if frame is None:
                return None
            message = self._accept(frame)
            if message is not None:
                return message

    def _accept(self, frame: bytes) -> dict[str, Any] | None:
        try:
            message = decode(frame)
        except TooDeep as exc:
            self._queue(_error(None, ParseError(str(exc))))
            return None
        except ValueError:
            if frame.strip():
                self._queue(_error(None, ParseError()))
            return None
        if isinstance(message, list):
            err = InvalidRequest("JSON-RPC batches are not supported: send one message per line")
            self._queue(_error(None, err))
            return None
        if not isinstance(message, dict):
            self._queue(_error(None, InvalidRequest("A message must be a JSON object")))
            return None
        method = message.get("method")
        if method == CANCEL_REQUEST:
            return None
        rid = message.get("id")
        if "id" in message and not _is_id(rid):
            # As v2 does (JSON-RPC: a string or a number; ACP: no fractions, no
            # null).  A response with such an id cannot be ours, and acp's table
            # of pending requests would fail on an unhashable one.
            if method is not None:
                err = InvalidRequest("A request id must be a string or an integer")
                self._queue(_error(None, err))
            return None
        if method is None:
            if isinstance(rid, str) and rid.isdigit():
                message["id"] = int(rid)
            return message
        if "id" in message and method in self.NOTIFICATIONS:
            self._queue({"jsonrpc": "2.0", "id": rid, "result": {}})
            return {k: v for k, v in message.items() if k != "id"}
        if "id" in message:
            self._owed[repr(rid)] = rid
            self._all_answered.clear()
        return message

    async def settled(self, timeout: float) -> None:
        """Wait up to ``timeout`` until every request handed over has been answered."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._all_answered.wait()

    # ---- sending --------------------------------------------------------------
    async def send(self, message: dict[str, Any]) -> None:
        """Queue a message.  Raises ConnectionError for a request once closed."""
        if self.closed and "method" in message and "id" in message:
            raise ConnectionError("the connection is closed")
        self.send_nowait(message)

    def send_nowait(self, message: dict[str, Any]) -> None:
        """Queue a message in order; dropped silently once the connection is closed."""
        self._queue(message)

    def _queue(self, message: dict[str, Any]) -> None:
        if self.closed:
            return
        if "method" not in message and self._owed:
            self._owed.pop(repr(message.get("id")), None)
            if not self._owed:
                self._all_answered.set()
        frame = _encode(message)
        if frame is None:
            return
        self._outbox.append(frame)
        self._drained.clear()
        self._wake.set()
        if self._writer is None:
            self._writer = asyncio.get_running_loop().create_task(
                self._write_loop(), name="acp-v1-writer"
            )

    @property
    def backed_up(self) -> bool:
        return len(self._outbox) > OUTBOX_HIGH_WATER

    async def drained(self) -> None:
        await self._drained.wait()

    async def _write_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._outbox:
                batch, self._outbox = self._outbox, []
                try:
                    await self.frames.write_frames(batch)
                except (ConnectionError, OSError, RuntimeError) as exc:
                    log.debug("write failed, closing: %s", exc)
                    self.closed = True
                    self._outbox.clear()
                    self._drained.set()
                    return
            self._drained.set()

    async def close(self) -> None:
        """Answer what is still owed, write what is queued (bounded), then close."""
        for rid in list(self._owed.values()):
            err = RequestCancelled("Request cancelled: the connection closed before it finished")
            self._queue(_error(rid, err))
        if self._writer is not None and not self.closed:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(CLOSE_FLUSH_S):
                    await self._drained.wait()
        self.closed = True
        self._drained.set()
        if self._writer is not None:
            self._writer.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._writer
        with contextlib.suppress(Exception):
            await self.frames.aclose()


def _encode(message: dict[str, Any]) -> bytes | None:
    """``encode``, for messages this side did not build.  One JSON cannot carry
    (acp puts pydantic's raw error details, exceptions, in error data) is written
    with such values as strings; failing that a reply becomes a ``-32603`` for
    its id, and a request or notification is dropped (None)."""
    try:
        return encode(message)
    except EncodeError:
        pass
    try:
        return orjson.dumps(message, default=str)
    except TypeError as exc:
        log.error("a message could not be encoded as JSON: %s", exc)
    if "method" in message:
        return None
    err = InternalError("Internal error: the reply could not be encoded as JSON")
    try:
        return encode(_error(message.get("id"), err))
    except EncodeError:  # the id itself: still an answer, with id null
        return encode(_error(None, err))


def _is_id(value: Any) -> bool:
    return isinstance(value, (int, str)) and not isinstance(value, bool)


def _error(rid: Any, err: AcpError) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "error": err.to_error()}
