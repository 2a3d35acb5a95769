"""ACP v1 clients on the same agent: the official v1 implementation over Crow's sessions.

The router (``crow.acp.router``) sends a connection whose ``initialize`` asks
for ``protocolVersion`` 1 here.  The ``acp`` package's ``AgentSideConnection``
speaks v1 on it (framing, v1 models, dispatch); ``V1Agent`` implements its
``Agent`` interface on ``CrowAgent``, so a session is one session whichever
protocol created it, and resumes over the other.  ``V1Watcher`` is the
connection's ``Watcher``: each logged v2 update goes out translated
(``translate``), in the log's order.

Mapping decisions (ACP-V2.md §12):

- ``session/prompt`` starts the turn and answers when it ends, with its stop
  reason.  v2's ``error`` has no v1 stop reason: the prompt is answered with
  a JSON-RPC ``-32603`` carrying the turn's error message and
  ``data: {"stopReason": "error"}`` (the note explaining it went out as an
  agent message chunk first).  A client that drops the request does not stop
  the turn (``session/cancel`` does).
- ``session/load`` = v2 resume with replay from the start, translated afresh;
  ``session/resume`` = resume without replay.  The ``model`` select option is a
  v1 config option (``session/set_config_option``); no modes, no auth.
- Permission questions: v2 ``title``/``subject`` → v1 ``toolCall``
  (``translate.permission_params``); the v1 outcome comes back as the v2
  outcome.  v1 cannot withdraw a question: a late answer is ignored.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Iterator
from importlib.metadata import version
from typing import Any, cast

import orjson
from acp import schema as v1
from acp.agent.connection import AgentSideConnection
from acp.exceptions import RequestError
from pydantic import BaseModel, ValidationError

from crow.acp import AcpError, schema
from crow.acp.errors import INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST
from crow.acp.jsonrpc import EOF_GRACE_S, Transport
from crow.acp.router import MessageTransport

from ..service import CrowAgent
from ..turn import Turn
from .translate import SessionTranslator, config_options, permission_params

__all__ = ["V1Agent", "V1Watcher", "serve_v1"]

log = logging.getLogger("crow.agent")

PROTOCOL_VERSION = 1
V1_STOP_REASONS = frozenset({"end_turn", "max_tokens", "max_turn_requests", "refusal", "cancelled"})


async def serve_v1(
    agent: CrowAgent, transport: Transport, *, ready: asyncio.Event | None = None
) -> None:
    """Serve one v1 connection until the client goes away."""
    messages = MessageTransport(transport)
    face = V1Agent(agent, messages, ready=ready)
    # cast: V1Agent leaves out what Crow does not offer (modes, auth, fork); the
    # library's router answers those methods -32601.
    connection = AgentSideConnection(
        cast(Any, face), messages, listening=False, use_unstable_protocol=True
    )
    try:
        await connection.listen()
        # End of input: requests already read get a bounded grace to be answered
        # (closing cancels them; MessageTransport.close answers the rest -32800).
        await messages.settled(EOF_GRACE_S)
    finally:
        agent.detach(face.watcher)
        await connection.close()


class V1Watcher:
    """A v1 connection watching sessions: v2 updates go out as v1 ``session/update``s."""

    follower = False

    def __init__(self, messages: MessageTransport) -> None:
        self.messages = messages
        self.connection: AgentSideConnection | None = None
        self.sessions: dict[str, SessionTranslator] = {}

    def translator(self, session_id: str) -> SessionTranslator:
        translator = self.sessions.get(session_id)
        if translator is None:
            translator = self.sessions[session_id] = SessionTranslator(session_id)
        return translator

    def forget(self, session_id: str) -> None:
        """Start the session's translation afresh (before a replay)."""
        self.sessions.pop(session_id, None)

    # ---- Watcher ----------------------------------------------------------------
    def deliver(
        self, session_id: str, seq: int | None, update: dict[str, Any], body: bytes
    ) -> None:
        self._send(session_id, update, live=True)

    def replay(self, session_id: str, seq: int, body: bytes) -> None:
        self._send(session_id, orjson.loads(body), live=False)

    async def resumed(self, session_id: str, state: dict[str, Any]) -> None:
        return None  # v1 has no foreground state update

    @property
    def backed_up(self) -> bool:
        return self.messages.backed_up

    async def drained(self) -> None:
        await self.messages.drained()

    async def request_permission(self, params: schema.RequestPermissionRequest) -> Any:
        """Ask over v1; the v2 RequestPermissionResponse.  Raises AcpError or ConnectionError."""
        if self.connection is None:
            raise ConnectionError("the v1 connection is not open")
        request = permission_params(params, self.sessions.get(params.session_id))
        if request is None:
            return schema.RequestPermissionResponse.model_validate(
                {"outcome": {"outcome": "cancelled"}}
            )
        model = v1.RequestPermissionRequest.model_validate(request)
        try:
            answer = await self.connection.request_permission(
                session_id=model.session_id,
                tool_call=model.tool_call,
                options=model.options,
                **(model.field_meta or {}),
            )
        except RequestError as exc:
            raise AcpError.from_error(exc.to_error_obj()) from None
        outcome = answer.outcome.model_dump(mode="json", by_alias=True, exclude_none=True)
        return schema.RequestPermissionResponse.model_validate({"outcome": outcome})

    # ---- sending ----------------------------------------------------------------
    def _send(self, session_id: str, update: dict[str, Any], *, live: bool) -> None:
        """Translate and queue; never raises (it runs inside the session's emit)."""
        try:
            translated = self.translator(session_id).translate(update, live=live)
            for item in translated:
                note = v1.SessionNotification.model_validate(
                    {"sessionId": session_id, "update": item}
                )
                params = note.model_dump(
                    mode="json", by_alias=True, exclude_none=True, exclude_unset=True
                )
                self.messages.send_nowait(
                    {"jsonrpc": "2.0", "method": "session/update", "params": params}
                )
        except ValidationError as exc:
            log.warning(
                "dropping an update v1 cannot carry (%s): %s",
                update.get("sessionUpdate"),
                exc.errors()[0].get("msg"),
            )
        except Exception:
            log.exception("translating a %s update for v1 failed", update.get("sessionUpdate"))


