"""The session store on a PostgreSQL server (``[store] url`` or ``CROW_STORE_URL``;
psycopg 3), for servers on several machines: same tables, same migrations
(``migrations.py``), same behaviour, which the store tests check on both.  A log
append there locks its session's row, so two servers appending to one session
still get consecutive sequence numbers.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .listen import (
    CANCELS_CHANNEL,
    HELD_CHANNEL,
    QUESTIONS_CHANNEL,
    UPDATES_CHANNEL,
    follow_updates,
)
from .migrations import migrate_postgres
from .records import StoreError, database_errors
from .sqlite import BUSY_TIMEOUT_MS, Store
from .urls import redact_url

log = logging.getLogger("crow.store")

__all__ = ["PostgresStore", "probe", "redact_url"]

#: Seconds to open a connection to a PostgreSQL server.
CONNECT_TIMEOUT_S = 10
#: A PostgreSQL connection unused this long is checked before its next call.
CHECK_AFTER_S = 5.0


def _psycopg() -> Any:
    """psycopg, which only a PostgreSQL store needs (the ``postgres`` extra)."""
    try:
        import psycopg
    except ImportError as exc:
        raise StoreError(
            f"a PostgreSQL store needs psycopg, which does not import ({exc}): "
            "pip install 'crow-cli[postgres]'"
        ) from None
    return psycopg


def probe(url: str) -> None:
    """Connect to the PostgreSQL store at ``url`` and leave; StoreError (one line
    naming it, password masked, and what to do) if that fails."""
    psycopg = _psycopg()
    try:
        psycopg.connect(url, connect_timeout=CONNECT_TIMEOUT_S).close()
    except psycopg.Error as exc:
        raise StoreError(_unreachable(url, exc)) from exc


def _unreachable(url: str, exc: BaseException) -> str:
    """Why the store at ``url`` cannot be opened, in one line, with what to do."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        where = f"{parts.hostname or 'localhost'}:{parts.port or 5432}"
    except ValueError:
        where = "its host"
    said = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return (
        f"cannot reach the PostgreSQL session store at {where} ({redact_url(url)}): {said}; "
        "start it, or change [store] url in config.toml (CROW_STORE_URL overrides it)"
    )


class PostgresStore(Store):
    """The store on a PostgreSQL server: ``Store``'s SQL over one psycopg connection."""

    dialect = "postgresql"
    BEGIN = "BEGIN"

    def __init__(self, url: str) -> None:
        self.path = Path(os.devnull)  # no file: nothing appends on the loop
        self.url = url
        try:
            connection = _PostgresConnection(url)
        except database_errors() as exc:
            raise StoreError(_unreachable(url, exc)) from exc
        try:
            migrate_postgres(connection.conn)
        except BaseException as exc:
            connection.close()
            if isinstance(exc, database_errors()):
                message = f"cannot migrate the session store {redact_url(url)}: {exc}"
                raise StoreError(message) from exc
            raise
        self.db = connection  # type: ignore[assignment]

    shared = True

    def checkpoint(self) -> None:
        """PostgreSQL checkpoints by itself."""

    def loop_twin(self) -> Store | None:
        """None: a PostgreSQL call is a network round trip, the thread's to wait for."""
        return None

    def is_busy(self, exc: BaseException) -> bool:
        return False  # no call runs on the loop to find it busy

    async def follow_updates(self, *callbacks: Callable[..., None]) -> None:
        """What every server logs, cancels, asks and holds, as it happens, until
        cancelled (crow.store.listen)."""
        await follow_updates(self.url, *callbacks)

    def announce_cancel(self, session_id: str) -> None:
        """Ask whichever server runs the session's turn to cancel it."""
        self.db.execute("SELECT pg_notify(?, ?)", (CANCELS_CHANNEL, session_id))

    def _announce_held(self, session_id: str) -> None:
        self.db.execute("SELECT pg_notify(?, ?)", (HELD_CHANNEL, session_id))

    # Every change to a question is announced (its id): servers read the row.
    def file_question(self, question_id: str, session_id: str, params: str) -> None:
        super().file_question(question_id, session_id, params)
        self._announce_question(question_id)

    def answer_question(self, question_id: str, outcome: str) -> bool:
        won = super().answer_question(question_id, outcome)
        if won:
            self._announce_question(question_id)
        return won

    def close_question(self, question_id: str) -> None:
        super().close_question(question_id)
        self._announce_question(question_id)

    def _announce_question(self, question_id: str) -> None:
        self.db.execute("SELECT pg_notify(?, ?)", (QUESTIONS_CHANNEL, question_id))

    def append_update(
        self,
        session_id: str,
        body: bytes,
        *,
        state: str | None = None,
        stop_reason: str | None = None,
        now: str | None = None,
    ) -> int:
        return self.append_updates([(session_id, body, state, stop_reason, now)])[0]

    def _announce_update(self, session_id: str, seq: int) -> None:
        # Every server listening hears of it when this commits (crow.store.listen).
        self.db.execute("SELECT pg_notify(?, ?)", (UPDATES_CHANNEL, f"{session_id} {seq}"))

    def append_message(
        self, session_id: str, message: dict[str, Any], *, kind: str = "message"
    ) -> int:
        self.db.execute(self.BEGIN)
        try:
            seq = self._append_message(session_id, message, kind)
            self.db.execute("COMMIT")
        except BaseException:
            if self.db.in_transaction:
                self.db.execute("ROLLBACK")
            raise
        return seq

    def _lock_session(self, session_id: str) -> None:
        # Servers appending to one session wait for each other on its row: MAX(seq) + 1
        # is then never computed twice.
        self.db.execute("SELECT 1 FROM sessions WHERE id = ? FOR UPDATE", (session_id,))


