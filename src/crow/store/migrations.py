"""Numbered schema migrations for the session store.

``MIGRATIONS[n]`` moves a database from ``user_version`` n to n+1.  Never edit a
migration that has shipped: add the next one.  ``tests/unit/store`` migrates an
empty database and checks the final schema.
"""

from __future__ import annotations

import sqlite3

__all__ = ["MIGRATIONS", "migrate"]

MIGRATIONS: list[str] = [
    # 0 -> 1: sessions, the append-only update log, the model transcript.
    """
    CREATE TABLE sessions (
        id TEXT PRIMARY KEY,
        cwd TEXT NOT NULL,
        additional_directories TEXT NOT NULL DEFAULT '[]',
        title TEXT,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        state TEXT NOT NULL DEFAULT 'idle',   -- the last state_update sent
        stop_reason TEXT,
        config TEXT NOT NULL DEFAULT '{}',    -- session config options, JSON
        owner_pid INTEGER,                    -- the process running its turn
        deleted INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX sessions_by_update ON sessions (deleted, updated_at DESC, id DESC);
    CREATE TABLE updates (
        session_id TEXT NOT NULL,
        seq INTEGER NOT NULL,                 -- the replay cursor, from 1
        body TEXT NOT NULL,                   -- the update exactly as sent
        PRIMARY KEY (session_id, seq)
    ) WITHOUT ROWID;
    CREATE TABLE transcript (
        session_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        kind TEXT NOT NULL,                   -- 'message' or 'summary'
        body TEXT NOT NULL,                   -- an OpenAI chat message, JSON
        PRIMARY KEY (session_id, seq)
    ) WITHOUT ROWID;
    """,
    # 1 -> 2: the turn lease.  ``owner`` names the process running the session's
    # turn (host:pid:start time, so a reused pid is not taken for the owner);
    # ``lease_expires`` (unix seconds) is renewed while it runs.  A session with
    # an owner is busy for every other process until the owner ends the turn,
    # dies, or lets the lease expire.
    """
    ALTER TABLE sessions ADD COLUMN owner TEXT;
    ALTER TABLE sessions ADD COLUMN lease_expires REAL;
    """,
]


def migrate(db: sqlite3.Connection) -> int:
    """Apply every migration the database lacks; returns the final version."""
    version = int(db.execute("PRAGMA user_version").fetchone()[0])
    if version > len(MIGRATIONS):
        raise RuntimeError(
            f"the session store is at schema version {version}, newer than this Crow "
            f"({len(MIGRATIONS)}): upgrade Crow"
        )
    for number in range(version, len(MIGRATIONS)):
        try:
            db.executescript(
                f"BEGIN; {MIGRATIONS[number]}; PRAGMA user_version = {number + 1}; COMMIT;"
            )
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
    return len(MIGRATIONS)
