"""Crow's logged ACP v2 updates as ACP v1 ``session/update``s (ACP-V2.md §12).

Pure and synchronous, one ``SessionTranslator`` per session per v1 connection.
It folds each v2 update into a ``SessionProjection`` and returns the v1 updates
(wire dicts, validated later by the ``acp`` package's v1 models) that show the
same thing to a v1 client:

- chunks → the same v1 chunks; a whole-message snapshot → nothing when its
  chunks already went out, else one chunk per block (Crow's notes are such
  snapshots, ``_meta["crow/notice"]`` kept).  The user message of a prompt
  this connection sent itself is not echoed live (a v1 client shows its own
  prompt); on replay (``session/load``) it is.
- ``tool_call_update``: first sight → v1 ``tool_call``, later →
  ``tool_call_update`` with the fields it carried.  Content is sent whole
  (v1 has no content chunks) whenever it changes: a ``tool_call_content_chunk``
  or a terminal's output re-sends the tool call's accumulated content.
  Status ``cancelled`` → ``failed``; unknown kinds → ``other``.
- diffs and display terminals → what v1 can show (``content``).
- ``plan_update`` (items plans) → v1 ``plan``, every items plan's entries in
  first-seen order (v1 has one plan per session); entry status ``cancelled``
  → ``completed`` with ``_meta["crow/status"]``.
- ``available_commands_update``, ``config_option_update``,
  ``session_info_update``, ``usage_update`` → their v1 forms.
- ``state_update``, ``terminal_*`` on their own, unknown kinds → nothing (the
  v1 prompt response carries the stop reason).
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from typing import Any, get_args

from acp import schema as v1
from pydantic import ValidationError

from crow.acp import SessionProjection, ToolCall, schema
from crow.extensions import PERMISSION_DESCRIPTION, PERMISSION_TITLE, PLAN_STATUS

from .content import content_block, diff_content, terminal_text

__all__ = ["SessionTranslator", "config_options", "permission_params"]

log = logging.getLogger("crow.agent")

# What a v1 client accepts, from the official v1 models themselves.
V1_TOOL_KINDS = frozenset(get_args(v1.ToolKind))
V1_TOOL_STATUSES = frozenset(get_args(v1.ToolCallStatus))
V1_PLAN_STATUSES = frozenset({"pending", "in_progress", "completed"})
V1_PRIORITIES = frozenset({"high", "medium", "low"})
V1_PERMISSION_KINDS = frozenset({"allow_once", "allow_always", "reject_once", "reject_always"})
V1_CONFIG_CATEGORIES = frozenset({"mode", "model", "model_config", "thought_level"})
_CHUNKS = ("user_message_chunk", "agent_message_chunk", "agent_thought_chunk")
_SNAPSHOTS = {
    "user_message": "user_message_chunk",
    "agent_message": "agent_message_chunk",
    "agent_thought": "agent_thought_chunk",
}

Update = dict[str, Any]


@dataclass
class SessionTranslator:
    """The v1 view of one session, for one v1 connection."""

    session_id: str
    projection: SessionProjection = field(init=False)
    chunked: set[str] = field(default_factory=set)  # message ids whose chunks went out
    own_prompts: set[str] = field(default_factory=set)  # user messages this peer sent
    announced: set[str] = field(default_factory=set)  # tool calls sent as v1 tool_call
    terminal_calls: dict[str, set[str]] = field(default_factory=dict)  # terminal -> tool calls

    def __post_init__(self) -> None:
        self.projection = SessionProjection(self.session_id)

    def translate(self, update: Update, *, live: bool = True) -> list[Update]:
        """The v1 updates for one logged v2 update (its wire dict)."""
        try:
            model = schema.adapter(schema.SessionUpdate).validate_python(update)
        except ValidationError as exc:
            log.warning("not translating a malformed update: %s", exc.errors()[0].get("msg"))
            return []
        self.projection.apply(model)
        kind = update.get("sessionUpdate")
        if kind in _CHUNKS:
            return self._chunk(update, kind, live=live)
        if kind in _SNAPSHOTS:
            return self._snapshot(update, _SNAPSHOTS[kind], live=live)
        if kind == "tool_call_update":
            return self._tool_call(update)
        if kind == "tool_call_content_chunk":
            return self._tool_content_changed(update["toolCallId"])
        if kind in ("terminal_update", "terminal_output_chunk"):
            calls = sorted(self.terminal_calls.get(update["terminalId"], ()))
            return [u for call in calls for u in self._tool_content_changed(call)]
        if kind == "plan_update":
            return self._plan(update)
        if kind == "available_commands_update":
            return [_commands(update)]
        if kind == "config_option_update":
            return [
                {
                    "sessionUpdate": "config_option_update",
                    "configOptions": config_options(update.get("configOptions") or []),
                }
            ]
        if kind == "session_info_update":
            return [_pick(update, "sessionUpdate", "title", "updatedAt", "_meta")]
        if kind == "usage_update":
            return [_pick(update, "sessionUpdate", "used", "size", "cost", "_meta")]
        return []  # state_update: the prompt response says it; unknown kinds: nothing

    # ---- messages -------------------------------------------------------------
    def _chunk(self, update: Update, kind: str, *, live: bool) -> list[Update]:
        message_id = update.get("messageId")
        if live and kind == "user_message_chunk" and message_id in self.own_prompts:
            return []
        if isinstance(message_id, str):
            self.chunked.add(message_id)
        block = content_block(update.get("content"))
        if block is None:
            return []
        return [_with(update, {"sessionUpdate": kind, "content": block}, "messageId", "_meta")]

    def _snapshot(self, update: Update, kind: str, *, live: bool) -> list[Update]:
        message_id = update.get("messageId")
        if message_id in self.chunked:
            return []  # the chunks said it already (v1 cannot replace a message)
        if live and kind == "user_message_chunk" and message_id in self.own_prompts:
            return []  # the prompt this connection sent: its client shows it
        out = []
        for raw in update.get("content") or []:
            block = content_block(raw)
            if block is None or (block.get("type") == "text" and not block.get("text")):
                continue
            out.append(
                _with(update, {"sessionUpdate": kind, "content": block}, "messageId", "_meta")
            )
        return out

    # ---- tool calls -----------------------------------------------------------
    def _tool_call(self, update: Update) -> list[Update]:
        call_id = update["toolCallId"]
        fields = _tool_fields(update)
        call = self.projection.tool_calls[call_id]
        if "content" in update:
            fields["content"] = self.tool_content(call)
        if call_id not in self.announced:
            return [self._announce(call, fields)]
        return [{"sessionUpdate": "tool_call_update", "toolCallId": call_id, **fields}]

    def _tool_content_changed(self, call_id: str) -> list[Update]:
        call = self.projection.tool_calls.get(call_id)
        if call is None:
            return []
        content = self.tool_content(call)
        if call_id not in self.announced:
            return [self._announce(call, {"content": content})]
        return [{"sessionUpdate": "tool_call_update", "toolCallId": call_id, "content": content}]

    def _announce(self, call: ToolCall, fields: Update) -> Update:
        """The v1 ``tool_call`` that creates ``call`` (v1 requires a title)."""
        self.announced.add(call.tool_call_id)
        created = {**_tool_fields(_stored_fields(call)), **fields}
        created.setdefault("title", "Tool call")
        if "content" not in created and call.content:
            created["content"] = self.tool_content(call)
        return {"sessionUpdate": "tool_call", "toolCallId": call.tool_call_id, **created}

    def tool_content(self, call: ToolCall) -> list[Update]:
        """A tool call's accumulated v2 content as v1 ToolCallContent."""
        out: list[Update] = []
        for item in call.content:
            raw = item.to_wire() if isinstance(item, schema.AcpModel) else dict(item)
            kind = raw.get("type")
            if kind == "content":
                block = content_block(raw.get("content"))
                if block is not None:
                    out.append({"type": "content", "content": block})
            elif kind == "diff":
                out.extend(diff_content(raw))
            elif kind == "terminal":
                terminal_id = str(raw.get("terminalId"))
                self.terminal_calls.setdefault(terminal_id, set()).add(call.tool_call_id)
                text = terminal_text(self.projection.terminals.get(terminal_id))
                out.append({"type": "content", "content": {"type": "text", "text": text}})
        return out

    # ---- plans ----------------------------------------------------------------
    def _plan(self, update: Update) -> list[Update]:
        if (update.get("plan") or {}).get("type") != "items":
            return []
        entries = []
        for plan in self.projection.plans.values():
            if getattr(plan, "type", None) != "items":
                continue
            for entry in plan.entries:
                raw = entry.to_wire()
                status = raw.get("status")
                item: Update = {
                    "content": raw.get("content", ""),
                    "priority": raw["priority"]
                    if raw.get("priority") in V1_PRIORITIES
                    else "medium",
                    "status": status if status in V1_PLAN_STATUSES else "completed",
                }
                if status not in V1_PLAN_STATUSES:
                    item["_meta"] = {PLAN_STATUS: status}
                entries.append(item)
        return [{"sessionUpdate": "plan", "entries": entries}]

    # ---- permissions ------------------------------------------------------------
    def known_title(self, call_id: str | None) -> str | None:
        call = self.projection.tool_calls.get(call_id or "")
        return call.title if call is not None else None


