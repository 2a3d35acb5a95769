"""Turning a session's updates into lines for people, from the shared projection.

``TextRenderer`` prints the agent's reply to stdout as it grows: after each
update it reads the message from the session projection and writes only what
was not written yet, so a snapshot that repeats the chunks adds nothing.
``activity`` turns tool calls, thoughts and Crow's own notes into short lines
for stderr.  Nothing here accumulates chunks itself: that is the projection's job.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TextIO

from crow.acp import SessionProjection, schema
from crow.extensions import FROM, JUDGING, RECALLED, WAIT_OVER

from .verifying import Verdicts, unknown_line

__all__ = [
    "FINISHED",
    "JUDGE_AT_WORK",
    "WAITING",
    "TextRenderer",
    "activity",
    "status",
    "tool_line",
]

WAITING = "waiting for the model"
JUDGE_AT_WORK = "the judge is checking the turn"


STATUS_MARKS = {
    "pending": "·",
    "in_progress": "→",
    "completed": "✓",
    "failed": "✗",
    "cancelled": "⊘",
}


class TextRenderer:
    """Writes agent text to ``out`` as it arrives, each message once (not Crow's
    notes or proven verdicts: ``activity`` shows those)."""

    def __init__(self, projection: SessionProjection, out: TextIO, verdicts: Verdicts) -> None:
        self.projection = projection
        self.out = out
        self.verdicts = verdicts
        self.written: dict[str, int] = {}  # message id -> characters written
        self.last_id: str | None = None
        self.ends_with_newline = True

    def update(self, update: Any) -> None:
        kind = getattr(update, "session_update", None)
        if kind not in ("agent_message_chunk", "agent_message"):
            return
        message = self.projection.messages.get(update.message_id)
        if message is None or self.verdicts.is_note(message):
            return
        text = message.text
        done = self.written.get(message.message_id, 0)
        if len(text) <= done:
            return
        if self.last_id not in (None, message.message_id) and not self.ends_with_newline:
            self.out.write("\n")
        piece = text[done:]
        self.out.write(piece)
        self.out.flush()
        self.written[message.message_id] = len(text)
        self.last_id = message.message_id
        self.ends_with_newline = piece.endswith("\n")

    def finish(self) -> None:
        if not self.ends_with_newline:
            self.out.write("\n")
            self.out.flush()
            self.ends_with_newline = True


#: Tool-call statuses after which the call is over.
FINISHED = ("completed", "failed", "cancelled")


def tool_line(projection: SessionProjection, update: Any) -> tuple[str, bool] | None:
    """A tool call's line after ``update`` (``✓ title``), and whether the call is over;
    None when ``update`` did not change its status.  A terminal shows the line of a
    call in flight in place; a pipe gets one line per status."""
    if getattr(update, "session_update", None) != "tool_call_update":
        return None
    if update.status in (schema.UNSET, None) or _judging(projection, update):
        return None  # (a judge at work: the status says so while it lasts, its verdict after)
    call = projection.tool_calls.get(update.tool_call_id)
    title = (call.title if call else None) or update.tool_call_id
    line = f"{STATUS_MARKS.get(update.status, '?')} {title}"
    if update.status == "failed":
        reason = _raw_text(update.raw_output)
        line += f": {reason}" if reason else " (failed)"
    elif _recalled(update):  # what memory gave the model, the user sees too
        line += "".join(f"\n  {text}" for text in _content_text(update.content))
    return line, update.status in FINISHED


def activity(projection: SessionProjection, update: Any, verdicts: Verdicts) -> str | None:
    """A short line about tools, thoughts, notes and verdicts, or None."""
    kind = getattr(update, "session_update", None)
    if kind == "tool_call_update":
        shown = tool_line(projection, update)
        return shown[0] if shown else None
    if kind == "agent_thought":
        message = projection.messages.get(update.message_id)
        if message and message.text.strip():
            return f"… {_one_line(message.text)}"
    if kind == "agent_message":
        message = projection.messages.get(update.message_id)
        verdict = verdicts.of(message)
        if verdict is not None:
            assert message is not None
            if verdict.get("verdict") == "unknown":  # not a pass: say why, and what to do
                return f"{message.text}\n  {unknown_line(verdict)}"
            return message.text  # "✓ verified: ..." / "✗ judge: ..."
        if message and verdicts.is_note(message):
            return f"crow: {message.text}"
    if kind == "user_message" and isinstance(update.meta, dict) and update.meta.get(FROM):
        return f"→ {update.meta[FROM]} asked the agent to go on"
    return None


def _judging(projection: SessionProjection, update: Any) -> bool:
    """The tool call a judge shows while it judges a turn (``_meta["crow/judging"]``)."""
    call = projection.tool_calls.get(update.tool_call_id)
    return JUDGING in ((call.meta if call else None) or {})


def _recalled(update: Any) -> bool:
    meta = update.meta if isinstance(update.meta, dict) else {}
    return bool(meta.get(RECALLED)) and update.content not in (schema.UNSET, None)


def _content_text(content: Any) -> list[str]:
    out: list[str] = []
    for item in content:
        block = getattr(item, "content", None)
        text = getattr(block, "text", None)
        if isinstance(text, str):
            out.extend(line for line in text.splitlines() if line.strip())
    return out


def status(projection: SessionProjection, update: Any) -> str | None:
    """What a quiet turn waits for after ``update``, for a status line; None if
    ``update`` changes nothing of it.  A ``notice`` (live only: tool servers
    starting, a retry, a model loading) says it in its title, and ``WAIT_OVER``
    in its ``_meta`` when that wait is over; a load or a retry has no such notice,
    and the model's first words end it."""
    kind = getattr(update, "session_update", None)
    if kind == "notice":
        meta = update.meta if isinstance(update.meta, dict) else {}
        return WAITING if meta.get(WAIT_OVER) else str(update.title)
    if kind in ("agent_message_chunk", "agent_thought_chunk"):
        return WAITING  # the model answers: between its words, the turn waits for it
    if kind == "tool_call_update" and _judging(projection, update):
        return JUDGE_AT_WORK if update.status == "in_progress" else None
    if kind == "tool_call_update" and update.status not in (schema.UNSET, None):
        if update.status != "in_progress":
            return WAITING
        call = projection.tool_calls.get(update.tool_call_id)
        return f"running {(call.title if call else None) or update.tool_call_id}"
    return None


def _raw_text(raw: Any) -> str:
    if isinstance(raw, dict) and isinstance(raw.get("text"), str):
        return _one_line(raw["text"])
    return ""


def _one_line(text: str, limit: int = 120) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


Printer = Callable[[str], None]
