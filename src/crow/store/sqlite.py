"""The session store: one SQLite file in WAL mode under the Crow home.

What it keeps, per session: the record (cwd, title, state, config, owner), the
append-only log of every ``session/update`` exactly as it was sent (``seq`` is
the replay cursor), and the model transcript (OpenAI chat messages, with
compaction summaries).  The agent writes an update here *before* sending it,
committed (updates that go out together share a transaction, with the
transcript message they show), so after a crash the log holds exactly what the
client could have seen, and the transcript what the model said.

Several ``crow serve`` processes may share one store (an editor per window):
SQLite's locking serialises their writes, and a session's turn lease
(``owner``, ``lease_expires``; see ``lease.py``) says which process runs its
turn.

``PostgresStore`` is the same store on a PostgreSQL server (``[store] url`` or
``CROW_STORE_URL``; psycopg 3), for servers on several machines: same tables,
same migrations (``migrations.py``), same behaviour, which the store tests check
on both.  A log append there locks its session's row, so two servers appending
to one session still get consecutive sequence numbers.  ``open_store`` picks the
backend from the location.

``Store`` is synchronous and blocking; the agent reaches it through
``AsyncStore`` (``aio.py``), which runs every call on one worker thread so a
lock held by another process never stalls the event loop.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..private import private_dir, private_file, tighten_file
from .migrations import migrate
from .records import (
    HeldRow,
    PendingMessage,
    PendingUpdate,
    SessionRecord,
    StoreError,
    TranscriptEntry,
    _decode_cursor,
    _encode_cursor,
    _loads,
    _record,
)

__all__ = ["Store"]

#: How long a call waits for another process's lock before failing: bounded, so
#: a stuck lock ends a turn with a visible error instead of hanging it
#: (``CROW_STORE_BUSY_TIMEOUT_MS`` tunes it, for slow disks and for tests).
BUSY_TIMEOUT_MS = int(os.environ.get("CROW_STORE_BUSY_TIMEOUT_MS", "5000"))
LIST_PAGE_SIZE = 50

#: How every logged state_update begins (the agent logs compact JSON with
#: ``sessionUpdate`` as the first key).
STATE_UPDATE_PREFIX = b'{"sessionUpdate":"state_update"'
_APPEND = (
    "INSERT INTO updates (session_id, seq, body) VALUES (?, (SELECT COALESCE(MAX(seq), 0) + 1"
    " FROM updates WHERE session_id = ?), ?) RETURNING seq"
)
_APPEND_AT = "INSERT INTO updates (session_id, seq, body) VALUES (?, ?, ?)"
_LAST_SEQ = "SELECT COALESCE(MAX(seq), 0) FROM updates WHERE session_id = ?"
_SESSION_COLUMNS = (
    "id, cwd, additional_directories, title, created_at, updated_at, state, stop_reason, "
    "config, owner_pid, deleted, owner, lease_expires"
)


class Store:
    """One connection to the store; used from the event loop's thread only."""

    #: Which SQL it speaks; "sqlite" stores also take appends on the loop (aio.py).
    dialect = "sqlite"
    #: A write transaction that takes the write lock at once (no upgrade deadlock).
    BEGIN = "BEGIN IMMEDIATE"

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        try:
            _private_database(self.path)
        except OSError as exc:
            raise StoreError(f"cannot open the session store {self.path}: {exc}") from exc
        try:
            self.db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            self.db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            self.db.execute("PRAGMA journal_mode = WAL")
            # NORMAL survives a killed process (the WAL is in the OS cache); only a
            # power cut can lose the last transactions.
            self.db.execute("PRAGMA synchronous = NORMAL")
            migrate(self.db)
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"cannot open the session store {self.path}: {exc}") from exc

    #: Whether other servers write to this store as they run (then they follow it).
    shared = False

    def close(self) -> None:
        self.db.close()

    def loop_twin(self) -> Store | None:
        """A second connection to this store that never waits, for calls on the event
        loop (crow.store.aio), or None where a call cannot be that quick."""
        try:
            fast = Store(self.path)
            fast.db.execute("PRAGMA busy_timeout = 0")
            fast.db.execute("PRAGMA wal_autocheckpoint = 0")
        except (StoreError, sqlite3.Error):
            return None  # every append goes through the thread
        return fast

    def is_busy(self, exc: BaseException) -> bool:
        """Whether ``exc`` says the database is locked (a call that wrote nothing)."""
        return isinstance(exc, sqlite3.OperationalError) and (
            "locked" in str(exc) or "busy" in str(exc)
        )

    def announce_cancel(self, session_id: str) -> None:
        """Ask whichever server runs the session's turn to cancel it: on a store no
        other server shares, this one does, and has been told."""

    async def follow_updates(self, *callbacks: Callable[..., None]) -> None:
        """Hear what other servers log (crow.store.listen): a store no other server
        shares has nothing to hear."""
        raise StoreError("only a shared (PostgreSQL) store has other servers to follow")

    def checkpoint(self) -> None:
        """Copy the WAL into the database file (without waiting for readers)."""
        self.db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()

    # ---- sessions ---------------------------------------------------------------
    def create_session(
        self,
        *,
        session_id: str,
        cwd: str,
        now: str,
        additional_directories: list[str] | None = None,
        config: dict[str, Any] | None = None,
    ) -> SessionRecord:
        self.db.execute(
            "INSERT INTO sessions (id, cwd, additional_directories, created_at, updated_at, config)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (
                session_id,
                cwd,
                json.dumps(additional_directories or []),
                now,
                now,
                json.dumps(config or {}),
            ),
        )
        record = self.get_session(session_id)
        assert record is not None
        return record

    def get_session(
        self, session_id: str, *, include_deleted: bool = False
    ) -> SessionRecord | None:
        row = self.db.execute(
            f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE id = ?", (session_id,)
        ).fetchone()
        if row is None or (row[10] and not include_deleted):
            return None
        return _record(row)

    def update_session(self, session_id: str, **fields: Any) -> None:
        """Set columns: title, updated_at, state, stop_reason, config, owner_pid,
        additional_directories."""
        allowed = {
            "title",
            "updated_at",
            "state",
            "stop_reason",
            "config",
            "owner_pid",
            "additional_directories",
        }
        if not fields or not set(fields) <= allowed:
            raise ValueError(f"cannot update {sorted(set(fields) - allowed)}")
        values = [
            json.dumps(v) if k in ("config", "additional_directories") else v
            for k, v in fields.items()
        ]
        assignments = ", ".join(f"{k} = ?" for k in fields)
        self.db.execute(f"UPDATE sessions SET {assignments} WHERE id = ?", (*values, session_id))

    def delete_session(self, session_id: str) -> None:
        """Soft delete: gone from lists and resumes; the rows stay until purged."""
        self.db.execute("UPDATE sessions SET deleted = 1 WHERE id = ?", (session_id,))

    def list_sessions(
        self, *, cwd: str | None = None, cursor: str | None = None, limit: int = LIST_PAGE_SIZE
    ) -> tuple[list[SessionRecord], str | None]:
        """Newest first; ``cursor`` is a ``next_cursor`` from an earlier page.

        Raises StoreError for a cursor this store did not make.
        """
        where, args = ["deleted = 0"], []
        if cwd is not None:
            where.append("cwd = ?")
            args.append(cwd)
        if cursor is not None:
            updated_at, session_id = _decode_cursor(cursor)
            where.append("(updated_at < ? OR (updated_at = ? AND id < ?))")
            args += [updated_at, updated_at, session_id]
        rows = self.db.execute(
            f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE {' AND '.join(where)}"
            " ORDER BY updated_at DESC, id DESC LIMIT ?",
            (*args, limit + 1),
        ).fetchall()
        records = [_record(r) for r in rows[:limit]]
        more = len(rows) > limit
        return records, _encode_cursor(records[-1]) if more and records else None

    def interrupted_sessions(self) -> list[SessionRecord]:
        """Sessions with a turn under way: not idle, or still leased."""
        rows = self.db.execute(
            f"SELECT {_SESSION_COLUMNS} FROM sessions"
            " WHERE (state != 'idle' OR owner IS NOT NULL) AND deleted = 0"
        ).fetchall()
        return [_record(r) for r in rows]

    # ---- the turn lease (lease.py) ----------------------------------------------
    def acquire_turn(
        self, session_id: str, *, owner: str, pid: int, expires: float, replacing: str | None = None
    ) -> bool:
        """Take the session's lease for ``owner``: True if it is now ours.

        Succeeds when nobody holds it, we do, or ``replacing`` (an owner the
        caller found dead and recovered from) does.
        """
        cursor = self.db.execute(
            "UPDATE sessions SET owner = ?, owner_pid = ?, lease_expires = ?"
            " WHERE id = ? AND deleted = 0"
            " AND (owner IS NULL OR owner = ? OR owner IS NOT DISTINCT FROM ?)",
            (owner, pid, expires, session_id, owner, replacing),
        )
        return cursor.rowcount == 1

    def release_turn(self, session_id: str, *, owner: str) -> None:
        """Give the lease back (a turn that ends without an idle of its own)."""
        self.db.execute(
            "UPDATE sessions SET owner = NULL, owner_pid = NULL, lease_expires = NULL"
            " WHERE id = ? AND owner = ?",
            (session_id, owner),
        )

    def renew_leases(self, owner: str, expires: float) -> int:
        """Extend every lease ``owner`` holds; returns how many."""
        cursor = self.db.execute(
            "UPDATE sessions SET lease_expires = ? WHERE owner = ?", (expires, owner)
        )
        return cursor.rowcount

    # ---- the update log ---------------------------------------------------------
    def append_update(
        self,
        session_id: str,
        body: bytes,
        *,
        state: str | None = None,
        stop_reason: str | None = None,
        now: str | None = None,
    ) -> int:
        """Log one update (committed before returning); returns its seq.

        ``state`` (with ``stop_reason``) records a state_update on the session
        in the same transaction; ``idle`` also releases the turn lease.
        """
        if state is None and now is None:  # one statement: its own transaction
            rows = self.db.execute(_APPEND, (session_id, session_id, body.decode())).fetchall()
            return int(rows[0][0])  # fetchall: the statement has completed
        return self.append_updates([(session_id, body, state, stop_reason, now)])[0]

    def append_updates(
        self, batch: list[PendingUpdate], transcript: list[PendingMessage] | None = None
    ) -> list[int]:
        """Log several updates, and add ``transcript``'s entries, in one transaction
        (one commit, all or none); returns the updates' seqs.  An update and the
        model's message it shows are then never saved one without the other."""
        self.db.execute(self.BEGIN)
        try:
            for session_id, message, kind in transcript or ():
                self._append_message(session_id, message, kind)
            seqs = self._append_rows(batch)
            self.db.execute("COMMIT")
        except BaseException:
            if self.db.in_transaction:
                self.db.execute("ROLLBACK")
            raise
        return seqs

    def _append_rows(self, batch: list[PendingUpdate]) -> list[int]:
        """Insert ``batch`` (in a transaction) with one prepared statement: each
        session's last seq is read once, not by a subquery per row (the
        transaction holds the write lock: nobody appends meanwhile)."""
        last: dict[str, int] = {}
        rows, seqs = [], []
        for session_id, body, *_ in batch:
            if session_id not in last:
                self._lock_session(session_id)
                last[session_id] = self.last_seq(session_id)
            seq = last[session_id] = last[session_id] + 1
            rows.append((session_id, seq, body.decode()))
            seqs.append(seq)
        self.db.executemany(_APPEND_AT, rows)
        for (session_id, _, state, stop_reason, now), seq in zip(batch, seqs, strict=True):
            self._record_state(session_id, state, stop_reason, now)
            self._announce_update(session_id, seq)
        return seqs

    def _lock_session(self, session_id: str) -> None:
        """Keep other appenders to the session out until this transaction ends, so
        that its last seq stays the last.  SQLite's write lock already does."""

    def _announce_update(self, session_id: str, seq: int) -> None:
        """Tell the other servers of a logged update (PostgreSQL's)."""

    def _record_state(
        self, session_id: str, state: str | None, stop_reason: str | None, now: str | None
    ) -> None:
        """What a logged update sets on its session, in one statement."""
        if state == "idle":
            self.db.execute(
                "UPDATE sessions SET state = ?, stop_reason = ?, owner = NULL, owner_pid = NULL,"
                " lease_expires = NULL, updated_at = COALESCE(?, updated_at) WHERE id = ?",
                (state, stop_reason, now, session_id),
            )
        elif state is not None:
            self.db.execute(
                "UPDATE sessions SET state = ?, stop_reason = ?, updated_at = COALESCE(?,"
                " updated_at) WHERE id = ?",
                (state, stop_reason, now, session_id),
            )
        elif now is not None:
            self.db.execute("UPDATE sessions SET updated_at = ? WHERE id = ?", (now, session_id))

    def updates(self, session_id: str, *, after: int = 0) -> Iterator[tuple[int, bytes]]:
        """The logged updates with seq > ``after``, in order."""
        cursor = self.db.execute(
            "SELECT seq, body FROM updates WHERE session_id = ? AND seq > ? ORDER BY seq",
            (session_id, after),
        )
        for seq, body in cursor:
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

    def last_seq(self, session_id: str) -> int:
        return int(self.db.execute(_LAST_SEQ, (session_id,)).fetchone()[0])

    # ---- permission questions shared between servers ------------------------------
    def file_question(self, question_id: str, session_id: str, params: str) -> None:
        self.db.execute(
            "INSERT INTO questions (id, session_id, params) VALUES (?, ?, ?)",
            (question_id, session_id, params),
        )

    def answer_question(self, question_id: str, outcome: str) -> bool:
        """Record ``outcome`` if the question is still open; True if this answer won."""
        cursor = self.db.execute(
            "UPDATE questions SET outcome = ? WHERE id = ? AND outcome IS NULL AND closed = 0",
            (outcome, question_id),
        )
        return cursor.rowcount == 1

    def close_question(self, question_id: str) -> None:
        self.db.execute("UPDATE questions SET closed = 1 WHERE id = ?", (question_id,))

    def question(self, question_id: str) -> tuple[str, str, str | None, bool] | None:
        """(session id, params, outcome, closed), or None."""
        row = self.db.execute(
            "SELECT session_id, params, outcome, closed FROM questions WHERE id = ?",
            (question_id,),
        ).fetchone()
        return None if row is None else (row[0], row[1], row[2], bool(row[3]))

    def open_questions(self, session_id: str) -> list[str]:
        rows = self.db.execute(
            "SELECT id FROM questions WHERE session_id = ? AND closed = 0 AND outcome IS NULL",
            (session_id,),
        ).fetchall()
        return [r[0] for r in rows]

    # ---- prompts held across servers (crow.agent.queue) ---------------------------
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
        self.db.execute(self.BEGIN)
        try:
            self._lock_session(session_id)
            rows = self.db.execute(
                "INSERT INTO held_prompts (id, session_id, position, owner, sender, preview,"
                " expires) VALUES (?, ?, (SELECT COALESCE(MAX(position), 0) + 1 FROM"
                " held_prompts WHERE session_id = ?), ?, ?, ?, ?) RETURNING position",
                (held_id, session_id, session_id, owner, sender, preview, expires),
            ).fetchall()
            self._announce_held(session_id)
            self.db.execute("COMMIT")
        except BaseException:
            if self.db.in_transaction:
                self.db.execute("ROLLBACK")
            raise
        return int(rows[0][0])

    def drop_held(self, held_id: str, session_id: str) -> None:
        self.db.execute("DELETE FROM held_prompts WHERE id = ?", (held_id,))
        self._announce_held(session_id)

    def held_prompts(self, session_id: str, now: float) -> list[HeldRow]:
        """The session's held prompts in order, but those whose owner stopped renewing."""
        rows = self.db.execute(
            "SELECT id, owner, sender, preview FROM held_prompts"
            " WHERE session_id = ? AND expires > ? ORDER BY position, id",
            (session_id, now),
        ).fetchall()
        return [HeldRow(*row) for row in rows]

    def renew_held(self, owner: str, expires: float) -> int:
        cursor = self.db.execute(
            "UPDATE held_prompts SET expires = ? WHERE owner = ?", (expires, owner)
        )
        return cursor.rowcount

    def drop_held_of(self, owners: list[str], now: float) -> list[str]:
        """Drop the rows of dead ``owners`` and the expired ones; the sessions touched."""
        marks = ", ".join("?" for _ in owners) or "NULL"
        rows = self.db.execute(
            f"DELETE FROM held_prompts WHERE owner IN ({marks}) OR expires <= ?"
            " RETURNING session_id",
            (*owners, now),
        ).fetchall()
        sessions = sorted({row[0] for row in rows})
        for session_id in sessions:
            self._announce_held(session_id)
        return sessions

    def held_owners(self) -> list[str]:
        return [row[0] for row in self.db.execute("SELECT DISTINCT owner FROM held_prompts")]

    def _announce_held(self, session_id: str) -> None:
        """Tell the other servers the session's held prompts changed (PostgreSQL's)."""

    # ---- the model transcript ---------------------------------------------------
    def append_message(
        self, session_id: str, message: dict[str, Any], *, kind: str = "message"
    ) -> int:
        return self._append_message(session_id, message, kind)  # one statement

    def _append_message(self, session_id: str, message: dict[str, Any], kind: str) -> int:
        self._lock_session(session_id)
        rows = self.db.execute(
            "INSERT INTO transcript (session_id, seq, kind, body) VALUES (?, (SELECT COALESCE("
            "MAX(seq), 0) + 1 FROM transcript WHERE session_id = ?), ?, ?) RETURNING seq",
            (session_id, session_id, kind, json.dumps(message)),
        ).fetchall()
        return int(rows[0][0])

    def transcript(self, session_id: str) -> list[TranscriptEntry]:
        """What the model sees: the latest summary (if any) and every message after it."""
        rows = self.db.execute(
            "SELECT seq, kind, body FROM transcript WHERE session_id = ? AND seq >= COALESCE("
            "(SELECT MAX(seq) FROM transcript WHERE session_id = ? AND kind = 'summary'), 0)"
            " ORDER BY seq",
            (session_id, session_id),
        ).fetchall()
        return [TranscriptEntry(seq=r[0], kind=r[1], message=_loads(r[2])) for r in rows]

    def transcript_after(self, session_id: str, after: int) -> list[TranscriptEntry]:
        """The transcript's entries after seq ``after``, summaries included."""
        rows = self.db.execute(
            "SELECT seq, kind, body FROM transcript WHERE session_id = ? AND seq > ? ORDER BY seq",
            (session_id, after),
        ).fetchall()
        return [TranscriptEntry(seq=r[0], kind=r[1], message=_loads(r[2])) for r in rows]


def _private_database(path: Path) -> None:
    """Create the database file 0600 (in a 0700 folder) before SQLite opens it,
    and tighten the files an older Crow left wider.  SQLite gives ``-wal`` and
    ``-shm`` the database file's mode, so they are 0600 too, whatever the umask."""
    private_file(private_dir(path.parent) / path.name)
    for suffix in ("-wal", "-shm", "-journal"):
        tighten_file(path.with_name(path.name + suffix))
