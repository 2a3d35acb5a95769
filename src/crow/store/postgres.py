"""The session store on a PostgreSQL server (``[store] url`` or ``CROW_STORE_URL``;
psycopg 3), for servers on several machines: same tables, same migrations
(``migrations.py``), same SQL (``Store``'s, backend.py), same behaviour, which the
store tests check on both.

What differs: a log append locks its session's row, so two servers appending to
one session still get consecutive sequence numbers; every change another server
must hear of (an update logged, a question filed or answered, a held prompt, a
cancel) is announced with ``pg_notify`` on listen.py's channels, in the
transaction that makes it; and the connection comes back after it is lost.

Where the time goes: every call runs on the store's one thread (crow.store.aio),
waiting on round trips.  A prompt once cost ~45 of them: each append transaction
was BEGIN, a lock and a read of the last seq per session, the inserts, a NOTIFY
per update, COMMIT; and each of this server's own NOTIFYs, heard before its append
came back, made it read the log again.  So a write transaction goes out pipelined
(``PostgresConnection.transaction``: no statement waits for the one before; one
round trip unless it reads midway), a session is announced once per transaction at
its last seq, and a server does not read the log for its own announcements
(crow.agent.cluster).  A prompt was then ~2.4 round trips: the lease, the
transcript's new entries, and its share of an append transaction (appends queued
together share one); the held-prompt check is read once while a session holds none
(crow.agent.shared_queue).  Now the transcript's entries this process wrote are not
read back (crow.store.tails), and a lease asked while appends wait joins their
transaction (``append_and_take``): a prompt is ~0.4 round trips, its share of one
transaction of ~6 statements.

On a machine whose cores are busy the throughput follows the CPU a prompt costs,
the server's and PostgreSQL's, and that followed the statements sent: so an append
transaction is at most four whatever it holds (``append_updates``), not one per
transcript entry and state change.  A prompt's statements went from ~10 to ~5,
its CPU from ~4.0-4.8 + 0.7-0.8 ms to ~3.8-4.2 + 0.6-0.7 ms (server + PostgreSQL;
SQLite's server ~3.2), and the store's thread from busy ~70% of the time to ~30%.
Then the arrays went in binary (psycopg escaped every quote of every JSON body in
text), and the round trips above went: on a quiet machine (30 clients), the
server's CPU per prompt ~2.4 -> ~1.2-2.0 ms (SQLite's ~1.6-2.1 in the same runs),
PostgreSQL's ~0.45-0.57 -> ~0.33-0.37 ms; one server's prompts/s went from ~0.57x
SQLite's to ~0.8x (README).  What is left: a prompt waits for ~5
transactions one after another (the lease, the prompt, the reply's deltas, the
reply, the idle), each shared with other sessions but one at a time on the one
connection, whose next batch is sent only once the last is answered.
Running the calls on the loop over psycopg's ``AsyncConnection`` was measured and
not kept: each query cost more CPU there (asyncio's reader callbacks and futures
against a blocking wait), and one call at a time waited a loop pass for its answer.

psycopg is optional (the ``postgres`` extra): it is imported when a PostgreSQL
store is opened, never as Crow starts.
"""

from __future__ import annotations

import contextlib
import json
import logging
import select
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar
from urllib.parse import urlsplit

from .backend import BUSY_TIMEOUT_MS, Store
from .listen import Heard, follow_updates
from .migrations import migrate_postgres
from .records import PendingMessage, PendingUpdate, StoreError, database_errors
from .sql import UPDATES_CHANNEL, Statements
from .tails import TranscriptTails
from .urls import redact_url

log = logging.getLogger("crow.store")

__all__ = ["LOCK_SESSION", "PostgresConnection", "PostgresStore", "hung_up", "probe", "seqs_of"]

#: Seconds to open a connection to a PostgreSQL server.
CONNECT_TIMEOUT_S = 10
#: A PostgreSQL connection unused this long is checked before its next call.
CHECK_AFTER_S = 5.0


