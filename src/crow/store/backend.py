"""The session store's operations, over the SQL both backends share (sql.py).

What it keeps, per session: the record (cwd, title, state, config, owner), the
append-only log of every ``session/update`` exactly as it was sent (``seq`` is
the replay cursor), and the model transcript (OpenAI chat messages, with
compaction summaries).  The agent writes an update here *before* sending it,
committed (updates that go out together share a transaction, with the
transcript message they show), so after a crash the log holds exactly what the
client could have seen, and the transcript what the model said.

Several ``crow serve`` processes may share one store: a session's turn lease
(``owner``, ``lease_expires``; see ``lease.py``) says which process runs its turn.

``Store`` is that store over one connection, whatever holds it; a backend
(``SqliteStore``, ``PostgresStore``) opens the connection, begins and ends its
transactions, and says where it differs (locking a session's row, telling other
servers of a change).  It is synchronous and blocking; the agent reaches it
through ``AsyncStore`` (``aio.py``), which runs every call on one worker thread
so a lock held by another process never stalls the event loop.
"""

from __future__ import annotations

import contextlib
import json
import os
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar, Protocol, Unpack

from .listen import Heard
from .records import (
    HeldRow,
    PendingMessage,
    PendingUpdate,
    SessionRecord,
    StateChange,
    StoreError,
    TranscriptEntry,
    database_errors,
    decode_cursor,
    encode_cursor,
    entries,
    pending,
    record,
)
from .sql import (
    CANCELS_CHANNEL,
    HELD_CHANNEL,
    QUESTIONS_CHANNEL,
    SESSION_COLUMNS,
    UPDATES_CHANNEL,
    Statements,
)
from .tails import TranscriptTails

__all__ = [
    "BUSY_TIMEOUT_MS",
    "LIST_PAGE_SIZE",
    "STATE_UPDATE_PREFIX",
    "Connection",
    "Store",
    "state_statement",
]

#: How long a call waits for another process's lock before failing (SQLite's busy
#: timeout, PostgreSQL's lock_timeout): bounded, so a stuck lock ends a turn with a
#: visible error instead of hanging it
#: (``CROW_STORE_BUSY_TIMEOUT_MS`` tunes it, for slow disks and for tests).
BUSY_TIMEOUT_MS = int(os.environ.get("CROW_STORE_BUSY_TIMEOUT_MS", "5000"))
LIST_PAGE_SIZE = 50
#: How every logged state_update begins (the agent logs compact JSON with
#: ``sessionUpdate`` as the first key).
STATE_UPDATE_PREFIX = b'{"sessionUpdate":"state_update"'
#: The session columns ``update_session`` may set.
UPDATABLE = frozenset(
    {"title", "updated_at", "state", "stop_reason", "config", "owner_pid", "additional_directories"}
)


class Connection(Protocol):
    """What ``Store`` calls on its connection: a DB-API connection's ``execute``,
    whose cursor it reads (``fetchone``, ``fetchall``, ``rowcount``, iteration)."""

    def execute(self, sql: str, params: Sequence[Any] = ..., /) -> Any: ...

    def executemany(self, sql: str, rows: list[tuple[Any, ...]], /) -> Any: ...

    def close(self) -> None: ...