class V1Agent:
    """The ``acp`` package's ``Agent`` interface on Crow's sessions (one per connection)."""

    def __init__(
        self, agent: CrowAgent, messages: MessageTransport, *, ready: asyncio.Event | None = None
    ) -> None:
        self.agent = agent
        self.watcher = V1Watcher(messages)
        self.ready = ready
        self.initialized = False

    def on_connect(self, connection: AgentSideConnection) -> None:
        self.watcher.connection = connection

    # ---- initialize -------------------------------------------------------------
    async def initialize(
        self,
        protocol_version: int,
        client_capabilities: v1.ClientCapabilities | None = None,
        client_info: v1.Implementation | None = None,
        **kwargs: Any,
    ) -> v1.InitializeResponse:
        if self.initialized:  # §3.4: initialize is once per connection
            raise RequestError(INVALID_REQUEST, "The connection is already initialized")
        caps = self.agent.prompt_caps
        response = v1.InitializeResponse(
            protocol_version=PROTOCOL_VERSION,
            agent_capabilities=v1.AgentCapabilities(
                load_session=True,
                prompt_capabilities=v1.PromptCapabilities(
                    image=schema.is_set(caps.image) and caps.image is not None,
                    audio=schema.is_set(caps.audio) and caps.audio is not None,
                    embedded_context=True,
                ),
                mcp_capabilities=v1.McpCapabilities(http=True, sse=False),
                session_capabilities=v1.SessionCapabilities(
                    list=v1.SessionListCapabilities(),
                    resume=v1.SessionResumeCapabilities(),
                    close=v1.SessionCloseCapabilities(),
                    additional_directories=v1.SessionAdditionalDirectoriesCapabilities(),
                ),
            ),
            agent_info=v1.Implementation(name="crow", title="Crow", version=version("crow-cli")),
            auth_methods=[],
        )
        self.initialized = True
        if self.ready is not None:
            self.ready.set()
        return response

    # ---- sessions -----------------------------------------------------------------
    async def new_session(
        self,
        cwd: str,
        additional_directories: list[str] | None = None,
        mcp_servers: list[Any] | None = None,
        **kwargs: Any,
    ) -> v1.NewSessionResponse:
        params = _v2_params(
            "session/new",
            {"cwd": cwd, "mcpServers": _servers(mcp_servers)},
            additionalDirectories=additional_directories,
        )
        with self._calling():
            response = await self.agent.methods.new_session(self.watcher, params)
        return v1.NewSessionResponse.model_validate(
            {
                "sessionId": response.session_id,
                "configOptions": _options(response),
            }
        )

    async def load_session(
        self,
        cwd: str,
        session_id: str,
        mcp_servers: list[Any] | None = None,
        additional_directories: list[str] | None = None,
        **kwargs: Any,
    ) -> v1.LoadSessionResponse:
        """v2 resume with replay from the start: the history arrives as v1 updates first."""
        options = await self._resume(
            session_id, cwd, mcp_servers, additional_directories, replay=True
        )
        return v1.LoadSessionResponse.model_validate({"configOptions": options})

    async def resume_session(
        self,
        session_id: str,
        cwd: str,
        additional_directories: list[str] | None = None,
        mcp_servers: list[Any] | None = None,
        **kwargs: Any,
    ) -> v1.ResumeSessionResponse:
        options = await self._resume(
            session_id, cwd, mcp_servers, additional_directories, replay=False
        )
        return v1.ResumeSessionResponse.model_validate({"configOptions": options})

    async def _resume(
        self,
        session_id: str,
        cwd: str,
        mcp_servers: list[Any] | None,
        additional_directories: list[str] | None,
        *,
        replay: bool,
    ) -> list[dict[str, Any]]:
        params = _v2_params(
            "session/resume",
            {"sessionId": session_id, "cwd": cwd, "mcpServers": _servers(mcp_servers)},
            additionalDirectories=additional_directories,
            replayFrom={"type": "start"} if replay else None,
        )
        if replay:
            self.watcher.forget(session_id)
        with self._calling():
            response = await self.agent.methods.resume_session(self.watcher, params)
        return _options(response)

    async def list_sessions(
        self, cwd: str | None = None, cursor: str | None = None, **kwargs: Any
    ) -> v1.ListSessionsResponse:
        params = _v2_params("session/list", {}, cwd=cwd, cursor=cursor)
        with self._calling():
            response = await self.agent.methods.list_sessions(self.watcher, params)
        return v1.ListSessionsResponse.model_validate(response.to_wire())

    async def close_session(self, session_id: str, **kwargs: Any) -> v1.CloseSessionResponse:
        params = _v2_params("session/close", {"sessionId": session_id})
        with self._calling():
            await self.agent.methods.close_session(self.watcher, params)
        self.watcher.forget(session_id)
        return v1.CloseSessionResponse()

    async def set_config_option(
        self, config_id: str, session_id: str, value: str | bool, **kwargs: Any
    ) -> v1.SetSessionConfigOptionResponse:
        kind = "boolean" if isinstance(value, bool) else "id"
        params = _v2_params(
            "session/set_config_option",
            {"sessionId": session_id, "configId": config_id, "type": kind, "value": value},
        )
        with self._calling():
            response = await self.agent.methods.set_config_option(self.watcher, params)
        return v1.SetSessionConfigOptionResponse.model_validate(
            {"configOptions": _options(response)}
        )

    # ---- prompts ------------------------------------------------------------------
    async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> v1.PromptResponse:
        """Run one turn; answered with its stop reason when it ends (see the module doc)."""
        with self._calling():
            blocks = [_v2(schema.ContentBlock, _wire(block)) for block in prompt]
            session = await self.agent.live_session(session_id)
            # v1 keeps v1's meaning: the answer comes when the turn ends; on a busy
            # session the prompt is held like a v2 one (there is no steering in v1).
            mode = "reject" if self.agent.config.session.while_busy == "reject" else "queue"
            turn = await self.agent.prompts.take_prompt(session, self.watcher, blocks, mode=mode)
            assert isinstance(turn, Turn)
        # Before the turn's first update: this client shows its own prompt.
        self.watcher.translator(session_id).own_prompts.add(turn.message_id)
        await turn.wait()  # not cancelled with this request: the turn goes on
        stop = turn.stop_reason or "end_turn"
        if stop == "error":
            raise RequestError(
                INTERNAL_ERROR,
                turn.error or "The turn failed",
                {"stopReason": "error", "sessionId": session_id},
            )
        return v1.PromptResponse(stop_reason=stop if stop in V1_STOP_REASONS else "end_turn")

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        if not self.initialized:
            return
        params = _v2_params("session/cancel", {"sessionId": session_id})
        await self.agent.cancel(self.watcher, params)

    # ---- helpers --------------------------------------------------------------------
    @contextlib.contextmanager
    def _calling(self) -> Iterator[None]:
        """The initialize gate (§3.4), and Crow's errors as the v1 library's."""
        if not self.initialized:
            raise RequestError(INVALID_REQUEST, "send initialize first")
        try:
            yield
        except AcpError as exc:
            raise RequestError(exc.code, exc.message, exc.data) from None


