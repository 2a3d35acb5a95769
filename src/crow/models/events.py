"""What a streaming model call yields: small immutable events, and ``deltas``, which reads
them out of one streamed chat-completion delta (the HTTP and the embedded models alike)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = [
    "Event",
    "FallingBack",
    "Finished",
    "Loading",
    "ReasoningDelta",
    "Retrying",
    "Stripped",
    "TextDelta",
    "ToolCallDelta",
    "Usage",
    "deltas",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class TextDelta:
    text: str
    #: The next event has arrived already (with this one): a consumer may wait for
    #: it before acting (the turn logs such a burst of deltas in one transaction).
    more: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class ReasoningDelta:
    text: str
    more: bool = False  # as TextDelta's


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallDelta:
    """A piece of a tool call: ``arguments`` pieces concatenate per ``index``."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Finished:
    """The model's answer is complete."""

    finish_reason: str  # stop, length, content_filter, tool_calls, ...
    model: str  # the configured name of the model that answered
    usage: Usage | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class FallingBack:
    """The chain moved on: ``from_model`` failed with ``reason``."""

    from_model: str
    to_model: str
    reason: str
    guessed: bool = False  # from_model was zero config's guess (ollama on localhost)


@dataclass(frozen=True, slots=True, kw_only=True)
class Stripped:
    """``model`` cannot take these modalities; they were replaced by text notes."""

    model: str
    modalities: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Substituted:
    """Zero config's ollama does not have ``model``'s id; ``model_id``, a model it
    does have, answers instead."""

    model: str
    model_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Retrying:
    """``model`` failed with a transient error; attempt ``attempt`` of ``attempts``
    starts in ``delay_s`` seconds (``asked``: as its server's Retry-After said)."""

    model: str
    attempt: int
    attempts: int
    reason: str
    delay_s: float
    asked: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Loading:
    """An embedded model is being loaded into memory before it can answer."""

    model: str


Event = (
    TextDelta
    | ReasoningDelta
    | ToolCallDelta
    | Finished
    | FallingBack
    | Stripped
    | Substituted
    | Retrying
    | Loading
)


def deltas(delta: dict[str, Any]) -> list[Event]:
    """The events in one streamed ``delta`` (a plain JSON object)."""
    events: list[Event] = []
    reasoning = delta.get("reasoning_content") or delta.get("reasoning")
    if isinstance(reasoning, str) and reasoning:
        events.append(ReasoningDelta(text=reasoning))
    content = delta.get("content")
    if isinstance(content, str) and content:
        events.append(TextDelta(text=content))
    for call in delta.get("tool_calls") or []:
        function = call.get("function") or {}
        events.append(
            ToolCallDelta(
                index=int(call.get("index") or 0),
                id=call.get("id"),
                name=function.get("name"),
                arguments=function.get("arguments") or "",
            )
        )
    return events