def _psycopg() -> Any:
    """psycopg, which only a PostgreSQL store needs (the ``postgres`` extra)."""
    try:
        import psycopg  # optional: loaded when a PostgreSQL store is opened
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
    """The store on the PostgreSQL server at ``url``, over one ``PostgresConnection``."""

    dialect = "postgresql"
    shared = True
    sql: ClassVar[Statements] = Statements.marked("%s")
    db: PostgresConnection

    def __init__(self, url: str) -> None:
        self.url = url
        self.tails = TranscriptTails()
        try:
            connection = PostgresConnection(url)
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
        self.db = connection

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        """A write transaction in one round trip, or as few as its reads need
        (``PostgresConnection.transaction``)."""
        with self.db.transaction():
            yield

    def append_updates(
        self, batch: list[PendingUpdate], transcript: list[PendingMessage] | None = None
    ) -> list[int]:
        """``Store.append_updates`` in at most four statements whatever the batch
        holds (``_write_batch``), in one pipelined transaction: one round trip."""
        return self._write_batch(batch, transcript, [])[0]

    def append_and_take(
        self,
        batch: list[PendingUpdate],
        transcript: list[PendingMessage] | None,
        leases: list[tuple[str, dict[str, Any]]],
    ) -> tuple[list[int] | BaseException, list[bool | BaseException]]:
        """``Store.append_and_take`` in one transaction, one round trip: a lease then
        costs the store's thread no round trip of its own.  Should it fail, none of
        it was kept: the appends fail, and the leases are tried alone."""
        if not leases:
            return super().append_and_take(batch, transcript, leases)
        try:
            seqs, taken = self._write_batch(batch, transcript, leases)
        except database_errors() as exc:
            return exc, super().append_and_take([], None, leases)[1]
        return seqs, list(taken)

    def _write_batch(
        self,
        batch: list[PendingUpdate],
        transcript: list[PendingMessage] | None,
        leases: list[tuple[str, dict[str, Any]]],
    ) -> tuple[list[int], list[bool]]:
        """Appends and leases in one transaction of at most six statements whatever
        they hold, none waiting for another's answer: one round trip.  The sessions
        it touches are locked (in one order: two servers' batches never wait on
        each other in a circle); then one statement numbers and inserts the
        transcript's entries; one numbers each session's updates from its last seq,
        inserts them and announces each session's last (a snapshot taken once the
        locks were granted: the last seq it reads is the last); one sets what the
        updates change on their sessions; one takes the leases, and one reads their
        transcripts' last seqs (``Store.take_turn``).  The results are read after
        the commit."""
        sessions, bodies = [s for s, *_ in batch], [body.decode() for _, body, *_ in batch]
        writing = [s for s, _, _ in transcript or ()]
        messages = [json.dumps(message) for _, message, _ in transcript or ()]
        leased = [session_id for session_id, _ in leases]
        locked = sorted({*sessions, *writing, *leased})
        changes = _changes(batch)
        with self._noting(batch, transcript):
            with self._transaction():
                self.db.execute(_LOCK_SESSIONS, (locked,))
                if transcript:
                    kinds = [kind for _, _, kind in transcript]
                    written = self.db.execute(_ADD_MESSAGES, (writing, kinds, messages))
                if batch:
                    added = self.db.execute(_APPEND_ROWS, (sessions, bodies))
                if changes:
                    columns = zip(*changes, strict=True)
                    self.db.execute(_SET_STATES, tuple(list(column) for column in columns))
                if leases:
                    took = self.db.execute(_TAKE_TURNS, _lease_columns(leases))
                    lasts = self.db.execute(_TRANSCRIPT_LASTS, (leased,))
            entries = seqs_of(writing, written.fetchall()) if transcript else []
            seqs = seqs_of(sessions, added.fetchall()) if batch else []
        self._noted(batch, transcript or [], entries, messages)
        if not leases:
            return seqs, []
        taken = {row[0] for row in took.fetchall()}
        last = {session_id: int(seq) for session_id, seq in lasts.fetchall()}
        for session_id in leased:
            if session_id in taken:
                self.tails.leased(session_id, last.get(session_id, 0))
            else:
                self.tails.unleased(session_id)
        return seqs, [session_id in taken for session_id in leased]

    def _take_turn(self, session_id: str, params: tuple[Any, ...]) -> int | None:
        """The lease and the transcript's last seq in one round trip: two statements,
        pipelined (the second's snapshot is taken once the first has its row lock,
        so it sees a transcript written by whoever held the lock)."""
        with self.db.pipeline() as conn:
            taken = conn.execute(self.sql.acquire_turn, params)
            last = conn.execute(self.sql.transcript_last, (session_id,))
        row = last.fetchone()
        return None if taken.rowcount != 1 else int(row[0])

    def _begin(self) -> None:
        self.db.begin()

    def _commit(self) -> None:
        self.db.commit()

    def _rollback(self) -> None:
        if self.db.in_transaction:
            self.db.rollback()

    def schema_version(self) -> int:
        return int(self.db.execute("SELECT version FROM crow_schema").fetchone()[0])

    async def follow_updates(self, heard: Heard) -> None:
        """What every server logs, cancels, asks and holds, as it happens, until
        cancelled (crow.store.listen)."""
        await follow_updates(self.url, *heard)

    def checkpoint(self) -> None:
        """PostgreSQL checkpoints by itself."""

    def _announce(self, channel: str, payload: str) -> None:
        # Every server listening hears of it when this commits (crow.store.listen).
        self.db.execute("SELECT pg_notify(%s, %s)", (channel, payload))

    def _lock_session(self, session_id: str) -> None:
        # Servers appending to one session wait for each other on its row: MAX(seq) + 1
        # is then never computed twice.
        self.db.execute(LOCK_SESSION, (session_id,))


