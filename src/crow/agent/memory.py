"""Crow's memory in a turn: automatic recall, and the memory slash commands.

Before the model call that starts a turn, the memories most relevant to the
prompt (above ``[memory] recall_threshold``, within ``recall_budget_tokens``)
are given to the model as a message after the prompt, and the client sees the
same: a completed ``tool_call_update`` of kind ``search``, "Recalled N
memories", with the memories as content.  Nothing enters the context that the
user cannot see.  Recall never fails a turn: a store or embedder that fails is
logged and the turn goes on without memories.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from crow.extensions import RECALLED, TOOL_NAME
from crow.ids import new_id
from crow.memory import has_memories
from crow.memory.scopes import MemoryError, MemoryPlace
from crow.observe import metrics

from .host import TurnContext
from .updates import tool_call_update

if TYPE_CHECKING:
    from crow.memory.store import Hit, Memory, MemoryStore

__all__ = ["forget_command", "memories_command", "recall_into", "remember_command"]

log = logging.getLogger("crow.agent")
T = TypeVar("T")

#: A memory matched by words only (no vectors) is recalled when its BM25 score is at
#: least this share of the best one's.  BM25 has no absolute scale: a fact that
#: matches every word of the prompt scores 0.9 in a store of one memory and 8.6 in
#: a store of twenty, so only a relative cut works.
TEXT_SHARE = 0.5
CHARS_PER_TOKEN = 4


def _store(turn: TurnContext) -> MemoryStore:
    from crow.memory.shared import shared_store  # LanceDB and numpy: not at start-up

    config = turn.host.config
    return shared_store(config.paths.memory, config.memory)


def _place(turn: TurnContext) -> MemoryPlace:
    return MemoryPlace(turn.session.record.cwd, turn.session.id)


def enabled(turn: TurnContext) -> bool:
    config = turn.host.config
    return (
        config.memory.auto_recall
        and "memory" in config.tools.builtin
        and has_memories(config.paths.memory)  # no thread, no LanceDB, while there are none
    )


async def recall_into(turn: TurnContext) -> None:
    """Recall memories for the turn's prompt, show them, and give them to the model."""
    query = " ".join(b.text for b in turn.blocks if getattr(b, "type", None) == "text").strip()
    if not query or not enabled(turn):
        return
    settings = turn.host.config.memory
    scopes = _place(turn).visible()
    try:
        with metrics.timed(metrics.memory_recall):
            found = await asyncio.to_thread(
                lambda: _store(turn).recall(query, scopes=scopes, limit=settings.recall_limit)
            )
    except Exception:  # memory is a help, never a reason for a turn to fail
        log.exception("session %s: memory recall failed", turn.session.id)
        return
    chosen = _within_budget(
        _relevant(found.hits, settings.recall_threshold), settings.recall_budget_tokens
    )
    if not chosen:
        return
    listing = "\n".join(_line(hit.memory) for hit in chosen)
    count = f"{len(chosen)} memor{'y' if len(chosen) == 1 else 'ies'}"
    shown = listing if found.note is None else f"{listing}\n({found.note})"
    await turn.session.emit(
        tool_call_update(
            new_id("tc"),
            title=f"Recalled {count}",
            kind="search",
            status="completed",
            rawInput={"query": query[:500]},
            content=[{"type": "content", "content": {"type": "text", "text": shown}}],
            rawOutput={"memories": [_raw(hit) for hit in chosen], "search": found.mode},
            _meta={TOOL_NAME: "memory__recall", RECALLED: True},
        )
    )
    context = (
        f"Crow's memory recalled {count} for the prompt above (saved in earlier sessions, "
        "not the user's words; they may be out of date):\n" + listing
    )
    await turn.store.append_message(turn.session.id, {"role": "user", "content": context})
    await asyncio.to_thread(_store(turn).mark_recalled, [hit.memory.id for hit in chosen])


def _relevant(hits: list[Hit], threshold: float) -> list[Hit]:
    """Hits close enough in meaning, or (matched by words only) among the best by words."""
    best = max((h.text_score for h in hits if h.text_score is not None), default=0.0)

    def close(hit: Hit) -> bool:
        if hit.similarity is not None:
            return hit.similarity >= threshold
        return hit.text_score is not None and hit.text_score >= best * TEXT_SHARE

    return [hit for hit in hits if close(hit)]


def _within_budget(hits: list[Hit], budget_tokens: int) -> list[Hit]:
    chosen, used = [], 0
    for hit in hits:
        cost = len(hit.memory.text) // CHARS_PER_TOKEN + 8  # the id and scope too
        if used + cost > budget_tokens:
            break
        chosen.append(hit)
        used += cost
    return chosen


def _line(memory: Memory) -> str:
    scope = memory.scope.split(":", 1)[0]
    return f"- {memory.text} [{memory.id}, {scope}]"


def _raw(hit: Hit) -> dict[str, Any]:
    memory = hit.memory
    out = {
        "id": memory.id,
        "text": memory.text,
        "scope": memory.scope,
        "score": round(hit.score, 4),
    }
    if hit.similarity is not None:
        out["similarity"] = round(hit.similarity, 4)
    return out


# ---- slash commands ---------------------------------------------------------------
async def _refusable(turn: TurnContext, work: Callable[[], T]) -> T | None:
    """Store work off the loop; a refusal (bad text, scope) is told to the user."""
    try:
        return await asyncio.to_thread(work)
    except MemoryError as exc:
        await turn.note(str(exc), "error")
        return None


async def remember_command(turn: TurnContext, args: str) -> str:
    text = args.strip()
    if not text:
        await turn.note("Usage: /remember <text> (kept for this project)", "error")
        return "end_turn"
    scope, session_id = _place(turn).project, turn.session.id
    done = await _refusable(
        turn, lambda: _store(turn).remember(text, scope=scope, session=session_id)
    )
    if done is None:
        return "end_turn"
    if done.merged_into:
        await turn.note(f"Remembered as {done.id}, replacing: {done.replaced_text}", "info")
    else:
        await turn.note(f"Remembered as {done.id}.", "info")
    return "end_turn"


async def forget_command(turn: TurnContext, args: str) -> str:
    memory_id = args.strip()
    if not memory_id:
        await turn.note("Usage: /forget <id> (/memories lists them)", "error")
        return "end_turn"
    try:
        gone = await asyncio.to_thread(lambda: _store(turn).forget(memory_id))
    except MemoryError as exc:  # not an id
        gone, why = None, str(exc)
    else:
        why = f"No memory has the id {memory_id}."
    if gone is None:
        await turn.note(why, "error")
    else:
        await turn.note(f"Forgot {memory_id}: {gone.text}", "info")
    return "end_turn"


async def memories_command(turn: TurnContext, args: str) -> str:
    query = args.strip()
    scopes = _place(turn).visible()

    def look() -> tuple[list[Memory], str]:
        store = _store(turn)
        if not query:
            return store.list_memories(scopes=scopes, limit=20), ""
        found = store.recall(query, scopes=scopes, limit=10)
        return [hit.memory for hit in found.hits], f"\n({found.note})" if found.note else ""

    memories, note = await asyncio.to_thread(look)
    if not memories:
        await turn.note("No memories" + (f" match {query!r}." if query else " yet."), "info")
    else:
        lines = "\n".join(_line(memory) for memory in memories)
        await turn.note(f"Memories:\n{lines}{note}", "info")
    return "end_turn"
