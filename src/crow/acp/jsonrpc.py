"""The async JSON-RPC peer: one per connection, either role.

``Peer`` drives a sans-I/O ``Connection`` over a ``Transport``:

- each inbound request runs in its own task, so a slow handler never stalls the
  read loop; ``$/cancel_request`` cancels that task and the peer still answers,
  with ``-32800`` (ACP-V2.md §2.5: unlike MCP, ACP always answers), even when
  the cancel came in the same read as the request and the task never started:
  every request gets exactly one answer;
- notifications run in arrival order per session (keyed by ``params.sessionId``),
  each session on its own worker, so one slow session does not hold up another;
- outbound messages leave in the order they were sent: they are queued
  synchronously and one writer task drains the queue, many frames per write;
- exceptions become JSON-RPC errors in exactly one place, ``_answer``: an
  ``AcpError`` as itself, a pydantic ``ValidationError`` as ``-32602`` with the
  detail in ``data``, anything else logged and answered ``-32603``;
- at the end of input, requests already read get ``EOF_GRACE_S`` to finish
  and be answered while the output is still writable; what is still running
  then is cancelled and answered ``-32800``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from pydantic import ValidationError

from .connection import (
    CANCEL_REQUEST,
    Batch,
    CancelRequest,
    Connection,
    EncodeError,
    Event,
    Notification,
    Request,
    RequestId,
    Response,
    Send,
    encode,
)
from .errors import (
    AcpError,
    ConnectionClosed,
    InternalError,
    InvalidParams,
    MessageTooLarge,
    RequestCancelled,
)

__all__ = ["NotificationHandler", "Peer", "RequestHandler", "Transport"]

log = logging.getLogger("crow.acp")

#: Queued outbound frames past which ``notify`` waits for the writer to catch up.
OUTBOX_HIGH_WATER = 4096
#: How long shutdown waits for in-flight handlers and the last writes.
SHUTDOWN_WAIT_S = 0.5
#: How long requests already read at the end of input get to finish and be answered.
EOF_GRACE_S = 2.0

RequestHandler = Callable[[str, dict[str, Any] | None], Awaitable[Any]]
NotificationHandler = Callable[[str, dict[str, Any] | None], Awaitable[None]]
Reply = dict[str, Any]
ReplySink = Callable[[Reply], None]


class Transport(Protocol):
    """Moves frames (the bytes of one JSON-RPC message) and nothing else."""

    async def read_frame(self) -> bytes | None:
        """The next frame; None once the peer has gone.  Raises MessageTooLarge
        (with ``.prefix``) for a frame past the limit, after discarding it."""
        ...

    async def write_frames(self, frames: list[bytes]) -> None:
        """Write frames in order.  Raises ConnectionError if the peer has gone."""
        ...

    async def aclose(self) -> None: ...


class BufferingTransport(Transport, Protocol):
    """A transport that buffers what it is given and never waits to take it (the
    HTTP server's: its streams hold the frames until their reader takes them)."""

    def write_frames_nowait(self, frames: list[bytes]) -> None:
        """``write_frames`` at once.  Raises ConnectionError if the peer has gone."""
        ...


class Peer:
    """One end of an ACP connection: send requests, serve the peer's requests."""

    def __init__(
        self,
        transport: Transport,
        *,
        on_request: RequestHandler,
        on_notification: NotificationHandler,
        connection: Connection | None = None,
        eof_grace_s: float = EOF_GRACE_S,
    ) -> None:
        self.transport = transport
        self.eof_grace_s = eof_grace_s
        self.connection = connection or Connection()
        self._on_request = on_request
        self._on_notification = on_notification
        self._waiting: dict[str, asyncio.Future[Response]] = {}
        self._handlers: dict[str, asyncio.Task[None]] = {}
        self._queues: dict[Any, list[Notification]] = {}
        self._workers: dict[Any, asyncio.Task[None]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._outbox: list[bytes] = []
        # A transport that never waits is written to at once: a wake of the writer
        # task per message cost more than the write (bench/http_bench.py).
        self._write_now = getattr(transport, "write_frames_nowait", None)
        self._wake = asyncio.Event()
        self._drained = asyncio.Event()
        self._drained.set()
        self._closed = False
        self._closing = False  # our own aclose: nobody is left to answer
        self._input_ended = False  # no response can arrive any more
        self._stopping = False  # shutdown is cancelling what still runs
        self.closed = asyncio.Event()

    # ---- public API -----------------------------------------------------------
    async def run(self) -> None:
        """Serve until the transport closes, then cancel what is still running."""
        writer = asyncio.create_task(self._write_loop(), name="acp-writer")
        try:
            while True:
                try:
                    frame = await self.transport.read_frame()
                except MessageTooLarge as exc:
                    self._dispatch(self.connection.receive_oversized(getattr(exc, "prefix", b"")))
                    continue
                if frame is None:
                    break
                if self._dispatch(self.connection.receive(frame)):
                    # A response woke a task waiting on it: let it act on the response
                    # before anything read later is dispatched (a relay forwards the
                    # updates that followed a response after it, not before).
                    await asyncio.sleep(0)
        finally:
            await self._shutdown(writer)

    async def request(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        envelope: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        withdraw: asyncio.Event | None = None,
    ) -> Any:
        """Send a request and wait for its result.

        Raises the ``AcpError`` subclass matching an error reply, and
        ``ConnectionClosed`` if the connection ends first.  Cancelling the
        caller withdraws the request with ``$/cancel_request``, passed through
        ``envelope`` if given (a proxy wraps the withdrawal of a request it
        wrapped, PROXY-CHAINS.md §6).  Setting ``withdraw`` sends that
        ``$/cancel_request`` too, but keeps waiting for the answer: the peer says
        whether it gave up (-32800) or had already done it.
        """
        if self._closed or self._input_ended:
            raise ConnectionClosed(f"cannot send {method}: the connection is closed")
        rid, message = self.connection.request(method, params)
        key = str(rid)
        future: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        self._waiting[key] = future
        self._enqueue(message)
        asking: asyncio.Task[Any] | None = None
        if withdraw is not None:

            async def ask_to_withdraw() -> None:
                await withdraw.wait()
                if not future.done() and not self._closed:
                    self._enqueue(self.connection.notification(CANCEL_REQUEST, {"requestId": rid}))

            asking = asyncio.create_task(ask_to_withdraw(), name="acp-withdraw")
        try:
            response = await future
        except asyncio.CancelledError:
            self._waiting.pop(key, None)
            cancel = self.connection.forget_request(rid)
            if cancel is not None and not self._closed:
                self._enqueue(envelope(cancel) if envelope else cancel)
            raise
        finally:
            if asking is not None:
                asking.cancel()
        if response.error is not None:
            raise AcpError.from_error(response.error)
        return response.result

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        """Queue a notification; waits only when the outbox is backed up."""
        if self._closed:
            raise ConnectionClosed(f"cannot send {method}: the connection is closed")
        self._enqueue(self.connection.notification(method, params))
        if len(self._outbox) > OUTBOX_HIGH_WATER:
            await self._drained.wait()

    def send_frame(self, frame: bytes) -> None:
        """Queue an already-encoded message (a logged update, replayed as stored).

        Dropped silently once the connection is closed: the caller's record is
        the durable copy.
        """
        if self._closed:
            return
        self._queue_frame(frame)

    def cancel_inbound(self, rid: RequestId) -> None:
        """Cancel the handler of the peer's request ``rid`` (as ``$/cancel_request``
        does; for a withdrawal that arrived some other way, e.g. wrapped)."""
        self._cancel_handler(rid)

    @property
    def backed_up(self) -> bool:
        """True while the writer is far behind (the peer reads slowly)."""
        return len(self._outbox) > OUTBOX_HIGH_WATER

    async def drained(self) -> None:
        """Wait until every queued message has been written."""
        await self._drained.wait()

    async def aclose(self) -> None:
        """Close the transport; ``run`` then winds down (without the end-of-input grace)."""
        self._closing = True
        await self.transport.aclose()

    # ---- dispatch -------------------------------------------------------------
    def _dispatch(self, events: list[Event]) -> bool:
        """Act on events; True if a response was handed to a waiting caller."""
        woke = False
        for event in events:
            if isinstance(event, Request):
                self._start_request(event)
            elif isinstance(event, Notification):
                self._queue_notification(event)
            elif isinstance(event, Response):
                future = self._waiting.pop(str(event.id), None)
                if future is not None and not future.done():
                    future.set_result(event)
                    woke = True
            elif isinstance(event, CancelRequest):
                self._cancel_handler(event.id)
            elif isinstance(event, Send):
                self._enqueue_reply(event.message)
            elif isinstance(event, Batch):
                self._start_batch(event)
        return woke

    def _spawn(self, coro: Awaitable[Any], name: str) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        task.set_name(name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _start_request(self, request: Request, deliver: ReplySink | None = None) -> None:
        """Run one request in its own task; ``deliver`` gets its one reply."""
        sink = deliver or self._send_reply
        key = str(request.id)
        answered = False

        async def run() -> None:
            nonlocal answered
            reply = await self._answer(request)
            answered = True
            sink(reply)  # from inside the task: before any work it spawned speaks

        def done(task: asyncio.Task[None]) -> None:
            if self._handlers.get(key) is task:
                del self._handlers[key]
            failure = None if task.cancelled() else task.exception()
            if answered:
                if failure is not None:
                    log.error("after answering %s", request.method, exc_info=failure)
                return
            # Cancelled before its first step (a cancel in the same read as the
            # request) or died oddly: the request is still owed exactly one answer.
            if task.cancelled():
                sink(self.connection.error(request.id, self._cancelled_error()))
            else:
                sink(self._internal_error(request, failure))

        task: asyncio.Task[None] = self._spawn(run(), f"acp-request-{request.method}")
        self._handlers[key] = task
        task.add_done_callback(done)

    def _send_reply(self, reply: Reply) -> None:
        self._enqueue_reply(reply)
        # Answering an initialize lets the requests pipelined behind it run.
        self._dispatch(self.connection.release())

    def _start_batch(self, batch: Batch) -> None:
        for notification in batch.notifications:
            self._queue_notification(notification)
        if not batch.requests and not batch.errors:
            return  # an all-notification batch gets no reply at all (§2.4)
        replies: list[Reply] = list(batch.errors)
        expected = len(batch.errors) + len(batch.requests)

        def collect(reply: Reply) -> None:
            replies.append(reply)
            if len(replies) == expected:
                self._enqueue_reply(replies)
                self._dispatch(self.connection.release())

        if not batch.requests:
            self._enqueue_reply(replies)
        for request in batch.requests:
            self._start_request(request, collect)

    async def _answer(self, request: Request) -> Reply:
        """Run the handler; the one place exceptions become JSON-RPC errors."""
        try:
            result = await self._on_request(request.method, request.params)
            return self.connection.result(request.id, result)
        except asyncio.CancelledError:
            # By $/cancel_request, by shutdown, or from inside the handler: the
            # request is still answered (§2.5), and this task ends normally.
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            return self.connection.error(request.id, self._cancelled_error())
        except AcpError as exc:
            return self.connection.error(request.id, exc)
        except ValidationError as exc:
            detail = json.loads(exc.json(include_url=False, include_input=False))
            summary = _summarize(detail)
            return self.connection.error(request.id, InvalidParams(summary, data=detail))
        except Exception as exc:
            return self._internal_error(request, exc)

    def _internal_error(self, request: Request, exc: BaseException | None) -> Reply:
        log.error("handler for %s failed", request.method, exc_info=exc)
        return self.connection.error(
            request.id, InternalError(f"Internal error while handling {request.method}")
        )

    def _cancelled_error(self) -> RequestCancelled:
        if self._stopping:
            return RequestCancelled("Request cancelled: the connection closed before it finished")
        return RequestCancelled()

    def _cancel_handler(self, rid: RequestId) -> None:
        task = self._handlers.get(str(rid))
        if task is None or task.done():
            return  # unknown or finished: ignored silently (§2.5)
        task.cancel()

    def _queue_notification(self, notification: Notification) -> None:
        params = notification.params or {}
        lane = params.get("sessionId") if isinstance(params.get("sessionId"), str) else None
        queue = self._queues.setdefault(lane, [])
        queue.append(notification)
        if lane not in self._workers:
            self._workers[lane] = self._spawn(self._drain_lane(lane), "acp-notifications")

    async def _drain_lane(self, lane: Any) -> None:
        queue = self._queues[lane]
        try:
            while queue:
                notification = queue.pop(0)
                try:
                    await self._on_notification(notification.method, notification.params)
                except Exception:
                    log.exception("notification handler for %s failed", notification.method)
        finally:
            del self._workers[lane]
            if not queue:
                self._queues.pop(lane, None)

    # ---- writing --------------------------------------------------------------
    def _enqueue(self, message: dict[str, Any] | list[dict[str, Any]]) -> None:
        """Queue a request or notification of ours; one JSON cannot carry is dropped."""
        if self._closed:
            return
        try:
            frame = encode(message)
        except EncodeError as exc:
            method = message.get("method") if isinstance(message, dict) else None
            log.error("dropping an outbound %s: %s", method or "message", exc)
            return
        self._queue_frame(frame)

    def _enqueue_reply(self, reply: Reply | list[Reply]) -> None:
        """Queue a reply; one that JSON cannot carry becomes ``-32603`` for its id."""
        if self._closed:
            return
        try:
            frame = encode(reply)
        except EncodeError as exc:
            log.error("a reply could not be encoded: %s", exc)
            replies = reply if isinstance(reply, list) else [reply]
            fixed = [_encodable(r) for r in replies]
            frame = encode(fixed if isinstance(reply, list) else fixed[0])
        self._queue_frame(frame)

    def _queue_frame(self, frame: bytes) -> None:
        if self._write_now is not None and not self._outbox:  # nothing before it: in order
            try:
                self._write_now([frame])
                return
            except (ConnectionError, OSError, RuntimeError):
                pass  # the writer task meets the error again, and closes
        self._outbox.append(frame)
        self._drained.clear()
        self._wake.set()

    async def _write_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._outbox:
                frames, self._outbox = self._outbox, []
                try:
                    await self.transport.write_frames(frames)
                except (ConnectionError, OSError, RuntimeError) as exc:
                    log.debug("write failed, closing: %s", exc)
                    self._closed = True
                    self._outbox.clear()
                    self._drained.set()
                    with contextlib.suppress(Exception):
                        await self.transport.aclose()
                    return
            self._drained.set()
            if self._closed:
                return

    # ---- shutdown -------------------------------------------------------------
    async def _shutdown(self, writer: asyncio.Task[None]) -> None:
        # Nothing more can be read: our own requests will never be answered.
        self._input_ended = True
        for future in self._waiting.values():
            if not future.done():
                future.set_exception(ConnectionClosed("the connection closed"))
        self._waiting.clear()
        if not (self._closed or self._closing):
            await self._wait_for_tasks(self.eof_grace_s)  # requests already read get answered
        self._stopping = True
        for _ in range(3):  # a cancelled initialize can release held requests: again
            if not self._tasks:
                break
            for task in list(self._tasks):
                task.cancel()
            await self._wait_for_tasks(SHUTDOWN_WAIT_S)
        self._closed = True
        self._wake.set()
        with contextlib.suppress(asyncio.TimeoutError, Exception):
            await asyncio.wait_for(asyncio.shield(writer), SHUTDOWN_WAIT_S)
        writer.cancel()
        with contextlib.suppress(Exception):
            await self.transport.aclose()
        self.closed.set()

    async def _wait_for_tasks(self, timeout: float) -> None:
        """Wait up to ``timeout`` for every task, including ones started meanwhile."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self._tasks and (left := deadline - loop.time()) > 0:
            await asyncio.wait(list(self._tasks), timeout=left)
            await asyncio.sleep(0)  # let done callbacks start what they release


def _encodable(reply: Reply) -> Reply:
    """``reply`` if JSON can carry it, else a ``-32603`` for the same id."""
    try:
        encode(reply)
    except EncodeError:
        err = InternalError("Internal error: the reply could not be encoded as JSON")
        return {"jsonrpc": "2.0", "id": reply.get("id"), "error": err.to_error()}
    return reply


def _summarize(detail: list[dict[str, Any]]) -> str:
    """One line for people: the first problem, with where it is."""
    if not detail:
        return "Invalid params"
    first = detail[0]
    where = ".".join(str(p) for p in first.get("loc", ()) if not str(p).startswith("function-"))
    more = f" (and {len(detail) - 1} more)" if len(detail) > 1 else ""
    return f"Invalid params: {where or 'params'}: {first.get('msg', 'invalid')}{more}"