def _changes(
    batch: list[PendingUpdate],
) -> list[tuple[str, str | None, str | None, bool, str | None]]:
    """What a batch's updates set on their sessions, one row per session changed:
    (id, state, stop reason, whether it went idle, updated-at), as ``Store``'s
    one statement per update would leave it: the last state with its stop reason,
    the lease released if any update was an idle, the last updated-at."""
    changed: dict[str, tuple[str | None, str | None, bool, str | None]] = {}
    for session_id, _, state, stop_reason, now in batch:
        if state is None and now is None:
            continue
        last_state, last_reason, idle, stamp = changed.get(session_id, (None, None, False, None))
        if state is not None:
            last_state, last_reason, idle = state, stop_reason, idle or state == "idle"
        changed[session_id] = (last_state, last_reason, idle, now if now is not None else stamp)
    return [(session_id, *change) for session_id, change in changed.items()]


def _lease_columns(leases: list[tuple[str, dict[str, Any]]]) -> tuple[list[Any], ...]:
    """``_TAKE_TURNS``' five arrays: session ids, owners, pids, expiries, owners replaced."""
    return (
        [session_id for session_id, _ in leases],
        [fields["owner"] for _, fields in leases],
        [fields["pid"] for _, fields in leases],
        [float(fields["expires"]) for _, fields in leases],
        [fields.get("replacing") for _, fields in leases],
    )


def seqs_of(sessions: list[str], added: list[tuple[Any, ...]]) -> list[int]:
    """The seq of each update of a batch (``sessions``: each update's session, in
    order), from ``_APPEND_ROWS``'s rows (each session's last seq)."""
    counts = Counter(sessions)
    following = {s: last - counts[s] + 1 for s, last, *_ in added}
    seqs = []
    for session_id in sessions:
        seqs.append(following[session_id])
        following[session_id] += 1
    return seqs


def hung_up(conn: Any) -> bool:
    """Whether the server spoke on the idle connection ``conn`` (psycopg's, either
    kind): it does so to hang up (a terminated backend, a restart: an error, then
    the end); nothing else comes on a connection that does not LISTEN (a rare notice
    only costs a reconnect).  No round trip."""
    try:
        readable, _, _ = select.select([conn.pgconn.socket], [], [], 0)
    except (OSError, ValueError):  # no socket any more
        return True
    return bool(readable)


