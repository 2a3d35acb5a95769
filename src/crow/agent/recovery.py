"""Closing turns that a dead process left open.

A ``crow serve`` killed mid-turn leaves its sessions ``running`` (or
``requires_action``) in the store, still leased to it.  Whoever finds such a
session — the next process at start-up, or a live one when a client resumes or
prompts it — closes the turn honestly, so the session can be continued:

- in the model's transcript: the partial reply is kept, and every tool call
  the model made gets a result saying it was interrupted (OpenAI-compatible
  servers reject a history whose assistant ``tool_calls`` lack results);
- on the wire: every tool call still pending or in progress is marked
  ``failed`` with a note, then a visible notice, then ``idle`` with stop
  reason ``error`` (which also releases the lease).

The update log is appended to, never rewritten, so a later replay shows first
exactly what the client had seen, then the closing.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Any

import orjson
from pydantic import ValidationError

from crow.acp import Message, SessionProjection, ToolCall, schema
from crow.extensions import NOTICE
from crow.ids import now
from crow.store.db import SessionRecord, Store
from crow.store.lease import expiry, owner_alive, this_process

from .updates import idle_update, note_update, tool_call_update, turn_ended

__all__ = ["INTERRUPTED", "Closing", "close_interrupted_turns", "closing_for", "is_orphaned"]

log = logging.getLogger("crow.agent")

INTERRUPTED = "This turn was interrupted: the agent process stopped before it finished."
TOOL_INTERRUPTED = "Interrupted: the agent process stopped before this tool call finished."
TOOL_RESULT_INTERRUPTED = (
    "The tool call was interrupted (the agent stopped) and may or may not have taken effect. "
    "Check before repeating it."
)
_FINISHED_TOOL_STATES = ("completed", "failed", "cancelled")


@dataclass
class Closing:
    """What closes one interrupted turn: transcript messages, then updates."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    updates: list[dict[str, Any]] = field(default_factory=list)


def is_orphaned(record: SessionRecord) -> bool:
    """A turn is under way in the store but its owner is gone."""
    under_way = record.state != "idle" or record.owner is not None
    return under_way and not owner_alive(record.owner, record.lease_expires)


def close_interrupted_turns(store: Store) -> list[str]:
    """Close every turn whose process died; returns their session ids.

    Several servers may find the same orphan at once (a shared store): each first
    takes the dead owner's lease, and only the one that gets it closes the turn."""
    closed = []
    closer = this_process()
    for record in store.interrupted_sessions():
        if not is_orphaned(record):
            continue  # another live process is running it
        claimed = store.acquire_turn(
            record.id, owner=closer, pid=os.getpid(), expires=expiry(), replacing=record.owner
        )
        if not claimed:
            continue  # another server is closing it
        closing = closing_for(store, record.id)
        for message in closing.messages:
            store.append_message(record.id, message)
        for update in closing.updates:
            idle = update.get("state") == "idle"
            store.append_update(
                record.id,
                orjson.dumps(update),
                state="idle" if idle else None,
                stop_reason="error" if idle else None,
                now=now() if idle else None,
            )
        closed.append(record.id)
        log.warning("closed the interrupted turn of session %s", record.id)
    return closed


def closing_for(store: Store, session_id: str) -> Closing:
    """The messages and updates that close the session's interrupted turn."""
    projection = _project(store, session_id)
    transcript = [e.message for e in store.transcript(session_id)]
    closing = Closing()
    partial = _partial_reply(projection)
    if partial and transcript and transcript[-1].get("role") in ("user", "tool"):
        closing.messages.append({"role": "assistant", "content": partial})
    closing.messages += _missing_tool_results(transcript)
    for call in projection.tool_calls.values():
        if call.status not in _FINISHED_TOOL_STATES:
            closing.updates += _failed(call.tool_call_id)
    closing.updates.append(note_update(INTERRUPTED, "error"))
    idle = idle_update("error", INTERRUPTED)
    closing.updates += [turn_ended(idle), idle]  # (a replay shows how the turn ended)
    return closing


def _project(store: Store, session_id: str) -> SessionProjection:
    projection = SessionProjection(session_id)
    for _, body in store.updates(session_id):
        try:
            projection.apply(schema.adapter(schema.SessionUpdate).validate_json(body))
        except ValidationError:
            continue
    return projection


def _partial_reply(projection: SessionProjection) -> str:
    """The agent text shown since the last user message or tool call (what the
    client saw of the model call that was under way)."""
    boundary = max(
        (
            i
            for i, e in enumerate(projection.entries)
            if getattr(e, "role", None) == "user" or isinstance(e, ToolCall)
        ),
        default=-1,
    )
    return "".join(
        e.text
        for e in projection.entries[boundary + 1 :]
        if isinstance(e, Message) and e.role == "agent" and not (e.meta or {}).get(NOTICE)
    )


def _missing_tool_results(transcript: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A tool result for every call of the last assistant message that has none."""
    last = max((i for i, m in enumerate(transcript) if m.get("role") == "assistant"), default=None)
    if last is None:
        return []
    answered = {m.get("tool_call_id") for m in transcript[last + 1 :] if m.get("role") == "tool"}
    return [
        {"role": "tool", "tool_call_id": call["id"], "content": TOOL_RESULT_INTERRUPTED}
        for call in transcript[last].get("tool_calls") or []
        if call.get("id") not in answered
    ]


def _failed(tool_call_id: str) -> list[dict[str, Any]]:
    return [
        {
            "sessionUpdate": "tool_call_content_chunk",
            "toolCallId": tool_call_id,
            "content": {"type": "content", "content": {"type": "text", "text": TOOL_INTERRUPTED}},
        },
        tool_call_update(
            tool_call_id, status="failed", rawOutput={"text": TOOL_INTERRUPTED, "isError": True}
        ),
    ]
