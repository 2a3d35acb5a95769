"""One model reply as it streams: what it said, thought and called, and what the
user is told meanwhile (a fallback, a substitute model, a retry, a model loading,
parts of the prompt a model cannot read)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from crow.models.events import (
    Event,
    FallingBack,
    Loading,
    ReasoningDelta,
    Retrying,
    Stripped,
    Substituted,
    TextDelta,
    ToolCallDelta,
    Usage,
)

from .session import LiveSession

__all__ = ["Reply", "accumulate", "add_delta", "seconds", "tell"]


@dataclass
class Reply:
    """What one model call produced."""

    message_id: str
    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    tool_calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    finish_reason: str | None = None
    model: str | None = None
    usage: Usage | None = None


def add_delta(event: TextDelta | ReasoningDelta, reply: Reply, thought_id: str) -> dict[str, Any]:
    """Add a delta to the reply (or its reasoning); returns the update it goes out as."""
    if isinstance(event, TextDelta):
        reply.text.append(event.text)
        kind, message_id = "agent_message_chunk", reply.message_id
    else:
        reply.reasoning.append(event.text)
        kind, message_id = "agent_thought_chunk", thought_id
    return {
        "sessionUpdate": kind,
        "messageId": message_id,
        "content": {"type": "text", "text": event.text},
    }


def accumulate(calls: dict[int, dict[str, Any]], delta: ToolCallDelta) -> None:
    """Add a streamed piece of a tool call to the reply's calls."""
    call = calls.setdefault(delta.index, {"id": None, "name": "", "arguments": ""})
    call["id"] = delta.id or call["id"]
    call["name"] += delta.name or ""
    call["arguments"] += delta.arguments


async def tell(session: LiveSession, event: Event) -> None:
    """What the model chain says about itself, for the user: a note (kept in the
    session's history) or a live notice; other events say nothing."""
    if isinstance(event, FallingBack) and event.guessed:
        note = f"using the embedded model {event.to_model} ({event.reason})"
        await session.note(note, "info")
    elif isinstance(event, FallingBack):
        await session.note(
            f"{event.from_model} failed ({event.reason}); {event.to_model} takes over.",
            "warning",
        )
    elif isinstance(event, Substituted):
        await session.note(
            f"ollama has no {event.model}; using {event.model_id}, a model it has "
            f"(ollama pull {event.model} for Crow's default)",
            "info",
        )
    elif isinstance(event, Retrying):
        asked = ", as the server asked" if event.asked else ""
        session.notice(
            f"retrying {event.model} in {seconds(event.delay_s)}{asked} "
            f"({event.attempt}/{event.attempts})",
            "warning",
            description=event.reason,
        )
    elif isinstance(event, Loading):
        session.notice(f"loading {event.model}", "info")
    elif isinstance(event, Stripped):
        kinds = " and ".join(event.modalities)
        await session.note(
            f"{event.model} cannot read {kinds}: those parts of the prompt "
            "were replaced by a note.",
            "warning",
        )


def seconds(value: float) -> str:
    """A wait for people: "0.3 s", "4 s", "1 min 30 s"."""
    if value < 10:
        return f"{value:.1f} s"
    minutes, seconds = divmod(round(value), 60)
    return f"{minutes} min {seconds} s" if minutes else f"{seconds} s"