#: One session's row locked: servers appending to it wait for each other there.
#: (The array parameters below go in binary, ``%b``: in text, psycopg escapes every
#: quote of every JSON body with a regular expression, which cost ~30 us a body,
#: most of the store thread's CPU; in binary an element is its length and bytes.)
LOCK_SESSION = "SELECT 1 FROM sessions WHERE id = %s FOR UPDATE"
#: Sessions' rows locked, in the order of their ids.
_LOCK_SESSIONS = "SELECT 1 FROM sessions WHERE id = ANY(%b::text[]) ORDER BY id FOR UPDATE"
#: Transcript entries (session ids, kinds, JSON bodies: three arrays) numbered after
#: each session's last entry, in their order, inserted; each session's last returned.
_ADD_MESSAGES = (
    "WITH new AS (SELECT * FROM unnest(%b::text[], %b::text[], %b::text[]) WITH ORDINALITY"
    " AS row(session_id, kind, body, n)),"
    " last AS (SELECT one.session_id, (SELECT COALESCE(MAX(seq), 0) FROM transcript"
    " WHERE transcript.session_id = one.session_id) AS seq"
    " FROM (SELECT DISTINCT session_id FROM new) AS one),"
    " added AS (INSERT INTO transcript (session_id, seq, kind, body) SELECT new.session_id,"
    " last.seq + ROW_NUMBER() OVER (PARTITION BY new.session_id ORDER BY new.n), new.kind,"
    " new.body FROM new JOIN last USING (session_id) RETURNING session_id, seq)"
    " SELECT session_id, MAX(seq) FROM added GROUP BY session_id"
)
#: What updates set on their sessions (``_changes``' rows, as five arrays): the state
#: and stop reason where one is given, the lease released where it went idle, the
#: updated-at where one is given (``Statements.set_idle``, ``set_state``,
#: ``set_updated_at`` in one).
_SET_STATES = (
    "UPDATE sessions SET"
    " state = CASE WHEN c.state IS NULL THEN sessions.state ELSE c.state END,"
    " stop_reason = CASE WHEN c.state IS NULL THEN sessions.stop_reason ELSE c.stop_reason END,"
    " owner = CASE WHEN c.idle THEN NULL ELSE sessions.owner END,"
    " owner_pid = CASE WHEN c.idle THEN NULL ELSE sessions.owner_pid END,"
    " lease_expires = CASE WHEN c.idle THEN NULL ELSE sessions.lease_expires END,"
    " updated_at = COALESCE(c.now, sessions.updated_at)"
    " FROM unnest(%b::text[], %b::text[], %b::text[], %b::boolean[], %b::text[])"
    " AS c(id, state, stop_reason, idle, now) WHERE sessions.id = c.id"
)
#: Leases taken (``Statements.acquire_turn`` for each row of ``_lease_columns``); the
#: ids of the sessions whose lease is now ours.
_TAKE_TURNS = (
    "UPDATE sessions SET owner = l.owner, owner_pid = l.pid, lease_expires = l.expires"
    " FROM unnest(%b::text[], %b::text[], %b::bigint[], %b::float8[], %b::text[])"
    " AS l(id, owner, pid, expires, replacing)"
    " WHERE sessions.id = l.id AND sessions.deleted = 0 AND (sessions.owner IS NULL"
    " OR sessions.owner = l.owner OR sessions.owner IS NOT DISTINCT FROM l.replacing)"
    " RETURNING sessions.id"
)
#: Sessions' transcripts' last seqs (none for a session with no entry yet).
_TRANSCRIPT_LASTS = (
    "SELECT session_id, MAX(seq) FROM transcript WHERE session_id = ANY(%b::text[])"
    " GROUP BY session_id"
)
#: Updates (session ids, bodies: two arrays) numbered after each session's last
#: seq, in their order, inserted; each session's last announced and returned.
_APPEND_ROWS = (
    "WITH new AS (SELECT * FROM unnest(%b::text[], %b::text[]) WITH ORDINALITY"
    " AS row(session_id, body, n)),"
    " last AS (SELECT one.session_id, (SELECT COALESCE(MAX(seq), 0) FROM updates"
    " WHERE updates.session_id = one.session_id) AS seq"
    " FROM (SELECT DISTINCT session_id FROM new) AS one),"
    " added AS (INSERT INTO updates (session_id, seq, body) SELECT new.session_id,"
    " last.seq + ROW_NUMBER() OVER (PARTITION BY new.session_id ORDER BY new.n), new.body"
    " FROM new JOIN last USING (session_id) RETURNING session_id, seq)"
    f" SELECT session_id, MAX(seq), pg_notify('{UPDATES_CHANNEL}', session_id || ' ' || MAX(seq))"
    " FROM added GROUP BY session_id"
)


