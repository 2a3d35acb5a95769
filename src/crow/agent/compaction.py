"""Context compaction: older turns become a model-written summary.

The store keeps every message and update (replay shows the whole history);
only what is *sent to the model* shrinks: ``Store.transcript`` returns the
latest summary and the messages after it.  Compaction writes a summary entry,
then copies the recent messages after it, so they stay verbatim.
"""

from __future__ import annotations

import json
from typing import Any

from crow.models.events import TextDelta

from .host import TurnContext

__all__ = ["compact", "summary_text"]

#: Messages kept verbatim after the summary (the current exchange).
KEEP_RECENT = 2
SUMMARY_PREFIX = "Summary of the earlier conversation (older messages were compacted):\n\n"
INSTRUCTIONS = (
    "Summarise the conversation below for your own later use. Keep every fact, decision, "
    "file name, command, error and open question that later work may need; drop chatter. "
    "Write plain prose and lists, no preamble."
)


def summary_text(message: dict[str, Any]) -> str:
    return SUMMARY_PREFIX + str(message.get("content", ""))


async def compact(turn: TurnContext, *, reason: str, keep_last_user: bool = True) -> bool:
    """Summarise all but the most recent messages; False if there is nothing to do."""
    store, session = turn.store, turn.session
    entries = await session.transcript()
    keep = KEEP_RECENT if keep_last_user else 0
    older, recent = (entries[:-keep], entries[-keep:]) if keep else (entries, [])
    if len(older) < 2:
        return False
    spec = turn.host.router.spec(session.model)
    budget = spec.context_window * 3  # characters: about three quarters of the window
    rendered = _render(older)[-budget:]
    request = [{"role": "system", "content": INSTRUCTIONS}, {"role": "user", "content": rendered}]
    pieces = [
        e.text
        async for e in turn.host.router.stream(session.model, request)
        if isinstance(e, TextDelta)
    ]
    summary = {"role": "user", "content": "".join(pieces)}
    await store.append_message(session.id, summary, kind="summary")
    for entry in recent:
        await store.append_message(session.id, entry.message)
    await turn.note(f"Compacted {len(older)} earlier messages into a summary ({reason}).", "info")
    return True


def _render(entries: list[Any]) -> str:
    lines = []
    for entry in entries:
        message = entry.message
        if entry.kind == "summary":
            lines.append(summary_text(message))
            continue
        content = message.get("content")
        if isinstance(content, list):
            content = " ".join(p.get("text", f"[{p.get('type')}]") for p in content)
        elif not isinstance(content, str):
            content = json.dumps(content)
        lines.append(f"{message.get('role', '?')}: {content}")
    return "\n\n".join(lines)