# ---- fields -----------------------------------------------------------------------
def _tool_fields(update: Update) -> Update:
    """The v1 fields of a v2 tool_call_update (wire keys), nulls dropped or defaulted."""
    out: Update = {}
    if isinstance(update.get("title"), str):
        out["title"] = update["title"]
    if "kind" in update:
        kind = update["kind"]
        out["kind"] = kind if kind in V1_TOOL_KINDS else "other"
    if "status" in update:
        status = update["status"]
        if status in V1_TOOL_STATUSES:
            out["status"] = status
        elif status == "cancelled":
            out["status"] = "failed"
        elif status is None:
            out["status"] = "pending"
    if "locations" in update:
        out["locations"] = update["locations"] or []
    for key in ("rawInput", "rawOutput", "_meta"):
        if update.get(key) is not None:
            out[key] = update[key]
    return out


def _stored_fields(call: ToolCall) -> Update:
    """What the projection holds for a tool call, as tool_call_update wire keys."""
    names = {"raw_input": "rawInput", "raw_output": "rawOutput"}
    out: Update = {}
    for name, value in call.fields.items():
        wire = names.get(name, name)
        if isinstance(value, list):
            value = [v.to_wire() if isinstance(v, schema.AcpModel) else v for v in value]
        elif isinstance(value, schema.AcpModel):
            value = value.to_wire()
        out[wire] = value
    if call.meta:
        out["_meta"] = call.meta
    return out


