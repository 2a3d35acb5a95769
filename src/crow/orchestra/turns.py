"""Turns of a session folded from its updates, as the judge's ``TurnView``s.

Two readers, one place: proxies see a session as JSON on the wire, not as crow.acp's
typed projection: ``TurnFolder`` keeps what a turn did (the request, the reply by
message, the tool calls with their input and output) from raw ``session/update``s (v1
or v2 shapes).  The judge (crow.orchestra.judge) is a client with a projection:
``LiveTurns`` follows its typed updates, tells a live turn from a replayed or judged
one, and reads the turn's text and tool calls from the projection when it ends.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

from crow.acp import ClientSide
from crow.extensions import FROM, JUDGING, NOTICE, VERDICT

from .verdict import OUTPUT_CHARS, ToolCallView, TurnView

__all__ = ["LiveTurns", "TurnFolder", "text_of"]


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


class LiveTurns:
    """Folds a session's live updates into turns; finished ones go to a queue."""

    def __init__(self, client: ClientSide, session_id: str) -> None:
        self.client, self.session_id = client, session_id
        self.current: TurnView | None = None
        self.messages: list[str] = []  # the agent's message ids in the current turn
        self.calls: list[str] = []
        self.judging: set[str] = set()  # the tool calls judges showed at work
        self.active = False  # running or requires_action seen since its user_message
        self.replaying = False  # a resume's replay: its turns ran (a replay has no states)
        self.done: asyncio.Queue[TurnView] = asyncio.Queue()

    def __call__(self, session_id: str, update: Any) -> None:
        if session_id != self.session_id:
            return
        kind = getattr(update, "session_update", None)
        if kind == "user_message":
            origin = _meta(update).get(FROM)
            self.current = TurnView(
                message_id=update.message_id, origin=origin if isinstance(origin, str) else None
            )
            self.messages, self.calls, self.active = [], [], self.replaying
        elif self.current is None:
            return  # before the first turn seen live: the worker's earlier state
        elif kind in ("agent_message", "agent_message_chunk"):
            meta = _meta(update)
            verdict = meta.get(VERDICT)
            if self.replaying and isinstance(verdict, dict):
                if verdict.get("turnMessageId") == self.current.message_id:
                    self.current = None  # judged before: the history holds its verdict
            elif VERDICT not in meta and NOTICE not in meta:
                self.messages.append(update.message_id)
        elif kind == "tool_call_update":
            if JUDGING in _meta(update):  # a judge's own (in a replay): not the turn's
                self.judging.add(update.tool_call_id)
            elif update.tool_call_id not in self.judging:
                self.calls.append(update.tool_call_id)
        elif kind == "state_update" and update.state in ("running", "requires_action"):
            self.active = True
        elif kind == "state_update" and update.state == "idle" and self.active:
            self.done.put_nowait(self._finish(getattr(update, "stop_reason", None)))

    def _finish(self, stop_reason: Any) -> TurnView:
        turn, self.current = self.current, None
        assert turn is not None
        projection = self.client.projection(self.session_id)
        user = projection.messages.get(turn.message_id)
        turn.request = user.text if user else ""
        texts = [projection.messages[i].text for i in dict.fromkeys(self.messages)]
        turn.reply = "\n".join(t for t in texts if t)
        for call_id in dict.fromkeys(self.calls):
            call = projection.tool_calls[call_id]
            output = " ".join(
                getattr(getattr(c, "content", None), "text", "") for c in call.content
            )
            turn.tool_calls.append(
                ToolCallView(
                    title=call.title or call_id,
                    kind=call.kind,
                    status=call.status,
                    input=call.fields.get("raw_input"),
                    output=output.strip() or _raw_text(call.fields.get("raw_output")),
                )
            )
        turn.stop_reason = None if stop_reason is None else str(stop_reason)
        return turn


def _meta(update: Any) -> dict[str, Any]:
    """An update's ``_meta`` (UNSET, None or not a dict: empty)."""
    meta = getattr(update, "meta", None)
    return meta if isinstance(meta, dict) else {}


def _raw_text(value: Any) -> str:
    if isinstance(value, dict):
        for key in ("text", "output", "content"):
            if isinstance(value.get(key), str):
                return str(value[key])
    return "" if value is None else json.dumps(value, ensure_ascii=False)[:OUTPUT_CHARS]
