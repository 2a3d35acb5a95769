"""Numbered schema migrations for the session store, one set for both backends.

``MIGRATIONS[n]`` moves a database from version n to n+1: SQLite keeps the
version in ``PRAGMA user_version``, PostgreSQL in the one-row table
``crow_schema``.  The scripts are written in SQLite's SQL; ``postgres_script`` gives the
PostgreSQL form of the two things that differ (``REAL`` is 4 bytes there, so a
float column is ``DOUBLE PRECISION``; ``WITHOUT ROWID`` is SQLite's alone).
Never edit a migration that has shipped: add the next one.  ``tests/unit/store``
migrates an empty database of each kind and checks the final schema.
"""

from __future__ import annotations

import re
import sqlite3
from typing import Any

__all__ = ["MIGRATIONS", "migrate", "migrate_postgres", "postgres_script"]

#: Serialises migrators: several servers starting at once on one PostgreSQL.
_MIGRATION_LOCK = 0x63726F77  # "crow"

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
    # 2 -> 3: permission questions open to every server of a shared store.  The
    # server running a turn files its question here; a client of any server may
    # answer it, and the first answer wins (``outcome`` is set once).
    """
    CREATE TABLE questions (
        id TEXT PRIMARY KEY,
        session_id TEXT NOT NULL,
        params TEXT NOT NULL,                 -- session/request_permission params, JSON
        outcome TEXT,                         -- the first answer's outcome, JSON
        closed INTEGER NOT NULL DEFAULT 0     -- answered here, withdrawn, or the turn ended
    );
    CREATE INDEX questions_by_session ON questions (session_id, closed);
    """,
    # 3 -> 4: prompts held while their session is busy, on a shared store: one order
    # across servers.  The server holding a prompt's request (``owner``, a process
    # name as leases have it) renews ``expires`` while it lives; the row goes when
    # the prompt is inserted or withdrawn, or its owner is found dead.
    """
    CREATE TABLE held_prompts (
        id TEXT PRIMARY KEY,                  -- the message id it will have
        session_id TEXT NOT NULL,
        position INTEGER NOT NULL,            -- arrival order within the session
        owner TEXT NOT NULL,
        sender TEXT NOT NULL,
        preview TEXT NOT NULL,
        expires REAL NOT NULL
    );
    CREATE INDEX held_by_session ON held_prompts (session_id, position);
    """,
    # 4 -> 5: session/list with a cwd reads that cwd's sessions, newest first, not
    # every session until enough match (100,000 sessions, 10 in the cwd: 26 ms -> 1 ms).
    """
    CREATE INDEX sessions_by_cwd ON sessions (cwd, deleted, updated_at DESC, id DESC);
    """,
]


def postgres_script(number: int) -> str:
    """Migration ``number`` in PostgreSQL's SQL (see the module doc)."""
    text = re.sub(r"\)\s*WITHOUT ROWID", ")", MIGRATIONS[number])
    return re.sub(r"\bREAL\b", "DOUBLE PRECISION", text)


def _check_not_newer(version: int) -> None:
    if version > len(MIGRATIONS):
        raise RuntimeError(
            f"the session store is at schema version {version}, newer than this Crow "
            f"({len(MIGRATIONS)}): upgrade Crow"
        )


def migrate(db: sqlite3.Connection) -> int:
    """Apply every migration the database lacks; returns the final version."""
    return _migrate_from(db, _user_version(db))


def _migrate_from(db: sqlite3.Connection, version: int) -> int:
    """Apply the migrations from ``version`` on.  Two processes opening a new store at
    once (a conductor starting a recorder and crow serve) both read the old version:
    the second's migration then fails on what the first made, and the version it
    reads after that says the work is done."""
    _check_not_newer(version)
    while version < len(MIGRATIONS):
        try:
            db.executescript(
                f"BEGIN IMMEDIATE; {MIGRATIONS[version]}; "
                f"PRAGMA user_version = {version + 1}; COMMIT;"
            )
        except sqlite3.OperationalError:
            if db.in_transaction:
                db.execute("ROLLBACK")
            found = _user_version(db)
            if found <= version:
                raise  # not another process's migration: a real failure
            version = found
            continue
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        version += 1
    return len(MIGRATIONS)


def _user_version(db: sqlite3.Connection) -> int:
    return int(db.execute("PRAGMA user_version").fetchone()[0])


def migrate_postgres(conn: Any) -> int:
    """The same for a psycopg connection, in one transaction, one migrator at a time."""
    with conn.transaction():
        conn.execute(f"SELECT pg_advisory_xact_lock({_MIGRATION_LOCK})")
        conn.execute("CREATE TABLE IF NOT EXISTS crow_schema (version INTEGER NOT NULL)")
        row = conn.execute("SELECT version FROM crow_schema").fetchone()
        if row is None:
            conn.execute("INSERT INTO crow_schema (version) VALUES (0)")
        version = 0 if row is None else int(row[0])
        _check_not_newer(version)
        for number in range(version, len(MIGRATIONS)):
            conn.execute(postgres_script(number))
        conn.execute("UPDATE crow_schema SET version = %s", (len(MIGRATIONS),))
    return len(MIGRATIONS)
