"""The session projection: what a client knows of a session, built from updates.

Every client in Crow renders through this one class.  ``apply`` folds one
``session/update`` into the state by the patch rules of ACP-V2.md §8.1:

- message chunks append to their ``messageId``; a whole-message update with
  ``content`` replaces what accumulated (chunks included), ``null`` or ``[]``
  clears it, an omitted ``content`` keeps it; identical chunks append again;
- entities (messages, tool calls, terminals, plans) are kept in first-seen
  order, even when the first update for one carries only metadata;
- upsert fields: omitted keeps, ``null`` clears, a value replaces; ``_meta``
  is merged per key ([T]: a ``null`` key removes it, ``{}`` changes nothing);
- terminal output: a snapshot replaces the bytes, a chunk appends decoded bytes.

``Turn`` does completion detection (§7.2): after a prompt is sent, an ``idle``
seen before ``running``/``requires_action`` is the session's earlier state; the
first ``idle`` after the turn started is its end.  A prompt sent to a busy session
may be held and inserted later ([T], ACP-V2.md §6.1): its answer (``{messageId}``)
comes only then, and the turn that runs meanwhile is someone else's.  So once the
answer names the prompt's ``messageId``, the turn is the one that goes on after that
``user_message``: its end is the first ``idle`` after it (a prompt steered into a
running turn ends with that turn).  An answer without one ([H]) keeps the
state-only reading.

Pure and synchronous: no I/O, so it is tested update by update.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field
from typing import Any

from .schema import UNSET

__all__ = ["Message", "SessionProjection", "Terminal", "ToolCall", "Turn"]

_ACTIVE_STATES = ("running", "requires_action")
_MESSAGE_ROLES = {
    "user_message": "user",
    "user_message_chunk": "user",
    "agent_message": "agent",
    "agent_message_chunk": "agent",
    "agent_thought": "thought",
    "agent_thought_chunk": "thought",
}


@dataclass
class Message:
    message_id: str
    role: str  # "user", "agent" or "thought"
    content: list[Any] = field(default_factory=list)  # ContentBlock models
    meta: dict[str, Any] | None = None

    @property
    def text(self) -> str:
        return "".join(
            getattr(block, "text", "")
            for block in self.content
            if getattr(block, "type", None) == "text"
        )


@dataclass
class ToolCall:
    tool_call_id: str
    fields: dict[str, Any] = field(default_factory=dict)  # python field name -> value
    content: list[Any] = field(default_factory=list)
    meta: dict[str, Any] | None = None

    @property
    def title(self) -> str | None:
        return self.fields.get("title")

    @property
    def kind(self) -> str:
        return self.fields.get("kind") or "other"

    @property
    def status(self) -> str:
        return self.fields.get("status") or "pending"


@dataclass
class Terminal:
    terminal_id: str
    output: bytearray = field(default_factory=bytearray)
    fields: dict[str, Any] = field(default_factory=dict)
    meta: dict[str, Any] | None = None

    @property
    def exited(self) -> bool:
        return self.fields.get("exit_status") is not None


@dataclass
class Turn:
    """Completion detection for one prompt (§7.2)."""

    started: bool = False
    done: bool = False
    stop_reason: str | None = None
    error: Any = None
    #: The inserted prompt's id, once its answer named it: then its ``user_message``
    #: and the first ``idle`` after it tell the turn, not the state alone.
    message_id: str | None = None
    acknowledged: bool = False  # the prompt's answer came
    inserted: bool = False  # its ``user_message`` has been seen (``message_id`` known)
    _ended: tuple[str | None, Any] | None = None  # the state-only reading's end, till then

    def observe(self, state: str, stop_reason: str | None, error: Any) -> None:
        if self.done:
            return
        if self.message_id is not None:
            if self.inserted and state == "idle":
                self.done, self.stop_reason, self.error = True, stop_reason, error
            return
        if state in _ACTIVE_STATES:
            self.started = True
        elif state == "idle" and self.started:
            if self.acknowledged:
                self.done, self.stop_reason, self.error = True, stop_reason, error
            elif self._ended is None:
                self._ended = (stop_reason, error)  # unless the answer names a message
        elif state != "idle":
            self.started = True  # an unknown state is "busy, unknown", never idle


class SessionProjection:
    """The client-side state of one session."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.entries: list[Message | ToolCall | Terminal] = []  # first-seen order
        self.messages: dict[str, Message] = {}
        self.tool_calls: dict[str, ToolCall] = {}
        self.terminals: dict[str, Terminal] = {}
        self.plans: dict[str, Any] = {}
        self.commands: list[Any] = []
        self.config_options: list[Any] = []
        self.info: dict[str, Any] = {}
        self.info_meta: dict[str, Any] | None = None
        self.usage: Any = None
        self.state = "idle"  # a new session defaults to idle
        self.stop_reason: str | None = None
        self.unknown: list[Any] = []  # updates of kinds this client does not know
        self.turns: list[Turn] = []
        #: While a prompt's answer is awaited: each ``user_message`` id seen meanwhile,
        #: with the ``idle`` (stop reason, error) that came after it, if one did.
        self._unclaimed: dict[str, tuple[str | None, Any] | None] = {}

    # ---- turns ----------------------------------------------------------------
    def begin_turn(self) -> Turn:
        """Call right before sending a prompt; the Turn says when it ended."""
        turn = Turn()
        self.turns.append(turn)
        return turn

    def acknowledge(self, turn: Turn, message_id: str | None) -> None:
        """The prompt's answer came, naming the inserted message (or not, [H])."""
        turn.acknowledged = True
        if message_id is None:
            if turn._ended is not None:
                turn.done = True
                turn.stop_reason, turn.error = turn._ended
        else:
            turn.message_id = message_id
            if message_id in self._unclaimed:  # its user_message came before the answer
                turn.inserted = True
                ended = self._unclaimed[message_id]
                if ended is not None:
                    turn.done = True
                    turn.stop_reason, turn.error = ended
        if turn.done:
            self.forget_turn(turn)
        elif all(t.acknowledged for t in self.turns):
            self._unclaimed.clear()

    def forget_turn(self, turn: Turn) -> None:
        """Stop following ``turn`` (it ended, or its prompt was refused)."""
        if turn in self.turns:
            self.turns.remove(turn)
        if all(t.acknowledged for t in self.turns):
            self._unclaimed.clear()

    # ---- reading --------------------------------------------------------------
    def text(self, role: str = "agent") -> str:
        """The text of every message of ``role``, in first-seen order."""
        return "".join(m.text for m in self.messages.values() if m.role == role)

    # ---- applying -------------------------------------------------------------
    def apply(self, update: Any) -> None:
        """Fold one update (a SessionUpdate model) into the projection."""
        kind = getattr(update, "session_update", None)
        role = _MESSAGE_ROLES.get(kind or "")
        if role is not None:
            self._apply_message(update, role, chunk=kind.endswith("_chunk"))  # type: ignore[union-attr]
            return
        handler = getattr(self, f"_apply_{kind}", None)
        if handler is None:
            self.unknown.append(update)
            return
        handler(update)

    def _apply_message(self, update: Any, role: str, *, chunk: bool) -> None:
        message = self.messages.get(update.message_id)
        if message is None:
            message = Message(message_id=update.message_id, role=role)
            self.messages[update.message_id] = message
            self.entries.append(message)
            if role == "user":
                self._user_inserted(update.message_id)
        if chunk:
            message.content.append(update.content)
        elif update.content is not UNSET:
            message.content = list(update.content or [])
        message.meta = merge_meta(message.meta, update.meta)

    def _apply_state_update(self, update: Any) -> None:
        self.state = update.state
        stop_reason: Any = getattr(update, "stop_reason", UNSET)
        if update.state == "idle":
            self.stop_reason = None if stop_reason is UNSET else stop_reason
        error = None if getattr(update, "error", UNSET) is UNSET else update.error
        for turn in self.turns:
            turn.observe(update.state, self.stop_reason, error)
        self.turns = [t for t in self.turns if not t.done]
        if update.state == "idle":
            for message_id, ended in self._unclaimed.items():
                if ended is None:
                    self._unclaimed[message_id] = (self.stop_reason, error)

    def _user_inserted(self, message_id: str) -> None:
        for turn in self.turns:
            if turn.message_id == message_id:
                turn.inserted = True
        if any(not t.acknowledged for t in self.turns):
            self._unclaimed[message_id] = None  # maybe a prompt whose answer is coming

    def _apply_tool_call_update(self, update: Any) -> None:
        call = self._tool_call(update.tool_call_id)
        content = _patch_fields(call.fields, update, special="content")
        if content is not UNSET:
            call.content = list(content or [])
        call.meta = merge_meta(call.meta, update.meta)

    def _apply_tool_call_content_chunk(self, update: Any) -> None:
        self._tool_call(update.tool_call_id).content.append(update.content)

    def _tool_call(self, tool_call_id: str) -> ToolCall:
        call = self.tool_calls.get(tool_call_id)
        if call is None:
            call = self.tool_calls[tool_call_id] = ToolCall(tool_call_id=tool_call_id)
            self.entries.append(call)
        return call

    def _apply_terminal_update(self, update: Any) -> None:
        term = self._terminal(update.terminal_id)
        output = _patch_fields(term.fields, update, special="output")
        if output is not UNSET:  # a snapshot replaces every byte so far
            term.output = bytearray(_b64(output.data) if output is not None else b"")
        term.meta = merge_meta(term.meta, update.meta)

    def _apply_terminal_output_chunk(self, update: Any) -> None:
        self._terminal(update.terminal_id).output += _b64(update.data)

    def _terminal(self, terminal_id: str) -> Terminal:
        term = self.terminals.get(terminal_id)
        if term is None:
            term = self.terminals[terminal_id] = Terminal(terminal_id=terminal_id)
            self.entries.append(term)
        return term

    def _apply_plan_update(self, update: Any) -> None:
        self.plans[update.plan.plan_id] = update.plan

    def _apply_available_commands_update(self, update: Any) -> None:
        self.commands = list(update.available_commands)

    def _apply_config_option_update(self, update: Any) -> None:
        self.config_options = list(update.config_options)

    def _apply_session_info_update(self, update: Any) -> None:
        for name in ("title", "updated_at"):
            value = getattr(update, name)
            if value is None:
                self.info.pop(name, None)
            elif value is not UNSET:
                self.info[name] = value
        self.info_meta = merge_meta(self.info_meta, update.meta)

    def _apply_usage_update(self, update: Any) -> None:
        previous_cost = getattr(self.usage, "cost", UNSET)
        self.usage = update
        if update.cost is UNSET and previous_cost is not UNSET:
            self.usage = update.model_copy(update={"cost": previous_cost})  # omitted keeps


_NOT_PATCHED = frozenset({"session_update", "tool_call_id", "terminal_id", "meta"})


def _patch_fields(fields: dict[str, Any], update: Any, *, special: str) -> Any:
    """Apply an upsert's fields to ``fields``: null clears, a value replaces,
    omitted keeps.  Returns the ``special`` field's value (or UNSET) for the caller."""
    special_value: Any = UNSET
    for name in update.model_fields_set - _NOT_PATCHED:
        value = getattr(update, name)
        if name == special:
            special_value = value
        elif value is None:
            fields.pop(name, None)
        else:
            fields[name] = value
    return special_value


def merge_meta(stored: dict[str, Any] | None, patch: Any) -> dict[str, Any] | None:
    """The [T] per-key ``_meta`` patch: omitted keeps, null clears, keys replace."""
    if patch is UNSET:
        return stored
    if patch is None:
        return None
    merged = dict(stored or {})
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    return merged


def _b64(data: str) -> bytes:
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return b""
