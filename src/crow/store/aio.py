"""The store as the event loop uses it: every call on one worker thread.

SQLite blocks: a write waits for another process's lock (up to the busy
timeout), a large replay reads for a while.  None of that may stall the event
loop that serves every client, so ``AsyncStore`` runs each call of the
synchronous ``Store`` on a single dedicated thread (one thread: the calls keep
their order and the sqlite3 connection is never used by two threads at once).

The update log is the hot path (every ``session/update`` is logged before it
is sent): appends queued while the thread is busy are written together, in one
transaction and one hop back to the loop, so many busy sessions cost few
commits.

Database failures surface as ``StoreUnavailable``, one error for the agent to
handle.  A call that has started on the thread finishes even when its caller
is cancelled: ``settled`` lets a caller wait for it anyway (an update that was
logged must still be sent).
"""

from __future__ import annotations

import asyncio
import functools
import sqlite3
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from .db import PendingUpdate, SessionRecord, Store, StoreUnavailable, TranscriptEntry

__all__ = ["AsyncStore", "settled"]

T = TypeVar("T")


class AsyncStore:
    """Awaitable versions of ``Store``'s methods (same names, same arguments)."""

    def __init__(self, store: Store) -> None:
        self.sync = store
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="crow-store")
        self._appends: list[tuple[PendingUpdate, asyncio.Future[int]]] = []
        self._appends_lock = threading.Lock()  # the loop adds, the store thread takes

    def submit(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> asyncio.Future[T]:
        """Queue ``fn(*args, **kwargs)`` on the store's thread."""
        call = functools.partial(_translated, fn, *args, **kwargs)
        return asyncio.get_running_loop().run_in_executor(self._thread, call)

    async def aclose(self) -> None:
        """Finish the queued calls, then close the database."""
        await self.submit(self.sync.close)
        self._thread.shutdown(wait=False)

    # ---- sessions ---------------------------------------------------------------
    async def create_session(self, **fields: Any) -> SessionRecord:
        return await self.submit(self.sync.create_session, **fields)

    async def get_session(
        self, session_id: str, *, include_deleted: bool = False
    ) -> SessionRecord | None:
        return await self.submit(self.sync.get_session, session_id, include_deleted=include_deleted)

    async def update_session(self, session_id: str, **fields: Any) -> None:
        await self.submit(self.sync.update_session, session_id, **fields)

    async def delete_session(self, session_id: str) -> None:
        await self.submit(self.sync.delete_session, session_id)

    async def list_sessions(
        self, *, cwd: str | None = None, cursor: str | None = None
    ) -> tuple[list[SessionRecord], str | None]:
        return await self.submit(self.sync.list_sessions, cwd=cwd, cursor=cursor)

    # ---- the turn lease ---------------------------------------------------------
    async def acquire_turn(self, session_id: str, **fields: Any) -> bool:
        return await self.submit(self.sync.acquire_turn, session_id, **fields)

    async def release_turn(self, session_id: str, *, owner: str) -> None:
        await self.submit(self.sync.release_turn, session_id, owner=owner)

    async def renew_leases(self, owner: str, expires: float) -> int:
        return await self.submit(self.sync.renew_leases, owner, expires)

    # ---- the update log and the transcript --------------------------------------
    def append_update(
        self,
        session_id: str,
        body: bytes,
        *,
        state: str | None = None,
        stop_reason: str | None = None,
        now: str | None = None,
    ) -> asyncio.Future[int]:
        """Log one update; a future of its seq (not a coroutine: the caller may
        need ``settled`` on it).  Appends keep the order they were made in."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[int] = loop.create_future()
        with self._appends_lock:
            self._appends.append(((session_id, body, state, stop_reason, now), future))
            first = len(self._appends) == 1
        if first:  # a write of the batch is queued; later appends join it
            self._thread.submit(self._write_appends, loop)
        return future

    def _write_appends(self, loop: asyncio.AbstractEventLoop) -> None:
        """On the store thread: log every queued append in one transaction."""
        with self._appends_lock:
            batch, self._appends = self._appends, []
        try:
            outcome: list[int] | BaseException = self.sync.append_updates([u for u, _ in batch])
        except sqlite3.Error as exc:
            outcome = StoreUnavailable(f"the session store failed: {exc}")
        except Exception as exc:
            outcome = exc
        loop.call_soon_threadsafe(_resolve, [f for _, f in batch], outcome)

    async def replay(self, session_id: str, *, after: int = 0) -> list[tuple[int, bytes]]:
        return await self.submit(self.sync.replay, session_id, after=after)

    async def append_message(
        self, session_id: str, message: dict[str, Any], *, kind: str = "message"
    ) -> int:
        return await self.submit(self.sync.append_message, session_id, message, kind=kind)

    async def transcript(self, session_id: str) -> list[TranscriptEntry]:
        return await self.submit(self.sync.transcript, session_id)


def _resolve(futures: list[asyncio.Future[int]], outcome: list[int] | BaseException) -> None:
    for index, future in enumerate(futures):
        if future.done():
            continue
        if isinstance(outcome, BaseException):
            future.set_exception(outcome)
        else:
            future.set_result(outcome[index])


def _translated(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    try:
        return fn(*args, **kwargs)
    except sqlite3.Error as exc:
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
