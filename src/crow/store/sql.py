"""The SQL both backends run, written once.

The two drivers mark a statement's parameters differently (sqlite3 ``?``, psycopg
``%s``), so each statement here is a template with ``{p}`` for a parameter, and
each backend takes ``Statements.marked(...)`` with its own mark once, as it loads.
The few statements that differ by more than that (beginning a write, locking a
session's row, announcing a change) belong to the backends.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

__all__ = [
    "CANCELS_CHANNEL",
    "HELD_CHANNEL",
    "QUESTIONS_CHANNEL",
    "SESSION_COLUMNS",
    "UPDATES_CHANNEL",
    "Statements",
]

#: The PostgreSQL channel every logged update is announced on ("<session id> <seq>").
UPDATES_CHANNEL = "crow_updates"
#: ... and a cancelled turn, for the server running it ("<session id>").
CANCELS_CHANNEL = "crow_cancels"
#: ... and a permission question filed, answered or closed ("<question id>").
QUESTIONS_CHANNEL = "crow_questions"
#: ... and a session whose held prompts changed ("<session id>").
HELD_CHANNEL = "crow_held"

SESSION_COLUMNS = (
    "id, cwd, additional_directories, title, created_at, updated_at, state, stop_reason, "
    "config, owner_pid, deleted, owner, lease_expires"
)


@dataclass(frozen=True)
class Statements:
    """The store's statements with one driver's parameter mark (see the module doc)."""

    mark: str = "{p}"
    # ---- sessions -----------------------------------------------------------------
    create_session: str = (
        "INSERT INTO sessions (id, cwd, additional_directories, created_at, updated_at, config)"
        f" VALUES ({{p}}, {{p}}, {{p}}, {{p}}, {{p}}, {{p}}) RETURNING {SESSION_COLUMNS}"
    )
    get_session: str = f"SELECT {SESSION_COLUMNS} FROM sessions WHERE id = {{p}}"
    delete_session: str = "UPDATE sessions SET deleted = 1 WHERE id = {p}"
    interrupted_sessions: str = (
        f"SELECT {SESSION_COLUMNS} FROM sessions"
        " WHERE (state != 'idle' OR owner IS NOT NULL) AND deleted = 0"
    )
    # ---- the turn lease -----------------------------------------------------------
    acquire_turn: str = (
        "UPDATE sessions SET owner = {p}, owner_pid = {p}, lease_expires = {p}"
        " WHERE id = {p} AND deleted = 0"
        " AND (owner IS NULL OR owner = {p} OR owner IS NOT DISTINCT FROM {p})"
    )
    #: ``acquire_turn``, returning the transcript's last seq (as one statement: where a
    #: write sees the latest data, as SQLite's under its write lock; see postgres.py).
    take_turn: str = (
        "UPDATE sessions SET owner = {p}, owner_pid = {p}, lease_expires = {p}"
        " WHERE id = {p} AND deleted = 0"
        " AND (owner IS NULL OR owner = {p} OR owner IS NOT DISTINCT FROM {p})"
        " RETURNING (SELECT COALESCE(MAX(seq), 0) FROM transcript"
        " WHERE transcript.session_id = sessions.id)"
    )
    release_turn: str = (
        "UPDATE sessions SET owner = NULL, owner_pid = NULL, lease_expires = NULL"
        " WHERE id = {p} AND owner = {p}"
    )
    renew_leases: str = "UPDATE sessions SET lease_expires = {p} WHERE owner = {p}"
    # ---- the update log -----------------------------------------------------------
    append: str = (
        "INSERT INTO updates (session_id, seq, body) VALUES ({p}, (SELECT COALESCE(MAX(seq), 0)"
        " + 1 FROM updates WHERE session_id = {p}), {p}) RETURNING seq"
    )
    append_at: str = "INSERT INTO updates (session_id, seq, body) VALUES ({p}, {p}, {p})"
    last_seq: str = "SELECT COALESCE(MAX(seq), 0) FROM updates WHERE session_id = {p}"
    updates: str = "SELECT seq, body FROM updates WHERE session_id = {p} AND seq > {p} ORDER BY seq"
    updates_page: str = (
        "SELECT seq, body FROM updates WHERE session_id = {p} AND seq > {p} ORDER BY seq LIMIT {p}"
    )
    set_idle: str = (
        "UPDATE sessions SET state = {p}, stop_reason = {p}, owner = NULL, owner_pid = NULL,"
        " lease_expires = NULL, updated_at = COALESCE({p}, updated_at) WHERE id = {p}"
    )
    set_state: str = (
        "UPDATE sessions SET state = {p}, stop_reason = {p}, updated_at = COALESCE({p},"
        " updated_at) WHERE id = {p}"
    )
    set_updated_at: str = "UPDATE sessions SET updated_at = {p} WHERE id = {p}"
    # ---- permission questions shared between servers ------------------------------
    file_question: str = "INSERT INTO questions (id, session_id, params) VALUES ({p}, {p}, {p})"
    answer_question: str = (
        "UPDATE questions SET outcome = {p} WHERE id = {p} AND outcome IS NULL AND closed = 0"
    )
    close_question: str = "UPDATE questions SET closed = 1 WHERE id = {p}"
    question: str = "SELECT session_id, params, outcome, closed FROM questions WHERE id = {p}"
    open_questions: str = (
        "SELECT id FROM questions WHERE session_id = {p} AND closed = 0 AND outcome IS NULL"
    )
    # ---- prompts held across servers ----------------------------------------------
    hold_prompt: str = (
        "INSERT INTO held_prompts (id, session_id, position, owner, sender, preview, expires)"
        " VALUES ({p}, {p}, (SELECT COALESCE(MAX(position), 0) + 1 FROM held_prompts"
        " WHERE session_id = {p}), {p}, {p}, {p}, {p}) RETURNING position"
    )
    drop_held: str = "DELETE FROM held_prompts WHERE id = {p}"
    held_prompts: str = (
        "SELECT id, owner, sender, preview FROM held_prompts"
        " WHERE session_id = {p} AND expires > {p} ORDER BY position, id"
    )
    renew_held: str = "UPDATE held_prompts SET expires = {p} WHERE owner = {p}"
    held_owners: str = "SELECT DISTINCT owner FROM held_prompts"
    # ---- the model transcript -----------------------------------------------------
    append_message: str = (
        "INSERT INTO transcript (session_id, seq, kind, body) VALUES ({p}, (SELECT COALESCE("
        "MAX(seq), 0) + 1 FROM transcript WHERE session_id = {p}), {p}, {p}) RETURNING seq"
    )
    transcript: str = (
        "SELECT seq, kind, body FROM transcript WHERE session_id = {p} AND seq >= COALESCE("
        "(SELECT MAX(seq) FROM transcript WHERE session_id = {p} AND kind = 'summary'), 0)"
        " ORDER BY seq"
    )
    transcript_after: str = (
        "SELECT seq, kind, body FROM transcript WHERE session_id = {p} AND seq > {p} ORDER BY seq"
    )
    transcript_rows: str = "SELECT kind, body FROM transcript WHERE session_id = {p} ORDER BY seq"
    transcript_last: str = "SELECT COALESCE(MAX(seq), 0) FROM transcript WHERE session_id = {p}"

    @classmethod
    def marked(cls, mark: str) -> Statements:
        """Every statement with ``mark`` for its parameters."""
        templates = {field.name: field.default for field in dataclasses.fields(cls)}
        return cls(**{name: str(sql).format(p=mark) for name, sql in templates.items()})

    def marks(self, count: int) -> str:
        """``count`` parameters, for an ``IN (...)`` list (NULL for none)."""
        return ", ".join([self.mark] * count) or "NULL"
