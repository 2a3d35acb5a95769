"""The store as the event loop uses it: every call on one worker thread.

SQLite blocks: a write waits for another process's lock (up to the busy
timeout), a large replay reads for a while.  None of that may stall the event
loop that serves every client, so ``AsyncStore`` runs each call of the
synchronous ``Store`` on a single dedicated thread (one thread: the calls keep
their order and the sqlite3 connection is never used by two threads at once).

The update log is the hot path (every ``session/update`` is logged before it
is sent), and a hop to the thread costs ~0.1 ms, four times the append itself.
So an append (and a read) is first tried right on the loop, on a second
connection that never waits (``busy_timeout = 0``, and no checkpoints: the
thread runs those): a WAL append takes tens of microseconds.  When that
connection finds the database locked (another process, or our own thread
writing), the append goes to the thread, which waits for the lock within the
busy timeout.  While any append is queued there, later ones queue behind it, so
the log keeps the order of the calls.  Appends queued together, with no other
call between them, are written in one transaction and one hop back to the loop.

On the loop an append is committed at once, in its own transaction, and its
future is done when ``append_update`` returns: a turn then emits a burst of
updates without waiting for the loop between them, and its watchers get the
burst in one socket write.  (Batching a loop pass's appends in one commit cost
more: each update waited a pass, and each went out in a write of its own.)  A
caller that has several updates at once (the deltas of one network read of a
model's reply; a reply's message with the transcript entry it shows) logs them
with ``append_updates``: one transaction, all or none.

Database failures surface as ``StoreUnavailable``, one error for the agent to
handle.  A call that has started on the thread finishes even when its caller
is cancelled: ``settled`` lets a caller wait for it anyway (an update that was
logged must still be sent).
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar, Unpack

from .backend import Store
from .base import SessionStore
from .listen import Heard
from .records import (
    HeldRow,
    PendingMessage,
    PendingUpdate,
    SessionRecord,
    StateChange,
    StoreUnavailable,
    TranscriptEntry,
    database_errors,
    pending,
)

__all__ = ["AsyncStore", "retrieved", "settled"]

T = TypeVar("T")


class _Batch:
    """Appends queued for the store thread, to be written in one transaction, and the
    leases asked for after them (``Store.append_and_take``)."""

    def __init__(self) -> None:
        self.updates: list[PendingUpdate] = []
        self.transcript: list[PendingMessage] = []
        self.futures: list[asyncio.Future[int]] = []  # one per update
        self.leases: list[tuple[str, dict[str, Any]]] = []  # session id, acquire_turn's fields
        self.taken: list[asyncio.Future[bool]] = []  # one per lease


#: Writes on the loop between two checkpoints of the WAL (run on the thread).
CHECKPOINT_EVERY = 500
#: Sessions whose last seq logged here ``AsyncStore.logged_here`` keeps.
LOGGED_KEPT = 4096
#: What ``AsyncStore._here`` says of a call that must run on the store's thread.
ON_THREAD = object()


class AsyncStore:
    """Awaitable versions of ``Store``'s methods (same names, same arguments)."""

    def __init__(self, store: Store) -> None:
        self.sync = store
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="crow-store")
        # The batch of appends the thread has not taken yet, which later appends may
        # join; None once the thread took it, or once another call was queued
        # behind it (an append after that call must not overtake it).
        self._open_batch: _Batch | None = None
        self._appends_lock = threading.Lock()  # the loop adds, the store thread takes
        self._queued = 0  # appends and leases handed to the thread and not yet resolved
        self._pending = 0  # calls submitted to the thread and not yet done
        self._fast: Store | None = store.loop_twin()
        self._fast_appends = 0
        # The last seq this process logged, per session, as its appends come back
        # (at most LOGGED_KEPT sessions, the latest): see ``logged_here``.
        self._logged: dict[str, int] = {}
        self._after_appends: list[Callable[[], None]] = []
        # Per session, the writes of its transcript or lease still under way: while
        # any is, a read of it waits behind them (``transcript_after``).
        self._unsettled: dict[str, int] = {}
        # The sessions to create at the end of this loop pass, together, with their futures.
        self._creating: list[tuple[dict[str, Any], asyncio.Future[SessionRecord]]] | None = None
        self._created_all: asyncio.Future[None] | None = None
        self._closed = False

    @property
    def shared(self) -> bool:
        """Other servers write to this store as they run (PostgreSQL)."""
        return self.sync.shared

    async def follow_updates(self, heard: Heard) -> None:
        """On a shared store, what the other servers log, cancel, ask and hold, until
        cancelled (crow.store.listen); StoreError on a store no other server shares."""
        await self.sync.follow_updates(heard)

    def submit(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> asyncio.Future[T]:
        """Queue ``fn(*args, **kwargs)`` on the store's thread."""
        if self._closed:
            raise StoreUnavailable("the session store is closed")
        self._create_sessions()  # the sessions asked for before this call come first
        call = functools.partial(_translated, fn, *args, **kwargs)
        with self._appends_lock:
            self._open_batch = None  # later appends come after this call
        future = asyncio.get_running_loop().run_in_executor(self._thread, call)
        self._pending += 1
        future.add_done_callback(self._finished)
        return future

    def _finished(self, _: asyncio.Future[Any]) -> None:
        self._pending -= 1

    async def drain(self) -> None:
        """Wait for the queued calls, and stop appending on the loop."""
        await self.submit(lambda: None)
        fast, self._fast = self._fast, None
        if fast is not None:
            fast.close()

    async def aclose(self) -> None:
        """Finish the queued calls, then close the database, on the store's thread:
        closed from the loop's, a connection could go while a call still uses it.
        Calls made after this fail with StoreUnavailable.  Once only."""
        if self._closed:
            return
        await self.drain()
        closing = self.submit(self.sync.close)
        self._closed = True
        await closing
        self._thread.shutdown(wait=False)

    def _here(self, method: str, *args: Any, write: bool, **kwargs: Any) -> Any:
        """``Store.<method>`` on the loop's own connection, or ``ON_THREAD`` when it
        must run on the thread instead: something is queued there (it must come
        first), or the database is locked (then nothing was written).  Raises
        StoreUnavailable for any other failure."""
        self._create_sessions()  # the sessions asked for before this call come first
        if self._fast is None or self._queued or self._pending:
            return ON_THREAD
        try:
            result = getattr(self._fast, method)(*args, **kwargs)
        except database_errors() as exc:
            if self._fast.is_busy(exc):
                return ON_THREAD
            raise StoreUnavailable(f"the session store failed: {exc}") from exc
        if write:
            self._count_fast_writes()
        return result

    def _done_here(self, method: str, *args: Any, **kwargs: Any) -> asyncio.Future[Any] | None:
        """A write by ``_here``, as a done future (its result, or its error); None
        when it must run on the thread."""
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        try:
            result = self._here(method, *args, write=True, **kwargs)
        except StoreUnavailable as exc:
            done.set_exception(exc)
            return done
        if result is ON_THREAD:
            return None
        done.set_result(result)
        return done

    async def _read(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """A read, on the loop's connection when it need not wait (WAL readers
        rarely do), else on the thread.  On the loop, because the thread would
        fight the loop for the GIL row by row: a 10,000-update replay took
        0.1-0.5 s there and 25 ms here."""
        if self._created_all is not None:  # sessions asked for before this read: first
            await asyncio.shield(self._created_all)
        result = self._here(method, *args, write=False, **kwargs)
        if result is ON_THREAD:
            result = await self.submit(getattr(self.sync, method), *args, **kwargs)
        return result

    def _write(
        self, method: str, session_id: str, *args: Any, **kwargs: Any
    ) -> asyncio.Future[Any]:
        """A one-statement write to a session (a message, the lease), as ``_read``: on
        the loop's connection when it can (tens of microseconds in WAL mode, against
        a hop to the thread and back), else on the thread.  A future either way: the
        caller may need ``settled`` on it."""
        done = self._done_here(method, session_id, *args, **kwargs)
        if done is not None:
            return done
        future = self.submit(getattr(self.sync, method), session_id, *args, **kwargs)
        self._settling([session_id], future)
        return future

    def _settling(self, session_ids: Iterable[str], future: asyncio.Future[Any]) -> None:
        """Reads of these sessions' transcripts wait behind ``future`` until it is done."""
        sessions = set(session_ids)
        for session_id in sessions:
            self._unsettled[session_id] = self._unsettled.get(session_id, 0) + 1

        def settled(_: asyncio.Future[Any]) -> None:
            for session_id in sessions:
                left = self._unsettled.pop(session_id) - 1
                if left:
                    self._unsettled[session_id] = left

        future.add_done_callback(settled)

    def _count_fast_writes(self) -> None:
        """The loop's connection never checkpoints the WAL: the thread does, now and then."""
        self._fast_appends += 1
        if self._fast_appends % CHECKPOINT_EVERY == 0:
            self._thread.submit(self.sync.checkpoint)

    # ---- sessions ---------------------------------------------------------------
    async def create_session(self, **fields: Any) -> SessionRecord:
        """``Store.create_session``.  The sessions asked for in one pass of the loop
        (several clients opening sessions at once) are created together, in one
        transaction, on the loop's connection when it can (like an append: a hop to
        the thread and a commit each cost more than an insert)."""
        loop = asyncio.get_running_loop()
        if self._creating is None:
            self._creating, self._created_all = [], loop.create_future()
            loop.call_soon(self._create_sessions)
        created: asyncio.Future[SessionRecord] = loop.create_future()
        self._creating.append((fields, created))
        return await created

    def _create_sessions(self) -> None:
        """Create the sessions asked for so far (at the end of the loop pass, or before
        a later call: calls keep their order)."""
        if not self._creating:
            return
        asked, self._creating = self._creating, None
        done, self._created_all = self._created_all, None
        sessions = [fields for fields, _ in asked]
        try:
            if self._closed:
                raise StoreUnavailable("the session store is closed")
            made = self._here("create_sessions", sessions, write=True)
        except Exception as exc:  # StoreUnavailable, or a bug: either way, say it to each
            self._created(asked, exc, done)
            return
        if made is not ON_THREAD:
            self._created(asked, made, done)
            return
        on_thread = self.submit(self.sync.create_sessions, sessions)
        on_thread.add_done_callback(
            lambda call: self._created(asked, call.exception() or call.result(), done)
        )

    def _created(
        self,
        asked: list[tuple[dict[str, Any], asyncio.Future[SessionRecord]]],
        outcome: list[SessionRecord] | BaseException,
        done: asyncio.Future[None] | None,
    ) -> None:
        for index, (fields, future) in enumerate(asked):
            if isinstance(outcome, BaseException):
                if not future.done():
                    future.set_exception(outcome)
                continue
            if self.shared and fields.get("updates"):  # its own announcement: none to read
                self._note_logged([(outcome[index].id, len(fields["updates"]))])
            if not future.done():
                future.set_result(outcome[index])
        if done is not None and not done.done():
            done.set_result(None)  # after the creators: they are answered first

    async def get_session(
        self, session_id: str, *, include_deleted: bool = False
    ) -> SessionRecord | None:
        return await self.submit(self.sync.get_session, session_id, include_deleted=include_deleted)

    async def update_session(self, session_id: str, **fields: Any) -> None:
        await self._write("update_session", session_id, **fields)

    async def delete_session(self, session_id: str) -> None:
        await self.submit(self.sync.delete_session, session_id)

    async def list_sessions(
        self, *, cwd: str | None = None, cursor: str | None = None
    ) -> tuple[list[SessionRecord], str | None]:
        listed: tuple[list[SessionRecord], str | None]
        listed = await self._read("list_sessions", cwd=cwd, cursor=cursor)
        return listed

    # ---- the turn lease ---------------------------------------------------------
    def acquire_turn(self, session_id: str, **fields: Any) -> asyncio.Future[bool]:
        """A future (not a coroutine: the caller may need ``settled`` on it).  On the
        loop's connection when it can, else with the appends queued for the thread:
        on PostgreSQL, in their transaction, no round trip of its own."""
        done = self._done_here("acquire_turn", session_id, **fields)
        if done is not None:
            return done
        loop = asyncio.get_running_loop()
        if self._closed:
            return _failed(loop, StoreUnavailable("the session store is closed"))
        taken: asyncio.Future[bool] = loop.create_future()
        self._enqueue([], None, (session_id, fields, taken))
        return taken

    async def release_turn(self, session_id: str, *, owner: str) -> None:
        await self._write("release_turn", session_id, owner=owner)

    async def renew_leases(self, owner: str, expires: float) -> int:
        return await self.submit(self.sync.renew_leases, owner, expires)

    # ---- the update log and the transcript --------------------------------------
    def append_update(
        self, session_id: str, body: bytes, **change: Unpack[StateChange]
    ) -> asyncio.Future[int]:
        """Log one update; a future of its seq (not a coroutine: the caller may
        need ``settled`` on it).  Appends keep the order they were made in."""
        done = self._done_here("append_update", session_id, body, **change)
        if done is not None:
            return done
        return self._queue_on_thread([pending(session_id, body, change)])[0]

    def append_updates(
        self, batch: list[PendingUpdate], transcript: list[PendingMessage] | None = None
    ) -> list[asyncio.Future[int]]:
        """Log several updates (at least one), and add ``transcript``'s entries,
        all or none, in one transaction; a future of each update's seq."""
        if len(batch) == 1 and not transcript:  # one statement, no transaction to open
            session_id, body, state, stop_reason, now = batch[0]
            return [
                self.append_update(session_id, body, state=state, stop_reason=stop_reason, now=now)
            ]
        loop = asyncio.get_running_loop()
        try:
            seqs = self._here("append_updates", batch, transcript, write=True)
        except StoreUnavailable as exc:
            return [_failed(loop, exc) for _ in batch]
        if seqs is ON_THREAD:
            return self._queue_on_thread(batch, transcript)
        done = [loop.create_future() for _ in batch]
        for future, seq in zip(done, seqs, strict=True):
            future.set_result(seq)
        return done

    def _queue_on_thread(
        self, updates: list[PendingUpdate], transcript: list[PendingMessage] | None = None
    ) -> list[asyncio.Future[int]]:
        """Queue appends for the thread, in one batch (one transaction) with those
        queued just before them, unless another call came between."""
        loop = asyncio.get_running_loop()
        if self._closed:
            return [_failed(loop, StoreUnavailable("the session store is closed")) for _ in updates]
        futures = [loop.create_future() for _ in updates]
        self._enqueue(list(zip(updates, futures, strict=True)), transcript, None)
        return futures

    def _enqueue(
        self,
        updates: list[tuple[PendingUpdate, asyncio.Future[int]]],
        transcript: list[PendingMessage] | None,
        lease: tuple[str, dict[str, Any], asyncio.Future[bool]] | None,
    ) -> None:
        """Add appends, or a lease, to the batch the thread has not taken yet, unless
        another call came between or the batch holds a lease of one of these
        sessions (a batch's leases are taken after its appends): else to a new one."""
        self._create_sessions()  # the sessions asked for before these come first
        touched = {update[0] for update, _ in updates} | {s for s, _, _ in transcript or ()}
        if lease is not None:
            touched.add(lease[0])
        self._queued += len(updates) + (lease is not None)
        with self._appends_lock:
            batch = self._open_batch
            if batch is not None and touched.intersection(s for s, _ in batch.leases):
                batch = None
            new = batch is None
            if batch is None:
                batch = self._open_batch = _Batch()
            for update, future in updates:
                batch.updates.append(update)
                batch.futures.append(future)
            batch.transcript += transcript or ()
            if lease is not None:
                batch.leases.append(lease[:2])
                batch.taken.append(lease[2])
        if new:  # the batch's write is queued; appends until the next call join it
            self._thread.submit(self._write_appends, batch, asyncio.get_running_loop())
        self._settling(touched, lease[2] if lease is not None else updates[-1][1])

    def _write_appends(self, batch: _Batch, loop: asyncio.AbstractEventLoop) -> None:
        """On the store thread: log a batch of queued appends in one transaction, and
        take its leases."""
        with self._appends_lock:
            if self._open_batch is batch:
                self._open_batch = None  # taken: later appends start another
        outcome: list[int] | BaseException
        taken: list[bool | BaseException]
        try:
            outcome, taken = self.sync.append_and_take(
                batch.updates, batch.transcript, batch.leases
            )
        except Exception as exc:  # a bug: each caller hears of it
            outcome, taken = exc, [exc for _ in batch.leases]
        loop.call_soon_threadsafe(self._resolve, batch, _unavailable(outcome), taken)

    def _resolve(
        self,
        batch: _Batch,
        outcome: list[int] | BaseException,
        taken: list[bool | BaseException],
    ) -> None:
        self._queued -= len(batch.futures) + len(batch.taken)
        if self.shared and not isinstance(outcome, BaseException):
            self._note_logged(
                (session_id, seq)
                for (session_id, *_), seq in zip(batch.updates, outcome, strict=True)
            )
        _resolve(batch.futures, outcome)
        for future, result in zip(batch.taken, taken, strict=True):
            if future.done():
                continue
            if isinstance(result, BaseException):
                future.set_exception(_unavailable(result))
            else:
                future.set_result(result)
        waiting, self._after_appends = self._after_appends, []
        for then in waiting:
            then()

    def _note_logged(self, logged: Iterable[tuple[str, int]]) -> None:
        """Keep the last seq logged here of each session (``logged_here``)."""
        for session_id, seq in logged:
            self._logged.pop(session_id, None)  # the latest go last
            self._logged[session_id] = seq
        while len(self._logged) > LOGGED_KEPT:
            del self._logged[next(iter(self._logged))]

    def after_appends(self, then: Callable[[], None]) -> bool:
        """Call ``then`` when the next batch of appends under way comes back; False
        (and ``then`` dropped) when none is under way."""
        if not self._queued:
            return False
        self._after_appends.append(then)
        return True

    def logged_here(self, session_id: str) -> int:
        """The last seq of the session this process logged (0: none known).  On a
        shared store every append is announced, to this server too; an update logged
        here is sent to its watchers by whoever logged it, so an announcement up to
        this seq needs no read of the log (crow.agent.cluster)."""
        return self._logged.get(session_id, 0)

    async def replay(self, session_id: str, *, after: int = 0) -> list[tuple[int, bytes]]:
        updates: list[tuple[int, bytes]] = await self._read("replay", session_id, after=after)
        return updates

    async def replay_page(
        self, session_id: str, *, after: int, limit: int
    ) -> tuple[list[tuple[int, bytes]], int]:
        page: tuple[list[tuple[int, bytes]], int] = await self._read(
            "replay_page", session_id, after=after, limit=limit
        )
        return page

    async def updates(self, session_id: str, *, after: int = 0) -> list[tuple[int, bytes]]:
        """Every logged update after ``after``, state changes included."""
        rows: list[tuple[int, bytes]] = await self._read("updates_list", session_id, after=after)
        return rows

    async def file_question(self, question_id: str, session_id: str, params: str) -> None:
        await self.submit(self.sync.file_question, question_id, session_id, params)

    async def answer_question(self, question_id: str, outcome: str) -> bool:
        return await self.submit(self.sync.answer_question, question_id, outcome)

    async def close_question(self, question_id: str) -> None:
        await self.submit(self.sync.close_question, question_id)

    async def question(self, question_id: str) -> tuple[str, str, str | None, bool] | None:
        return await self.submit(self.sync.question, question_id)

    async def open_questions(self, session_id: str) -> list[str]:
        return await self.submit(self.sync.open_questions, session_id)

    # ---- held prompts (shared stores) ---------------------------------------------
    async def hold_prompt(self, held_id: str, session_id: str, **fields: Any) -> int:
        return await self.submit(self.sync.hold_prompt, held_id, session_id, **fields)

    async def drop_held(self, held_id: str, session_id: str) -> None:
        await self.submit(self.sync.drop_held, held_id, session_id)

    async def held_prompts(self, session_id: str, now: float) -> list[HeldRow]:
        return await self.submit(self.sync.held_prompts, session_id, now)

    async def renew_held(self, owner: str, expires: float) -> int:
        return await self.submit(self.sync.renew_held, owner, expires)

    async def announce_cancel(self, session_id: str) -> None:
        await self.submit(self.sync.announce_cancel, session_id)

    async def last_seq(self, session_id: str) -> int:
        seq: int = await self._read("last_seq", session_id)
        return seq

    async def append_message(
        self, session_id: str, message: dict[str, Any], *, kind: str = "message"
    ) -> int:
        seq: int = await self._write("append_message", session_id, message, kind=kind)
        return seq

    async def transcript(self, session_id: str) -> list[TranscriptEntry]:
        entries: list[TranscriptEntry] = await self._read("transcript", session_id)
        return entries

    async def transcript_after(self, session_id: str, after: int) -> list[TranscriptEntry]:
        """What this process wrote itself is answered here, without a read or a hop to
        the thread (crow.store.tails), once every write to the session made before
        this call is done."""
        if not self._unsettled.get(session_id):
            known = self.sync.tails.after(session_id, after)
            if known is not None:
                return known
        entries: list[TranscriptEntry] = await self._read("transcript_after", session_id, after)
        return entries


def _failed(loop: asyncio.AbstractEventLoop, error: BaseException) -> asyncio.Future[Any]:
    future = loop.create_future()
    future.set_exception(error)
    return future


def retrieved(futures: list[asyncio.Future[Any]]) -> None:
    """Mark the errors of ``futures`` as seen: when a batch fails, each of its
    futures holds the error, and the caller raises only the first."""
    for future in futures:
        if future.done() and not future.cancelled():
            future.exception()


def _resolve(futures: list[asyncio.Future[int]], outcome: list[int] | BaseException) -> None:
    for index, future in enumerate(futures):
        if future.done():
            continue
        if isinstance(outcome, BaseException):
            future.set_exception(outcome)
        else:
            future.set_result(outcome[index])


def _unavailable(outcome: T) -> T | StoreUnavailable:
    """A database error as ``StoreUnavailable``; anything else as it is."""
    if isinstance(outcome, database_errors()):
        return StoreUnavailable(f"the session store failed: {outcome}")
    return outcome


def _translated(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    try:
        return fn(*args, **kwargs)
    except database_errors() as exc:
        raise StoreUnavailable(f"the session store failed: {exc}") from exc


async def settled(future: asyncio.Future[T]) -> tuple[T, bool]:
    """Wait for ``future`` to finish even if the caller is cancelled meanwhile.

    Returns its result and whether a cancellation arrived (the caller re-raises
    it once it has done what the result obliges it to do).
    """
    cancelled = False
    while not future.done():
        try:
            await asyncio.shield(future)
        except asyncio.CancelledError:
            cancelled = True
    return future.result(), cancelled


if TYPE_CHECKING:

    def _is_a_session_store(store: AsyncStore) -> SessionStore:
        return store  # mypy checks that AsyncStore gives all the agent asks of a store
