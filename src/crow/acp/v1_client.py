"""Crow's client speaking ACP v1 to a v1-only agent, shown as v2 (ACP-V2.md §3.3, §12).

``ClientSide`` offers protocol version 2; an agent that speaks only v1 (Gemini CLI,
the Claude Code adapters, goose, OpenCode ...) answers 1.  Such a connection goes on
in v1 (a v1 ``initialize`` from us would have carried the same capabilities: none),
and ``V1Agent`` is its dialect, sans I/O: it builds v1 requests from v2 ones and turns
what the agent sends into the v2 models every renderer of Crow reads.  The messages
are checked with the official v1 models (the ``acp`` package), imported only then.

- ``initialize``: ``agentCapabilities`` → v2 ``capabilities`` (prompt, MCP transports,
  ``_meta`` kept), ``agentInfo`` → ``info``.
- ``session/update``: v1 chunks get the message id they carry, else one per run of
  chunks of a role (a tool call or a new turn starts the next); ``tool_call`` and
  ``tool_call_update`` → ``tool_call_update``; ``plan`` → an items ``plan_update``
  (v1 has one plan per session); commands, session info, usage and config options →
  their v2 forms; modes have no v2 form and are dropped.
- ``session/prompt`` is answered in v1 only when the turn ends: the turn's
  ``running`` and ``idle`` (with the stop reason, or ``error`` with the failure) are
  made here, so ``Turn`` tells the end as in v2.
- ``session/request_permission`` → a v2 question about the tool call it carries
  (whose fields are applied first, as v1 asks); the answer's shape is the same.
- ``session/resume`` with replay → ``session/load`` (``agentCapabilities.loadSession``);
  without → v1 ``session/resume`` where offered, else a load whose replay is kept
  out of sight.  ``session/list``, ``close`` and ``delete`` where offered.

What has no v1 form (replay after a cursor, a verdict) raises ``NotInV1`` with one
line saying so.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from . import schema
from .errors import MethodNotFound

__all__ = ["V1_VERSION", "NotInV1", "V1Agent"]

V1_VERSION = 1
#: The id of the one plan a v1 session has.
PLAN_ID = "plan"
_CHUNK_ROLES = {
    "user_message_chunk": "user",
    "agent_message_chunk": "agent",
    "agent_thought_chunk": "thought",
}


class NotInV1(MethodNotFound):
    """Something Crow asked for has no form in ACP v1 (one line for people)."""


def _wire(model: Any) -> dict[str, Any]:
    dumped: dict[str, Any] = model.model_dump(mode="json", by_alias=True, exclude_none=True)
    return dumped


@dataclass
class _Chunks:
    """Which message the chunks of a session are part of, per role."""

    current: dict[str, str] = field(default_factory=dict)  # role -> message id

    def message_id(self, role: str) -> str:
        if role not in self.current:
            self.current.clear()  # another role speaks: the others' messages are over
            self.current[role] = f"v1msg_{uuid.uuid4().hex[:16]}"
        return self.current[role]

    def break_(self) -> None:
        self.current.clear()


class V1Agent:
    """The v1 dialect of one connection (see the module doc)."""

    def __init__(self, raw: Any) -> None:
        # The v1 SDK's models (0.7 s to import here) load only when an agent answers protocol 1.
        from acp import schema as v1

        self.v1 = v1
        self.answer = v1.InitializeResponse.model_validate(raw)
        self.chunks: dict[str, _Chunks] = {}

    # ---- initialize -------------------------------------------------------------
    def initialize_response(self) -> schema.InitializeResponse:
        """The agent's answer, as a v2 ``InitializeResponse`` (protocol version 1)."""
        caps = self.answer.agent_capabilities or self.v1.AgentCapabilities()
        prompt = caps.prompt_capabilities or self.v1.PromptCapabilities()
        mcp = caps.mcp_capabilities or self.v1.McpCapabilities()
        session: dict[str, Any] = {
            "prompt": {
                **({"image": {}} if prompt.image else {}),
                **({"audio": {}} if prompt.audio else {}),
                **({"embeddedContext": {}} if prompt.embedded_context else {}),
            },
            "mcp": {"stdio": {}, **({"http": {}} if mcp.http else {})},
        }
        capabilities: dict[str, Any] = {"session": session}
        if caps.field_meta:
            capabilities["_meta"] = caps.field_meta
        info = self.answer.agent_info
        wire = {
            "protocolVersion": V1_VERSION,
            "info": _wire(info) if info is not None else {"name": "unknown", "version": "?"},
            "capabilities": capabilities,
        }
        return schema.InitializeResponse.model_validate(wire)

    @property
    def session_capabilities(self) -> Any:
        caps = self.answer.agent_capabilities or self.v1.AgentCapabilities()
        return caps.session_capabilities or self.v1.SessionCapabilities()

    @property
    def can_load(self) -> bool:
        caps = self.answer.agent_capabilities
        return bool(caps and caps.load_session)

    # ---- requests ---------------------------------------------------------------
    def session_params(self, params: dict[str, Any]) -> dict[str, Any]:
        """v1 params of ``session/new``, ``load`` or ``resume`` from v2 ones."""
        out: dict[str, Any] = {"cwd": params["cwd"], "mcpServers": []}
        for server in params.get("mcpServers") or []:
            kind = server.get("type")
            if kind == "stdio":
                stdio = {k: v for k, v in server.items() if k != "type"}
                out["mcpServers"].append({"args": [], "env": [], **stdio})
            elif kind == "http":
                out["mcpServers"].append({"headers": [], **server})
            else:
                raise NotInV1(f"an MCP server of type {kind!r} has no ACP v1 form")
        for key in ("sessionId", "_meta", "additionalDirectories"):
            if key in params:
                out[key] = params[key]
        return out

    def new_session_response(self, raw: Any) -> schema.NewSessionResponse:
        answer = self.v1.NewSessionResponse.model_validate(raw)
        return schema.NewSessionResponse(session_id=answer.session_id)

    def list_response(self, raw: Any) -> schema.ListSessionsResponse:
        answer = self.v1.ListSessionsResponse.model_validate(raw)
        return schema.ListSessionsResponse.model_validate(_wire(answer))

    def stop_reason(self, raw: Any) -> str:
        return str(self.v1.PromptResponse.model_validate(raw).stop_reason)

    # ---- what the agent sends ---------------------------------------------------
    def begin_turn(self, session_id: str) -> None:
        self.chunks.setdefault(session_id, _Chunks()).break_()

    def update(self, params: Any) -> tuple[str, Any] | None:
        """A v1 ``session/update``'s params as (session id, v2 update model); None for
        one with no v2 form."""
        note = self.v1.SessionNotification.model_validate(params)
        update = self._translate(note.session_id, note.update)
        if update is None:
            return None
        try:
            return note.session_id, schema.adapter(schema.SessionUpdate).validate_python(update)
        except ValidationError:
            return None

    def _translate(self, session_id: str, update: Any) -> dict[str, Any] | None:
        kind = update.session_update
        wire = _wire(update)
        chunks = self.chunks.setdefault(session_id, _Chunks())
        role = _CHUNK_ROLES.get(kind)
        if role is not None:
            wire.setdefault("messageId", update.message_id or chunks.message_id(role))
            return wire
        if kind in ("tool_call", "tool_call_update"):
            chunks.break_()
            wire["sessionUpdate"] = "tool_call_update"
            return wire
        if kind == "plan":
            entries = wire.get("entries", [])
            return {
                "sessionUpdate": "plan_update",
                "plan": {"type": "items", "planId": PLAN_ID, "entries": entries},
            }
        if kind == "available_commands_update":
            for command in wire.get("availableCommands", []):
                command["type"] = "command"
                if isinstance(command.get("input"), dict):
                    command["input"] = {"type": "text", **command["input"]}
            return wire
        if kind in ("session_info_update", "usage_update", "config_option_update"):
            return wire
        return None  # modes, and what only v1 has

    def permission(self, params: Any) -> tuple[schema.RequestPermissionRequest, Any]:
        """A v1 permission question as v2, and the tool call update it carries."""
        asked = self.v1.RequestPermissionRequest.model_validate(params)
        call = _wire(asked.tool_call)
        request = schema.RequestPermissionRequest.model_validate(
            {
                "sessionId": asked.session_id,
                "title": asked.tool_call.title or "a tool call",
                "subject": {"type": "tool_call", "toolCall": call},
                "options": [_wire(option) for option in asked.options],
            }
        )
        update = schema.adapter(schema.SessionUpdate).validate_python(
            {"sessionUpdate": "tool_call_update", **call}
        )
        return request, update

    @staticmethod
    def state(state: str, *, stop_reason: str | None = None, error: Any = None) -> Any:
        """A v2 ``state_update`` for the turns this side tells apart itself."""
        wire: dict[str, Any] = {"sessionUpdate": "state_update", "state": state}
        if stop_reason is not None:
            wire["stopReason"] = stop_reason
        if error is not None:
            wire["error"] = error
        return schema.adapter(schema.SessionUpdate).validate_python(wire)