def _commands(update: Update) -> Update:
    commands = []
    for command in update.get("availableCommands") or []:
        item = _pick(command, "name", "description", "_meta")
        hint = (command.get("input") or {}).get("hint")
        if (command.get("input") or {}).get("type") == "text" and isinstance(hint, str):
            item["input"] = {"hint": hint}
        commands.append(item)
    return {"sessionUpdate": "available_commands_update", "availableCommands": commands}


def config_options(options: list[Any]) -> list[Update]:
    """v2 session config options (models or wire dicts) as v1 ones (``id``, ``group``)."""
    out = []
    for option in options:
        raw = option.to_wire() if isinstance(option, schema.AcpModel) else option
        kind = raw.get("type")
        if kind not in ("select", "boolean"):
            continue
        item = _pick(raw, "type", "name", "description", "currentValue", "_meta")
        item["id"] = raw.get("configId")
        if raw.get("category") in V1_CONFIG_CATEGORIES:
            item["category"] = raw["category"]
        if kind == "select":
            item["options"] = [_select_choice(choice) for choice in raw.get("options") or []]
        out.append(item)
    return out


def _select_choice(choice: Update) -> Update:
    if "groupId" in choice:
        group = _pick(choice, "name", "_meta")
        group["group"] = choice["groupId"]
        group["options"] = [
            _pick(c, "value", "name", "description", "_meta") for c in choice.get("options") or []
        ]
        return group
    return _pick(choice, "value", "name", "description", "_meta")


def _pick(raw: Update, *keys: str) -> Update:
    return {k: raw[k] for k in keys if raw.get(k) is not None}


def _with(update: Update, base: Update, *keys: str) -> Update:
    base.update(_pick(update, *keys))
    return base


# ---- permission requests -------------------------------------------------------------
def permission_params(
    request: schema.RequestPermissionRequest, translator: SessionTranslator | None
) -> Update | None:
    """The v1 ``session/request_permission`` params for a v2 request (None: nothing to ask).

    v1 needs a ``toolCall`` (a ToolCallUpdate the client shows the question on):
    a ``tool_call`` subject is that patch; a ``command`` subject becomes an
    ``execute`` call with the command as ``rawInput``; without a subject the
    request's title names a call of its own.  The v2 title and description go
    in ``_meta`` (``crow/title``, ``crow/description``).  Options of kinds v1
    lacks are left out (the kind is only a hint, and a guess could read as
    approval); with none left nothing is asked.
    """
    wire = request.to_wire()
    subject: Update = wire["subject"] if isinstance(wire.get("subject"), dict) else {}
    kind = subject.get("type")
    if kind == "tool_call" and isinstance(subject.get("toolCall"), dict):
        tool_call = _tool_fields(subject["toolCall"])
        tool_call["toolCallId"] = subject["toolCall"].get("toolCallId")
    elif kind == "command":
        tool_call = {
            "toolCallId": subject.get("toolCallId") or f"permission_{uuid.uuid4().hex[:12]}",
            "kind": "execute",
            "rawInput": {"command": subject.get("command"), "cwd": subject.get("cwd")},
        }
    else:
        tool_call = {"toolCallId": f"permission_{uuid.uuid4().hex[:12]}"}
    known = translator.known_title(tool_call["toolCallId"]) if translator else None
    tool_call.setdefault("title", known or wire.get("title") or "Permission request")
    options = [
        _pick(option, "optionId", "name", "kind", "_meta")
        for option in wire.get("options") or []
        if option.get("kind") in V1_PERMISSION_KINDS
    ]
    if not options:
        return None
    meta = {PERMISSION_TITLE: wire.get("title")}
    if isinstance(wire.get("description"), str):
        meta[PERMISSION_DESCRIPTION] = wire["description"]
    return {
        "sessionId": request.session_id,
        "toolCall": tool_call,
        "options": options,
        "_meta": meta,
    }