class _PostgresConnection:
    """A psycopg connection answering the sqlite3 calls ``Store`` makes: ``?``
    placeholders, ``execute`` returning a cursor, ``in_transaction``; and coming back
    after the connection is lost (a restarted or failed-over server, a terminated
    backend).

    One connection, reopened, not a pool (``psycopg_pool``): the store runs every
    call on one thread, and its transactions span several calls (``BEGIN``, the
    appends, ``COMMIT``), which a pool would have to pin to one connection anyway.

    - A call on a connection known to be lost reconnects first; so does one after
      ``CHECK_AFTER_S`` of quiet whose check (an empty query, as psycopg_pool's
      ``check_connection``) fails: a server restarted meanwhile costs nothing.
    - A call that fails as the connection goes is not retried (the server may have
      done it): it raises, and the one after reconnects.
    - A transaction whose connection is lost is never carried on over a new one:
      its later statements raise until it is rolled back, so nothing is half-written.
    """

    def __init__(self, url: str) -> None:
        self.url = url
        self.conn = self._connect()
        self._in_transaction = False  # a BEGIN of ours is open
        self._lost_transaction = False  # ... and its connection went: it must end
        self._last_used = time.monotonic()

    def _connect(self) -> Any:
        psycopg = _psycopg()
        conn = psycopg.connect(self.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)
        # A lock held elsewhere fails the call, bounded, as SQLite's busy timeout does.
        conn.execute(f"SET lock_timeout = {int(BUSY_TIMEOUT_MS)}")
        return conn

    def ready(self) -> Any:
        """The connection, reopened if it was lost.  Raises psycopg.Error."""
        lost = self.conn.closed or self.conn.broken
        if self._in_transaction:
            if lost or self._lost_transaction:
                self._lost_transaction = True
                raise _lost_in_transaction()
        elif lost or self._hung_up() or self._quiet_and_dead():
            log.warning("the connection to %s was lost: reconnecting", redact_url(self.url))
            with contextlib.suppress(Exception):
                self.conn.close()
            self.conn = self._connect()
        self._last_used = time.monotonic()
        return self.conn

    def _hung_up(self) -> bool:
        """Whether the server spoke on the idle connection: it does so to hang up (a
        terminated backend, a restart: an error, then the end); nothing else comes on a
        connection that does not LISTEN (a rare notice only costs a reconnect).  No
        round trip."""
        try:
            readable, _, _ = select.select([self.conn.pgconn.socket], [], [], 0)
        except (OSError, ValueError):  # no socket any more
            return True
        return bool(readable)

    def _quiet_and_dead(self) -> bool:
        """After ``CHECK_AFTER_S`` unused, an empty query (psycopg_pool's
        ``check_connection``) must answer: a route that died without a word."""
        import psycopg

        if time.monotonic() - self._last_used <= CHECK_AFTER_S:
            return False
        try:
            self.conn.execute("")
        except psycopg.OperationalError:
            return True
        return False

    def execute(self, sql: str, params: tuple[Any, ...] | list[Any] = ()) -> Any:
        word = sql.lstrip()[:8].upper()
        ending = word.startswith(("COMMIT", "ROLLBACK"))
        gone = self._lost_transaction or self.conn.closed or self.conn.broken
        if ending and self._in_transaction and gone:
            self._in_transaction = self._lost_transaction = False
            if word.startswith("ROLLBACK"):
                return None  # the server dropped it with the connection
            raise _lost_in_transaction()
        conn = self.ready()
        cursor = conn.execute(sql.replace("?", "%s"), params)
        if word.startswith("BEGIN"):
            self._in_transaction = True
        elif word.startswith(("COMMIT", "ROLLBACK")):
            self._in_transaction = False
        return cursor

    def executemany(self, sql: str, rows: list[tuple[Any, ...]]) -> None:
        with self.ready().cursor() as cursor:
            cursor.executemany(sql.replace("?", "%s"), rows)

    @property
    def in_transaction(self) -> bool:
        return self._in_transaction

    def close(self) -> None:
        self.conn.close()


def _lost_in_transaction() -> Exception:
    import psycopg

    return psycopg.OperationalError(
        "the connection to PostgreSQL was lost in a transaction; none of it was kept"
    )