class PostgresConnection:
    """One psycopg connection (autocommit; ``begin``/``commit``/``rollback`` make a
    transaction) that comes back after it is lost: a restarted or failed-over
    server, a terminated backend.

    One connection, reopened, not a pool (``psycopg_pool``): the store runs every
    call on one thread, and its transactions span several calls (``begin``, the
    appends, ``commit``), which a pool would have to pin to one connection anyway.
    Several connections, each with its own thread and the sessions spread over
    them by id, were measured slower (30 clients: 2 connections 172 prompts/s, 4
    139, against 209 with one): each thread's batches of appends were smaller, and
    the threads fought one interpreter lock.

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
        self._in_transaction = False  # a begin() of ours is open
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
        if self._in_transaction:
            if self._gone():
                self._lost_transaction = True
                raise _lost_in_transaction()
        elif self._gone() or self._hung_up() or self._quiet_and_dead():
            log.warning("the connection to %s was lost: reconnecting", redact_url(self.url))
            with contextlib.suppress(Exception):
                self.conn.close()
            self.conn = self._connect()
        self._last_used = time.monotonic()
        return self.conn

    def _gone(self) -> bool:
        return bool(self._lost_transaction or self.conn.closed or self.conn.broken)

    def _hung_up(self) -> bool:
        return hung_up(self.conn)

    def _quiet_and_dead(self) -> bool:
        """After ``CHECK_AFTER_S`` unused, an empty query (psycopg_pool's
        ``check_connection``) must answer: a route that died without a word."""
        if time.monotonic() - self._last_used <= CHECK_AFTER_S:
            return False
        try:
            self.conn.execute("")
        except _psycopg().OperationalError:
            return True
        return False

    def execute(self, sql: str, params: Sequence[Any] = (), /) -> Any:
        """Run one statement (``%s`` parameters); its cursor."""
        return self.ready().execute(sql, params)

    def executemany(self, sql: str, rows: list[tuple[Any, ...]], /) -> None:
        with self.ready().cursor() as cursor:
            cursor.executemany(sql, rows)

    @contextlib.contextmanager
    def pipeline(self) -> Iterator[Any]:
        """psycopg's connection, for statements sent without waiting for each other's
        answers (one implicit transaction, committed as the block is left: one round
        trip in all); read their cursors after the block.  (Run on the connection
        itself: ``ready``'s check would take the answers arriving for a hang-up.)"""
        conn = self.ready()
        with conn.pipeline():
            yield conn

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """``begin`` ... ``commit`` in psycopg's pipeline mode: the statements go out
        without waiting for each other's answers, and the commit's answer is the one
        waited for; a read in between (its ``fetch``) waits for what was sent before
        it.  The server runs them in order as ever: only the waiting goes.  Any
        error (raised at the read or at the end, for the first statement that
        failed) rolls the whole transaction back."""
        conn = self.ready()  # reconnected, if it must be, before anything is sent
        try:
            with conn.pipeline():
                self.begin()
                yield
                self.commit()
        except BaseException:
            self.rollback()
            raise

    def begin(self) -> None:
        self.ready().execute("BEGIN")
        self._in_transaction = True

    def commit(self) -> None:
        """Commit; a transaction whose connection went is lost, whole: that raises."""
        if self._gone():
            self._in_transaction = self._lost_transaction = False
            raise _lost_in_transaction()
        self.ready().execute("COMMIT")
        self._in_transaction = False

    def rollback(self) -> None:
        if self._gone():
            self._in_transaction = self._lost_transaction = False
            return  # the server dropped it with the connection
        self._in_transaction = False
        if self.conn.info.transaction_status != _psycopg().pq.TransactionStatus.IDLE:
            self.conn.execute("ROLLBACK")  # not ready(): this ends what it would keep

    @property
    def in_transaction(self) -> bool:
        return self._in_transaction

    def close(self) -> None:
        self.conn.close()


def _lost_in_transaction() -> Exception:
    lost: Exception = _psycopg().OperationalError(
        "the connection to PostgreSQL was lost in a transaction; none of it was kept"
    )
    return lost
