"""Closing turns that a dead process left open.

A ``crow serve`` killed mid-turn leaves its sessions ``running`` in the store.
The next process closes each such turn honestly: a visible note, the partial
reply kept in the model's transcript, and ``idle`` with stop reason ``error``.
The update log is appended to, never rewritten, so a later replay shows first
exactly what the client had seen, then the note and the idle.
"""

from __future__ import annotations

import logging
import os

import orjson
from pydantic import ValidationError

from crow.acp import Message, SessionProjection, schema
from crow.store.db import SessionRecord, Store

from .session import new_id, now

__all__ = ["close_interrupted_turns", "owner_alive"]

log = logging.getLogger("crow.agent")

INTERRUPTED = "This turn was interrupted: the agent process stopped before it finished."


def owner_alive(pid: int | None) -> bool:
    """Whether the process that ran a session's turn is still alive."""
    if pid is None or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def close_interrupted_turns(store: Store) -> list[str]:
    """Close every turn whose process died; returns their session ids."""
    closed = []
    for record in store.interrupted_sessions():
        if owner_alive(record.owner_pid):
            continue  # another live process is running it
        _close(store, record)
        closed.append(record.id)
        log.warning("closed the interrupted turn of session %s", record.id)
    return closed


def _close(store: Store, record: SessionRecord) -> None:
    partial = _partial_reply(store, record.id)
    transcript = store.transcript(record.id)
    if partial and transcript and transcript[-1].message.get("role") == "user":
        store.append_message(record.id, {"role": "assistant", "content": partial})
    note = {
        "sessionUpdate": "agent_message",
        "messageId": new_id("note"),
        "content": [{"type": "text", "text": INTERRUPTED}],
        "_meta": {"crow/notice": "error"},
    }
    idle = {
        "sessionUpdate": "state_update",
        "state": "idle",
        "stopReason": "error",
        "error": {"code": -32603, "message": INTERRUPTED},
    }
    store.append_update(record.id, orjson.dumps(note))
    store.append_update(record.id, orjson.dumps(idle), state="idle", stop_reason="error", now=now())
    store.update_session(record.id, owner_pid=None)


def _partial_reply(store: Store, session_id: str) -> str:
    """The agent text shown since the last user message (what the client saw)."""
    projection = SessionProjection(session_id)
    for _, body in store.updates(session_id):
        try:
            projection.apply(schema.adapter(schema.SessionUpdate).validate_json(body))
        except ValidationError:
            continue
    last_user = max(
        (i for i, e in enumerate(projection.entries) if getattr(e, "role", None) == "user"),
        default=-1,
    )
    return "".join(
        e.text
        for e in projection.entries[last_user + 1 :]
        if isinstance(e, Message) and e.role == "agent" and not (e.meta or {}).get("crow/notice")
    )
