"""The session store in one SQLite file in WAL mode under the Crow home.

Several ``crow serve`` processes may share the file (an editor per window):
SQLite's locking serialises their writes (a write transaction takes the write
lock at once, so the last seq it reads stays the last), and a call waits for
another process's lock at most ``BUSY_TIMEOUT_MS``.  The SQL is ``Store``'s
(backend.py); this module opens the file, begins and ends transactions, and
gives ``AsyncStore`` a second connection that never waits, for calls on the loop.
"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path
from typing import ClassVar

from ..private import private_dir, private_file, tighten_file
from .backend import BUSY_TIMEOUT_MS, Store
from .migrations import migrate
from .records import StoreError
from .sql import Statements
from .tails import TranscriptTails

__all__ = ["SqliteStore"]


class SqliteStore(Store):
    """The store in the SQLite file at ``path`` (made 0600 in a 0700 folder)."""

    dialect = "sqlite"
    sql: ClassVar[Statements] = Statements.marked("?")
    db: sqlite3.Connection

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.tails = TranscriptTails()
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

    def _begin(self) -> None:
        # IMMEDIATE takes the write lock at once: no deadlock upgrading a read lock.
        self.db.execute("BEGIN IMMEDIATE")

    def _commit(self) -> None:
        self.db.execute("COMMIT")

    def _rollback(self) -> None:
        if self.db.in_transaction:
            self.db.execute("ROLLBACK")

    def schema_version(self) -> int:
        return int(self.db.execute("PRAGMA user_version").fetchone()[0])

    def checkpoint(self) -> None:
        """Copy the WAL into the database file (without waiting for readers)."""
        self.db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()

    def loop_twin(self) -> SqliteStore | None:
        """A second connection that never waits (``busy_timeout = 0``) and never
        checkpoints (the thread does): a WAL append takes tens of microseconds."""
        try:
            fast = SqliteStore(self.path)
            fast.db.execute("PRAGMA busy_timeout = 0")
            fast.db.execute("PRAGMA wal_autocheckpoint = 0")
        except (StoreError, sqlite3.Error):
            return None  # every append goes through the thread
        fast.tails = self.tails  # what either connection writes, both know
        return fast

    def is_busy(self, exc: BaseException) -> bool:
        return isinstance(exc, sqlite3.OperationalError) and (
            "locked" in str(exc) or "busy" in str(exc)
        )

    def _lock_session(self, session_id: str) -> None:
        """Nothing: a write transaction holds the whole file's write lock."""

    def _announce(self, channel: str, payload: str) -> None:
        """Nothing: the servers sharing a SQLite file run on this host and read it."""

    def _append_alone(self, session_id: str, body: bytes) -> int:
        # One statement: its own transaction, under the write lock.
        rows = self.db.execute(self.sql.append, (session_id, session_id, body.decode())).fetchall()
        return int(rows[0][0])  # fetchall: the statement has completed

    def _one_append(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()  # one statement, under the write lock


def _private_database(path: Path) -> None:
    """Create the database file 0600 (in a 0700 folder) before SQLite opens it,
    and tighten the files an older Crow left wider.  SQLite gives ``-wal`` and
    ``-shm`` the database file's mode, so they are 0600 too, whatever the umask."""
    private_file(private_dir(path.parent) / path.name)
    for suffix in ("-wal", "-shm", "-journal"):
        tighten_file(path.with_name(path.name + suffix))