class Store(ABC):
    """One connection to the store; used from one thread at a time."""

    #: Which SQL it speaks ("sqlite", "postgresql").
    dialect: ClassVar[str]
    #: Whether other servers write to this store as they run (then they follow it).
    shared: ClassVar[bool] = False
    #: The shared statements with this backend's parameter mark.
    sql: ClassVar[Statements]
    db: Connection
    #: What this process knows of the transcripts it writes (tails.py): a loop twin
    #: shares its store's.
    tails: TranscriptTails

    # ---- what a backend does its own way ------------------------------------------
    @abstractmethod
    def _begin(self) -> None:
        """Begin a write transaction."""

    @abstractmethod
    def _commit(self) -> None: ...

    @abstractmethod
    def _rollback(self) -> None:
        """End the transaction begun, if it is still open, keeping none of it."""

    @abstractmethod
    def schema_version(self) -> int:
        """The schema version the database is at (``migrations.py``)."""

    def close(self) -> None:
        self.db.close()

    @abstractmethod
    def checkpoint(self) -> None:
        """Fold a write-ahead log into the database, where the backend keeps one."""

    def loop_twin(self) -> Store | None:
        """A second connection to this store that never waits, for calls on the event
        loop (crow.store.aio), or None where a call cannot be that quick."""
        return None

    def is_busy(self, exc: BaseException) -> bool:
        """Whether ``exc`` says the database is locked (a call that wrote nothing)."""
        return False

    def announce_cancel(self, session_id: str) -> None:
        """Ask whichever server runs the session's turn to cancel it."""
        self._announce(CANCELS_CHANNEL, session_id)

    async def follow_updates(self, heard: Heard) -> None:
        """Hear what other servers log (crow.store.listen): a store no other server
        shares has nothing to hear."""
        raise StoreError("only a shared (PostgreSQL) store has other servers to follow")

    @abstractmethod
    def _lock_session(self, session_id: str) -> None:
        """Keep other appenders to the session out until this transaction ends, so
        that its last seq stays the last."""

    @abstractmethod
    def _announce(self, channel: str, payload: str) -> None:
        """Tell the other servers of a change, on ``channel`` (sql.py), when the
        transaction making it commits."""

    def _append_alone(self, session_id: str, body: bytes) -> int:
        """Log one update that changes nothing on its session."""
        return self.append_updates([(session_id, body, None, None, None)])[0]

    def _one_append(self) -> contextlib.AbstractContextManager[None]:
        """Where one transcript append runs: a transaction, to lock its session."""
        return self._transaction()

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        """A write transaction: committed, or rolled back on any error."""
        self._begin()
        try:
            yield
            self._commit()
        except BaseException:
            self._rollback()
            raise

    # ---- sessions -----------------------------------------------------------------
    def create_session(
        self,
        *,
        session_id: str,
        cwd: str,
        now: str,
        additional_directories: list[str] | None = None,
        config: dict[str, Any] | None = None,
        updates: Sequence[bytes] = (),
    ) -> SessionRecord:
        """Add the session; ``updates`` begin its log (seqs 1, 2, ...) in the same
        transaction: once it is answered, a new session and what it first said are
        both stored."""
        fields: dict[str, Any] = {"session_id": session_id, "cwd": cwd, "now": now}
        fields.update(additional_directories=additional_directories, config=config)
        return self.create_sessions([{**fields, "updates": updates}])[0]

    def create_sessions(self, sessions: Sequence[dict[str, Any]]) -> list[SessionRecord]:
        """``create_session`` for each of ``sessions`` (its keyword arguments), in one
        transaction: the sessions several clients open at once cost one commit."""
        with self._transaction():
            return [self._insert_session(**fields) for fields in sessions]

    def _insert_session(
        self,
        *,
        session_id: str,
        cwd: str,
        now: str,
        additional_directories: list[str] | None = None,
        config: dict[str, Any] | None = None,
        updates: Sequence[bytes] = (),
    ) -> SessionRecord:
        directories, options = json.dumps(additional_directories or []), json.dumps(config or {})
        values = (session_id, cwd, directories, now, now, options)
        created = record(self.db.execute(self.sql.create_session, values).fetchone())
        if updates:  # nobody else sees the session yet: its log is empty, and stays ours
            rows = [(session_id, seq, body.decode()) for seq, body in enumerate(updates, 1)]
            self.db.executemany(self.sql.append_at, rows)
            self._announce(UPDATES_CHANNEL, f"{session_id} {len(rows)}")
        return created

    def get_session(
        self, session_id: str, *, include_deleted: bool = False
    ) -> SessionRecord | None:
        row = self.db.execute(self.sql.get_session, (session_id,)).fetchone()
        if row is None or (row[10] and not include_deleted):
            return None
        return record(row)

    def update_session(self, session_id: str, **fields: Any) -> None:
        """Set columns: title, updated_at, state, stop_reason, config, owner_pid,
        additional_directories."""
        if not fields or not set(fields) <= UPDATABLE:
            raise ValueError(f"cannot update {sorted(set(fields) - UPDATABLE)}")
        values = [
            json.dumps(v) if k in ("config", "additional_directories") else v
            for k, v in fields.items()
        ]
        assignments = ", ".join(f"{k} = {self.sql.mark}" for k in fields)
        self.db.execute(
            f"UPDATE sessions SET {assignments} WHERE id = {self.sql.mark}", (*values, session_id)
        )

    def delete_session(self, session_id: str) -> None:
        """Soft delete: gone from lists and resumes; the rows stay until purged."""
        self.db.execute(self.sql.delete_session, (session_id,))

    def list_sessions(
        self, *, cwd: str | None = None, cursor: str | None = None, limit: int = LIST_PAGE_SIZE
    ) -> tuple[list[SessionRecord], str | None]:
        """Newest first; ``cursor`` is a ``next_cursor`` from an earlier page.

        Raises StoreError for a cursor this store did not make.
        """
        p = self.sql.mark
        where, args = ["deleted = 0"], []
        if cwd is not None:
            where.append(f"cwd = {p}")
            args.append(cwd)
        if cursor is not None:
            updated_at, session_id = decode_cursor(cursor)
            where.append(f"(updated_at < {p} OR (updated_at = {p} AND id < {p}))")
            args += [updated_at, updated_at, session_id]
        rows = self.db.execute(
            f"SELECT {SESSION_COLUMNS} FROM sessions"
            f" WHERE {' AND '.join(where)} ORDER BY updated_at DESC, id DESC LIMIT {p}",
            (*args, limit + 1),
        ).fetchall()
        records = [record(r) for r in rows[:limit]]
        more = len(rows) > limit
        return records, encode_cursor(records[-1]) if more and records else None

    def interrupted_sessions(self) -> list[SessionRecord]:
        """Sessions with a turn under way: not idle, or still leased."""
        return [record(r) for r in self.db.execute(self.sql.interrupted_sessions).fetchall()]

    # ---- the turn lease (lease.py) --------------------------------------------------
    def acquire_turn(
        self, session_id: str, *, owner: str, pid: int, expires: float, replacing: str | None = None
    ) -> bool:
        """Take the session's lease for ``owner``: True if it is now ours.

        Succeeds when nobody holds it, we do, or ``replacing`` (an owner the
        caller found dead and recovered from) does.
        """
        taken = self.take_turn(
            session_id, owner=owner, pid=pid, expires=expires, replacing=replacing
        )
        return taken is not None

    def take_turn(
        self, session_id: str, *, owner: str, pid: int, expires: float, replacing: str | None = None
    ) -> int | None:
        """``acquire_turn``, and the transcript's last seq once the lease is ours
        (None: not taken), which ``tails`` checks what it knows against."""
        params = (owner, pid, expires, session_id, owner, replacing)
        last = self._take_turn(session_id, params)
        if last is None:
            self.tails.unleased(session_id)
        else:
            self.tails.leased(session_id, last)
        return last

    def append_and_take(
        self,
        batch: list[PendingUpdate],
        transcript: list[PendingMessage] | None,
        leases: list[tuple[str, dict[str, Any]]],
    ) -> tuple[list[int] | BaseException, list[bool | BaseException]]:
        """``append_updates`` (unless ``batch`` is empty), then ``acquire_turn`` for
        each of ``leases`` (session id, its keyword arguments): the calls the store's
        thread found queued together (crow.store.aio).  Each part's outcome, or the
        database error it met: one's failure is not another's."""
        appended: list[int] | BaseException = []
        if batch:
            try:
                appended = self.append_updates(batch, transcript)
            except database_errors() as exc:
                appended = exc
        taken: list[bool | BaseException] = []
        for session_id, fields in leases:
            try:
                taken.append(self.acquire_turn(session_id, **fields))
            except database_errors() as exc:
                taken.append(exc)
        return appended, taken

    def _take_turn(self, session_id: str, params: tuple[Any, ...]) -> int | None:
        """The lease, and the last seq in the same statement (read to its end: a
        statement not read to its end stops SQLite's commit)."""
        rows = self.db.execute(self.sql.take_turn, params).fetchall()
        return int(rows[0][0]) if rows else None

    def release_turn(self, session_id: str, *, owner: str) -> None:
        """Give the lease back (a turn that ends without an idle of its own)."""
        self.db.execute(self.sql.release_turn, (session_id, owner))
        self.tails.unleased(session_id)

    def renew_leases(self, owner: str, expires: float) -> int:
        """Extend every lease ``owner`` holds; returns how many."""
        return int(self.db.execute(self.sql.renew_leases, (expires, owner)).rowcount)

    # ---- the update log -------------------------------------------------------------
    def append_update(self, session_id: str, body: bytes, **change: Unpack[StateChange]) -> int:
        """Log one update (committed before returning); returns its seq.

        ``change`` (``StateChange``) is set on the session in the same transaction.
        """
        if change.get("state") is None and change.get("now") is None:
            return self._append_alone(session_id, body)
        return self.append_updates([pending(session_id, body, change)])[0]

    def append_updates(
        self, batch: list[PendingUpdate], transcript: list[PendingMessage] | None = None
    ) -> list[int]:
        """Log several updates, and add ``transcript``'s entries, in one transaction
        (one commit, all or none); returns the updates' seqs.  An update and the
        model's message it shows are then never saved one without the other."""
        bodies = [json.dumps(message) for _, message, _ in transcript or ()]
        with self._noting(batch, transcript), self._transaction():
            added = [
                self._append_message(session_id, body, kind)
                for (session_id, _, kind), body in zip(transcript or (), bodies, strict=True)
            ]
            seqs = self._append_rows(batch)
        self._noted(batch, transcript or [], added, bodies)
        return seqs

    @contextlib.contextmanager
    def _noting(
        self, batch: list[PendingUpdate], transcript: list[PendingMessage] | None
    ) -> Iterator[None]:
        """An append whose failure ``tails`` must hear of (what it kept is unknown)."""
        try:
            yield
        except BaseException:
            self.tails.forget({s for s, *_ in batch} | {s for s, _, _ in transcript or ()})
            raise

    def _noted(
        self,
        batch: list[PendingUpdate],
        transcript: list[PendingMessage],
        added: list[int],
        bodies: list[str],
    ) -> None:
        """Tell ``tails`` what a committed append added, and which leases it gave back
        (an idle releases the session's)."""
        if transcript:
            entries = zip(transcript, added, bodies, strict=True)
            self.tails.wrote((s, seq, kind, body) for (s, _, kind), seq, body in entries)
        for session_id, _, state, _, _ in batch:
            if state == "idle":
                self.tails.unleased(session_id)

    def _append_rows(self, batch: list[PendingUpdate]) -> list[int]:
        """Insert ``batch`` (in a transaction) with one prepared statement: each
        session's last seq is read once, not by a subquery per row (the
        transaction holds the lock: nobody appends to it meanwhile).  Each session's
        change is announced once, at its last seq: a server that hears it reads the
        log from what it delivered, every update between included."""
        last: dict[str, int] = {}
        rows, seqs = [], []
        for session_id, body, *_ in batch:
            if session_id not in last:
                self._lock_session(session_id)
                last[session_id] = self.last_seq(session_id)
            seq = last[session_id] = last[session_id] + 1
            rows.append((session_id, seq, body.decode()))
            seqs.append(seq)
        self.db.executemany(self.sql.append_at, rows)
        self._record_states(batch)
        for session_id, seq in last.items():
            self._announce(UPDATES_CHANNEL, f"{session_id} {seq}")
        return seqs

    def _record_states(self, batch: list[PendingUpdate]) -> None:
        for session_id, _, state, stop_reason, now in batch:
            self._record_state(session_id, state, stop_reason, now)

    def _record_state(
        self, session_id: str, state: str | None, stop_reason: str | None, now: str | None
    ) -> None:
        """What a logged update sets on its session, in one statement."""
        statement = state_statement(self.sql, session_id, state, stop_reason, now)
        if statement is not None:
            self.db.execute(*statement)

    def updates(self, session_id: str, *, after: int = 0) -> Iterator[tuple[int, bytes]]:
        """The logged updates with seq > ``after``, in order."""
        for seq, body in self.db.execute(self.sql.updates, (session_id, after)):
            yield seq, body.encode()

    def updates_list(self, session_id: str, *, after: int = 0) -> list[tuple[int, bytes]]:
        return list(self.updates(session_id, after=after))

    def replay(self, session_id: str, *, after: int = 0) -> list[tuple[int, bytes]]:
        """What a resume replays: the updates after ``after`` less the state
        changes (a replay shows content; the current state follows it once)."""
        return [
            (seq, body)
            for seq, body in self.updates(session_id, after=after)
            if not body.startswith(STATE_UPDATE_PREFIX)
        ]

    def replay_page(
        self, session_id: str, *, after: int, limit: int
    ) -> tuple[list[tuple[int, bytes]], int]:
        """``replay`` a page at a time: of the next ``limit`` logged updates, those a
        replay shows, and the last seq read (``after`` if none): where the next starts."""
        rows = self.db.execute(self.sql.updates_page, (session_id, after, limit)).fetchall()
        last = rows[-1][0] if rows else after
        shown = [(seq, body.encode()) for seq, body in rows]
        return [(q, b) for q, b in shown if not b.startswith(STATE_UPDATE_PREFIX)], last

    def last_seq(self, session_id: str) -> int:
        return int(self.db.execute(self.sql.last_seq, (session_id,)).fetchone()[0])

    # ---- permission questions shared between servers --------------------------------
    def file_question(self, question_id: str, session_id: str, params: str) -> None:
        self.db.execute(self.sql.file_question, (question_id, session_id, params))
        self._announce(QUESTIONS_CHANNEL, question_id)

    def answer_question(self, question_id: str, outcome: str) -> bool:
        """Record ``outcome`` if the question is still open; True if this answer won."""
        won = self.db.execute(self.sql.answer_question, (outcome, question_id)).rowcount == 1
        if won:
            self._announce(QUESTIONS_CHANNEL, question_id)
        return bool(won)

    def close_question(self, question_id: str) -> None:
        self.db.execute(self.sql.close_question, (question_id,))
        self._announce(QUESTIONS_CHANNEL, question_id)

    def question(self, question_id: str) -> tuple[str, str, str | None, bool] | None:
        """(session id, params, outcome, closed), or None."""
        row = self.db.execute(self.sql.question, (question_id,)).fetchone()
        return None if row is None else (row[0], row[1], row[2], bool(row[3]))

    def open_questions(self, session_id: str) -> list[str]:
        return [r[0] for r in self.db.execute(self.sql.open_questions, (session_id,)).fetchall()]

    # ---- prompts held across servers (crow.agent.queue) -----------------------------
    def hold_prompt(
        self,
        held_id: str,
        session_id: str,
        *,
        owner: str,
        sender: str,
        preview: str,
        expires: float,
    ) -> int:
        """File a held prompt last in its session's order; returns its position."""
        params = (held_id, session_id, session_id, owner, sender, preview, expires)
        with self._transaction():
            self._lock_session(session_id)
            rows = self.db.execute(self.sql.hold_prompt, params).fetchall()
            self._announce(HELD_CHANNEL, session_id)
        return int(rows[0][0])

    def drop_held(self, held_id: str, session_id: str) -> None:
        self.db.execute(self.sql.drop_held, (held_id,))
        self._announce(HELD_CHANNEL, session_id)

    def held_prompts(self, session_id: str, now: float) -> list[HeldRow]:
        """The session's held prompts in order, but those whose owner stopped renewing."""
        rows = self.db.execute(self.sql.held_prompts, (session_id, now)).fetchall()
        return [HeldRow(*row) for row in rows]

    def renew_held(self, owner: str, expires: float) -> int:
        return int(self.db.execute(self.sql.renew_held, (expires, owner)).rowcount)

    def drop_held_of(self, owners: list[str], now: float) -> list[str]:
        """Drop the rows of dead ``owners`` and the expired ones; the sessions touched."""
        rows = self.db.execute(
            f"DELETE FROM held_prompts WHERE owner IN ({self.sql.marks(len(owners))})"
            f" OR expires <= {self.sql.mark} RETURNING session_id",
            (*owners, now),
        ).fetchall()
        sessions = sorted({row[0] for row in rows})
        for session_id in sessions:
            self._announce(HELD_CHANNEL, session_id)
        return sessions

    def held_owners(self) -> list[str]:
        return [row[0] for row in self.db.execute(self.sql.held_owners)]

    # ---- the model transcript -------------------------------------------------------
    def append_message(
        self, session_id: str, message: dict[str, Any], *, kind: str = "message"
    ) -> int:
        body = json.dumps(message)
        with self._noting([], [(session_id, message, kind)]), self._one_append():
            seq = self._append_message(session_id, body, kind)
        self.tails.wrote([(session_id, seq, kind, body)])
        return seq

    def _append_message(self, session_id: str, body: str, kind: str) -> int:
        """Add a transcript entry (JSON ``body``; in a transaction); its seq."""
        self._lock_session(session_id)
        params = (session_id, session_id, kind, body)
        return int(self.db.execute(self.sql.append_message, params).fetchall()[0][0])

    def transcript(self, session_id: str) -> list[TranscriptEntry]:
        """What the model sees: the latest summary (if any) and every message after it."""
        return entries(self.db.execute(self.sql.transcript, (session_id, session_id)).fetchall())

    def transcript_after(self, session_id: str, after: int) -> list[TranscriptEntry]:
        """The transcript's entries after seq ``after``, summaries included: from
        ``tails`` when this process knows them all (no read), else read."""
        known = self.tails.after(session_id, after)
        if known is not None:
            return known
        return entries(self.db.execute(self.sql.transcript_after, (session_id, after)).fetchall())

    def transcript_rows(self, session_id: str) -> list[tuple[str, str]]:
        """Every transcript entry as stored, (kind, JSON body), in order: to copy them."""
        rows = self.db.execute(self.sql.transcript_rows, (session_id,)).fetchall()
        return [(kind, body) for kind, body in rows]


def state_statement(
    sql: Statements, session_id: str, state: str | None, stop_reason: str | None, now: str | None
) -> tuple[str, tuple[Any, ...]] | None:
    """The statement (and its parameters) that sets what a logged update changes on
    its session, or None when it changes nothing."""
    if state is not None:
        statement = sql.set_idle if state == "idle" else sql.set_state
        return statement, (state, stop_reason, now, session_id)
    if now is not None:
        return sql.set_updated_at, (now, session_id)
    return None
