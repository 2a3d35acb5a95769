"""The session updates the agent builds in more than one place, as wire dicts.

Each returns the dict itself, not a schema model: a session encodes an update once
(orjson) for its log and every watcher, so what these dicts hold, in this key order,
is what goes out.  Updates built in one place only stay where they are built.
"""

from __future__ import annotations

from typing import Any

from crow.acp.errors import INTERNAL_ERROR
from crow.extensions import CLIENT, FROM, NOTICE, TURN_ENDED
from crow.ids import new_id, now

__all__ = [
    "agent_message",
    "agent_thought",
    "idle_update",
    "note_update",
    "state_update",
    "text_content",
    "title_update",
    "tool_call_update",
    "user_message",
]

Update = dict[str, Any]


def text_content(text: str) -> list[dict[str, Any]]:
    """A message's content of one text block."""
    return [{"type": "text", "text": text}]


def user_message(
    message_id: str, content: list[Any], origin: str | None = None, client: str | None = None
) -> Update:
    """A prompt as the session shows it; ``origin`` (``_meta[FROM]``) when a program sent
    it, ``client`` (``_meta[CLIENT]``) the name its client gave itself."""
    update: Update = {"sessionUpdate": "user_message", "messageId": message_id, "content": content}
    meta = {key: value for key, value in ((FROM, origin), (CLIENT, client)) if value is not None}
    if meta:
        update["_meta"] = meta
    return update


def agent_message(message_id: str, text: str, meta: dict[str, Any] | None = None) -> Update:
    """A whole message of the agent (a reply, a verdict, a note), with ``_meta`` if given."""
    update: Update = {
        "sessionUpdate": "agent_message",
        "messageId": message_id,
        "content": text_content(text),
    }
    if meta is not None:
        update["_meta"] = meta
    return update


def agent_thought(message_id: str, text: str) -> Update:
    """The model's whole reasoning for one reply."""
    return {
        "sessionUpdate": "agent_thought",
        "messageId": message_id,
        "content": text_content(text),
    }


def note_update(text: str, severity: str) -> Update:
    """A message for the user from Crow itself (not the model's words), as an update."""
    return agent_message(new_id("note"), text, {NOTICE: severity})


def state_update(state: str) -> Update:
    """The session's foreground state: "running", "requires_action" or "idle"."""
    return {"sessionUpdate": "state_update", "state": state}


def idle_update(stop: str, error: str | None = None) -> Update:
    """A turn's end: how it stopped, and the error (-32603's message) that stopped it."""
    update = state_update("idle")
    update["stopReason"] = stop
    if error is not None:
        update["error"] = {"code": INTERNAL_ERROR, "message": error}
    return update


def turn_ended(idle: Update) -> Update:
    """``_crow/turnEnded`` for a turn that ``idle`` (``idle_update``) ends other than
    with ``end_turn``: a replay drops state updates, and shows how it ended by this."""
    ended: Update = {k: idle[k] for k in ("stopReason", "error") if k in idle}
    return {"sessionUpdate": TURN_ENDED, **ended}


def tool_call_update(call_id: str, **fields: Any) -> Update:
    """A change to a tool call; ``fields`` are its wire fields (``status``, ``_meta`` ...)."""
    return {"sessionUpdate": "tool_call_update", "toolCallId": call_id, **fields}


def title_update(title: str) -> Update:
    """The session's new title, stamped now."""
    return {"sessionUpdate": "session_info_update", "title": title, "updatedAt": now()}
