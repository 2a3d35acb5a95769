"""One turn of a session, read from its raw ``session/update``s (v1 or v2 shapes).

Proxies see a session as JSON on the wire, not as crow.acp's typed projection:
``TurnFolder`` keeps what a turn did (the request, the reply by message, the tool
calls with their input and output) and gives it as the judge's ``TurnView``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from crow.extensions import VERDICT

from .verdict import ToolCallView, TurnView

__all__ = ["TurnFolder", "text_of"]


@dataclass
class TurnFolder:
    """What one turn did, folded from raw ``session/update``s (v1 or v2)."""

    request: str
    message_id: str = ""
    origin: str | None = None
    active: bool = False  # v2: running seen
    replies: dict[str, str] = field(default_factory=dict)  # message id -> text
    calls: dict[str, dict[str, Any]] = field(default_factory=dict)

    def apply(self, update: dict[str, Any]) -> None:
        kind = update.get("sessionUpdate")
        if kind == "user_message" and isinstance(update.get("messageId"), str):
            self.message_id = update["messageId"]
        elif kind == "agent_message_chunk":
            key = str(update.get("messageId", ""))
            self.replies[key] = self.replies.get(key, "") + text_of(update.get("content"))
        elif kind == "agent_message" and VERDICT not in (update.get("_meta") or {}):
            self.replies[str(update.get("messageId", ""))] = text_of(update.get("content"))
        elif kind in ("tool_call", "tool_call_update"):
            call = self.calls.setdefault(str(update.get("toolCallId")), {})
            for key, value in update.items():
                if key == "content" and isinstance(value, list):
                    call["output"] = " ".join(text_of(c.get("content")) for c in value)
                elif value is not None:
                    call[key] = value
        elif kind == "state_update" and update.get("state") in ("running", "requires_action"):
            self.active = True

    def view(self, stop_reason: Any) -> TurnView:
        calls = [
            ToolCallView(
                title=str(call.get("title") or call_id),
                kind=str(call.get("kind", "other")),
                status=str(call.get("status", "")),
                input=call.get("rawInput"),
                output=str(call.get("output") or call.get("rawOutput") or "").strip(),
            )
            for call_id, call in self.calls.items()
        ]
        return TurnView(
            message_id=self.message_id,
            request=self.request,
            reply="\n".join(t for t in self.replies.values() if t),
            tool_calls=calls,
            stop_reason=None if stop_reason is None else str(stop_reason),
            origin=self.origin,
        )


def text_of(value: Any) -> str:
    """The text of a content block, or of a list of them."""
    if isinstance(value, list):
        return "".join(text_of(block) for block in value)
    if isinstance(value, dict) and value.get("type") == "text":
        return str(value.get("text", ""))
    return ""
