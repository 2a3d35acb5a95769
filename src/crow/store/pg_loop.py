"""The PostgreSQL store's hot calls on the event loop: psycopg's ``AsyncConnection``.

Profiled under the cluster bench (30 clients, one server), the store's thread was
the limit: a batch of ~30 appends took 1.3 ms alone and 6 ms under load, most of it
waiting to get the interpreter lock back from the loop after each round trip, and
every call paid a hop to the thread and one back.  A prompt's store traffic is
four calls (the lease, the held-prompt check, the transcript's new entries, its
share of an append batch), so ``AsyncStore`` (aio.py) runs these on the loop, on
one connection of their own, in the order they were made (its lane), and only the
rare calls through the thread.  Their SQL is the blocking store's (backend.py,
postgres.py); what they return is the same.

The connection comes back after it is lost, as ``PostgresConnection``'s does: a
call on a connection known to be lost, or one the server hung up on, or one quiet
for ``CHECK_AFTER_S`` whose check fails, reconnects first; a call that fails as
the connection goes is not retried (the server may have done it); a transaction
is never carried over to a new connection (it is one coroutine on one connection:
its failure fails the call, all of it rolled back).
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from .backend import BUSY_TIMEOUT_MS, state_statement
from .postgres import (
    _APPEND_ROWS,
    _LOCK_SESSIONS,
    CHECK_AFTER_S,
    CONNECT_TIMEOUT_S,
    LOCK_SESSION,
    _psycopg,
    hung_up,
    seqs_of,
)
from .records import HeldRow, PendingMessage, PendingUpdate, TranscriptEntry, entries
from .sql import Statements
from .urls import redact_url

__all__ = ["PostgresOnLoop"]

log = logging.getLogger("crow.store")


class PostgresOnLoop:
    """The calls ``AsyncStore`` runs on the loop for a PostgreSQL store (each named
    and called as ``Store``'s), over one ``AsyncConnection``, opened at first use.
    One call at a time: the caller (``AsyncStore``'s lane) awaits each in turn."""

    def __init__(self, url: str, sql: Statements) -> None:
        self.url = url
        self.sql = sql
        self.conn: Any = None
        self._last_used = 0.0

    async def ready(self) -> Any:
        """The connection, opened or reopened if it must be.  Raises psycopg.Error."""
        conn = self.conn
        if conn is None or conn.closed or conn.broken or self._hung_up():
            if conn is not None:
                log.warning("the connection to %s was lost: reconnecting", redact_url(self.url))
            await self._reopen()
        elif await self._quiet_and_dead():
            log.warning("the connection to %s was lost: reconnecting", redact_url(self.url))
            await self._reopen()
        self._last_used = time.monotonic()
        return self.conn

    async def _reopen(self) -> None:
        if self.conn is not None:
            with contextlib.suppress(Exception):
                await self.conn.close()
            self.conn = None
        psycopg = _psycopg()
        conn = await psycopg.AsyncConnection.connect(
            self.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S
        )
        # A lock held elsewhere fails the call, bounded, as SQLite's busy timeout does.
        await conn.execute(f"SET lock_timeout = {int(BUSY_TIMEOUT_MS)}")
        self.conn = conn

    def _hung_up(self) -> bool:
        return hung_up(self.conn)

    async def _quiet_and_dead(self) -> bool:
        if time.monotonic() - self._last_used <= CHECK_AFTER_S:
            return False
        try:
            await self.conn.execute("")
        except _psycopg().OperationalError:
            return True
        return False

    async def aclose(self) -> None:
        if self.conn is not None:
            await self.conn.close()

    @contextlib.asynccontextmanager
    async def _transaction(self) -> AsyncIterator[Any]:
        """A write transaction in pipeline mode: one round trip (the statements go out
        without waiting for each other); any error rolls all of it back."""
        conn = await self.ready()
        async with conn.pipeline(), conn.transaction():
            yield conn

    async def _execute(self, sql: str, params: tuple[Any, ...]) -> Any:
        return await (await self.ready()).execute(sql, params)

    # ---- what the loop runs -------------------------------------------------------
    async def append_updates(
        self, batch: list[PendingUpdate], transcript: list[PendingMessage] | None = None
    ) -> list[int]:
        """``PostgresStore.append_updates``, the same statements in one round trip."""
        sessions, bodies = [s for s, *_ in batch], [body.decode() for _, body, *_ in batch]
        async with self._transaction() as conn:
            for session_id, message, kind in transcript or ():
                await conn.execute(LOCK_SESSION, (session_id,))
                params = (session_id, session_id, kind, json.dumps(message))
                await conn.execute(self.sql.append_message, params)
            await conn.execute(_LOCK_SESSIONS, (sorted(set(sessions)),))
            added = await conn.execute(_APPEND_ROWS, (sessions, bodies))
            for session_id, _, state, stop_reason, now in batch:
                statement = state_statement(self.sql, session_id, state, stop_reason, now)
                if statement is not None:
                    await conn.execute(*statement)
        return seqs_of(sessions, await added.fetchall())

    async def acquire_turn(
        self, session_id: str, *, owner: str, pid: int, expires: float, replacing: str | None = None
    ) -> bool:
        params = (owner, pid, expires, session_id, owner, replacing)
        return bool((await self._execute(self.sql.acquire_turn, params)).rowcount == 1)

    async def release_turn(self, session_id: str, *, owner: str) -> None:
        await self._execute(self.sql.release_turn, (session_id, owner))

    async def held_prompts(self, session_id: str, now: float) -> list[HeldRow]:
        rows = await (await self._execute(self.sql.held_prompts, (session_id, now))).fetchall()
        return [HeldRow(*row) for row in rows]

    async def transcript(self, session_id: str) -> list[TranscriptEntry]:
        cursor = await self._execute(self.sql.transcript, (session_id, session_id))
        return entries(await cursor.fetchall())

    async def transcript_after(self, session_id: str, after: int) -> list[TranscriptEntry]:
        cursor = await self._execute(self.sql.transcript_after, (session_id, after))
        return entries(await cursor.fetchall())