def _options(response: Any) -> list[dict[str, Any]]:
    """A v2 response's config options as v1 ones."""
    options = getattr(response, "config_options", None)
    return config_options(options if isinstance(options, list) else [])


def _wire(model: Any) -> Any:
    if isinstance(model, BaseModel):
        return model.model_dump(mode="json", by_alias=True, exclude_none=True)
    return model


def _servers(servers: list[Any] | None) -> list[dict[str, Any]]:
    """v1 MCP servers as v2 ones: v1 stdio servers carry no ``type``."""
    out = []
    for server in servers or []:
        raw = _wire(server)
        if isinstance(raw, dict) and "type" not in raw:
            raw = {"type": "stdio", **raw}
        out.append(raw)
    return out


def _v2_params(method: str, params: dict[str, Any], **optional: Any) -> Any:
    """The v2 params model of ``method`` (an omitted optional stays omitted)."""
    params.update({k: v for k, v in optional.items() if v is not None})
    params_type, _ = schema.AGENT_METHODS[method]
    return _v2(params_type, params)


def _v2(tp: Any, data: Any) -> Any:
    """Validate as a v2 type; what v2 refuses is the v1 caller's -32602."""
    try:
        return schema.adapter(tp).validate_python(data)
    except ValidationError as exc:
        detail = json.loads(exc.json(include_url=False, include_input=False))
        where = ".".join(str(p) for p in detail[0].get("loc", ())) if detail else ""
        message = detail[0].get("msg", "invalid") if detail else "invalid"
        raise RequestError(INVALID_PARAMS, f"Invalid params: {where}: {message}", detail) from None
