"""The client role: typed calls to an agent, and a projection per session.

``ClientSide`` owns one connection.  It installs its ``session/update`` and
``session/request_permission`` handling before any session exists (§7.2: updates
may arrive before the response that names their session), folds every update
into that session's ``SessionProjection``, and tells listeners about it.

    async with ClientSide(transport, info=...) as client:
        await client.initialize()
        session = await client.new_session(cwd)
        turn = await session.prompt("hello")
        await session.wait(turn)          # running/requires_action -> idle
        print(session.projection.text(), turn.stop_reason)
        await session.close()

Permission requests go to ``on_permission``; without one the client answers
``cancelled`` (a headless client must answer, §7.4).  ``cancel`` answers the
session's pending permission requests with ``cancelled`` (§7.3).

An agent that answers ``initialize`` with protocol version 1 is spoken to in v1
through ``crow.acp.v1_client`` (``self.v1``), behind the same calls and the same
projection: its users need not know.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from types import TracebackType
from typing import Any

from pydantic import ValidationError

from . import schema
from .connection import Connection
from .errors import AcpError, InvalidParams, MethodNotFound, ResourceNotFound
from .jsonrpc import Peer, Transport
from .projection import SessionProjection, Turn
from .v1_client import V1_VERSION, NotInV1, V1Agent

__all__ = ["ClientSide", "Session"]

log = logging.getLogger("crow.acp")

PROTOCOL_VERSION = 2
# Quoted: naming the models here would import them with crow.acp (see crow.acp.schema).
PermissionHandler = Callable[
    ["schema.RequestPermissionRequest"], Awaitable["schema.RequestPermissionResponse"]
]
UpdateListener = Callable[[str, Any], None]

_CANCELLED = {"outcome": {"outcome": "cancelled"}}


class ClientSide:
    """One connection, seen from the client."""

    def __init__(
        self,
        transport: Transport,
        *,
        info: schema.Implementation,
        capabilities: schema.ClientCapabilities | None = None,
        on_permission: PermissionHandler | None = None,
    ) -> None:
        self.info = info
        self.capabilities = capabilities or schema.ClientCapabilities()
        self.on_permission = on_permission
        self.agent: schema.InitializeResponse | None = None
        self.peer = Peer(
            transport,
            on_request=self._on_request,
            on_notification=self._on_notification,
            connection=Connection(),
        )
        self.projections: dict[str, SessionProjection] = {}
        #: The last ``_meta["crow/seq"]`` seen per session (a Crow agent's log cursor):
        #: what to resume from with ``replay_after`` after a lost connection.
        self.seqs: dict[str, int] = {}
        self._listeners: list[UpdateListener] = []
        self._changed: dict[str, asyncio.Event] = {}  # per session: fired, then replaced
        self._permission_tasks: dict[str, set[asyncio.Task[Any]]] = {}
        self._runner: asyncio.Task[None] | None = None
        #: The v1 dialect, when the agent answered protocol version 1.
        self.v1: V1Agent | None = None
        self._v1_turns: set[asyncio.Task[None]] = set()  # v1 prompts awaiting their end
        self._muted: set[str] = set()  # sessions whose v1 replay nobody asked to see

    # ---- lifetime -------------------------------------------------------------
    async def __aenter__(self) -> ClientSide:
        self._runner = asyncio.create_task(self._run(), name="acp-client")
        return self

    async def _run(self) -> None:
        try:
            await self.peer.run()
        finally:
            for event in self._changed.values():
                event.set()  # wake waiters: they see the connection closed

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        for task in list(self._v1_turns):
            task.cancel()
        await self.peer.aclose()
        if self._runner is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._runner

    @property
    def closed(self) -> asyncio.Event:
        return self.peer.closed

    def on_update(self, listener: UpdateListener) -> None:
        """Call ``listener(session_id, update)`` after each update is applied."""
        self._listeners.append(listener)

    def off_update(self, listener: UpdateListener) -> None:
        """Stop calling ``listener``."""
        with contextlib.suppress(ValueError):
            self._listeners.remove(listener)

    # ---- calls ----------------------------------------------------------------
    async def initialize(self) -> schema.InitializeResponse:
        """Send ``initialize`` offering v2; an agent that answers 1 is spoken to in v1
        (its answer comes back as v2, ``protocol_version`` 1).  Raises AcpError for
        any other version, or an answer that is not one."""
        request = schema.InitializeRequest(
            protocol_version=PROTOCOL_VERSION, info=self.info, capabilities=self.capabilities
        )
        result = await self.peer.request("initialize", request.to_wire())
        if isinstance(result, dict) and result.get("protocolVersion") == V1_VERSION:
            try:
                self.v1 = V1Agent(result)
            except ValidationError as exc:
                raise AcpError(
                    f"The agent's ACP v1 initialize answer is malformed: {exc}"
                ) from None
            self.agent = self.v1.initialize_response()
            return self.agent
        response = schema.InitializeResponse.model_validate(result)
        if response.protocol_version != PROTOCOL_VERSION:
            raise AcpError(
                f"The agent answered protocol version {response.protocol_version}; "
                f"this client speaks {PROTOCOL_VERSION}"
            )
        self.agent = response
        return response

    async def call(self, method: str, params: schema.AcpModel) -> Any:
        """Send a typed request; returns the validated result model."""
        if self.v1 is not None:
            return await self._call_v1(method, params.to_wire())
        result = await self.peer.request(method, params.to_wire())
        _, result_type = schema.AGENT_METHODS.get(method, (None, None))
        if result_type is None:
            return result
        return schema.adapter(result_type).validate_python(result)

    async def new_session(
        self,
        cwd: str,
        *,
        mcp_servers: Sequence[Any] = (),
        additional_directories: Sequence[str] | None = None,
        meta: dict[str, Any] | None = None,
    ) -> Session:
        request = schema.NewSessionRequest(cwd=cwd)
        _set_session_options(request, meta, mcp_servers, additional_directories)
        response: schema.NewSessionResponse = await self.call("session/new", request)
        return Session(self, response.session_id, response)

    async def list_sessions(
        self, *, cwd: str | None = None, cursor: str | None = None
    ) -> schema.ListSessionsResponse:
        request = schema.ListSessionsRequest()
        if cwd is not None:
            request.cwd = cwd
        if cursor is not None:
            request.cursor = cursor
        response: schema.ListSessionsResponse = await self.call("session/list", request)
        return response

    async def resume_session(
        self,
        session_id: str,
        cwd: str,
        *,
        replay: bool = True,
        replay_after: int | None = None,
        mcp_servers: Sequence[Any] = (),
        additional_directories: Sequence[str] | None = None,
        meta: dict[str, Any] | None = None,
    ) -> Session:
        """Resume; with ``replay`` the history arrives (as updates) before this returns;
        with ``replay_after`` (a Crow agent's ``_crow/after`` cursor) only the updates
        after that ``crow/seq``."""
        request = schema.ResumeSessionRequest(session_id=session_id, cwd=cwd)
        if replay_after is not None:
            cursor = {"type": "_crow/after", "seq": replay_after}
            request.replay_from = schema.UnknownReplayFrom.model_validate(cursor)
        elif replay:
            request.replay_from = schema.ReplayFromStart()
        _set_session_options(request, meta, mcp_servers, additional_directories)
        if replay:  # a fresh projection: the replay rebuilds it
            self.projections[session_id] = SessionProjection(session_id)
        if self.v1 is not None:
            response = await self._resume_v1(request.to_wire(), replay=replay)
        else:
            response = await self.call("session/resume", request)
        return Session(self, session_id, response)

    async def close_session(self, session_id: str) -> None:
        """Close; an unknown session counts as closed (§5.4)."""
        with contextlib.suppress(ResourceNotFound):
            await self.call("session/close", schema.CloseSessionRequest(session_id=session_id))

    async def delete_session(self, session_id: str) -> None:
        with contextlib.suppress(ResourceNotFound):
            await self.call("session/delete", schema.DeleteSessionRequest(session_id=session_id))

    async def prompt(
        self,
        session_id: str,
        blocks: Sequence[Any],
        *,
        meta: dict[str, Any] | None = None,
        withdraw: asyncio.Event | None = None,
    ) -> tuple[Any, Turn]:
        """Send a prompt; returns the acknowledgement and the Turn to wait on.

        On a busy session the agent may hold the prompt ([T], §6.1): this returns once
        it is inserted.  Setting ``withdraw`` asks the agent to drop it while held
        (``$/cancel_request``); RequestCancelled is raised if it did, and the answer
        is returned as usual if it was inserted first."""
        projection = self.projection(session_id)
        turn = projection.begin_turn()
        request = schema.PromptRequest(session_id=session_id, prompt=list(blocks))
        if meta:
            request.meta = meta
        try:
            if withdraw is not None and self.v1 is None:
                result = await self.peer.request(
                    "session/prompt", request.to_wire(), withdraw=withdraw
                )
                response = schema.PromptResponse.model_validate(result)
            else:
                response = await self.call("session/prompt", request)
        except BaseException:
            projection.forget_turn(turn)  # nothing was inserted
            raise
        message_id = getattr(response, "message_id", None)
        projection.acknowledge(turn, message_id if isinstance(message_id, str) else None)
        return response, turn

    async def cancel(self, session_id: str) -> None:
        """``session/cancel``, and answer this session's open permission questions."""
        for task in self._permission_tasks.get(session_id, set()):
            task.cancel()
        await self.peer.notify("session/cancel", {"sessionId": session_id})

    async def wait(self, session_id: str, turn: Turn) -> Turn:
        """Wait until ``turn`` ended (the caller bounds the wait)."""
        while not turn.done:
            await self.next_update(session_id)
        return turn

    async def next_update(self, session_id: str) -> None:
        """Wait until the next update of the session has been applied.

        Raises ConnectionError once the connection is closed.
        """
        if self.peer.closed.is_set():
            raise ConnectionError("the agent closed the connection")
        event = self._changed.get(session_id)
        if event is None:
            event = self._changed[session_id] = asyncio.Event()
        await event.wait()

    # ---- ACP v1 (an agent that answered protocol version 1) --------------------
    async def _call_v1(self, method: str, params: dict[str, Any]) -> Any:
        assert self.v1 is not None
        v1 = self.v1
        capabilities = v1.session_capabilities
        if method == "session/new":
            raw = await self.peer.request(method, v1.session_params(params))
            return v1.new_session_response(raw)
        if method == "session/prompt":
            return await self._prompt_v1(params)
        if method == "session/resume":
            replay = params.get("replayFrom") is not None
            return await self._resume_v1(params, replay=replay)
        if method == "session/list":
            if capabilities.list is None:
                raise NotInV1("this agent (ACP v1) does not list its sessions")
            return v1.list_response(await self.peer.request(method, params))
        if method == "session/close":
            if capabilities.close is not None:
                await self.peer.request(method, params)
            return None  # without it, a v1 session ends with its connection
        if method == "session/delete":
            if capabilities.delete is None:
                raise NotInV1("this agent (ACP v1) does not delete sessions")
            await self.peer.request(method, params)
            return None
        raise NotInV1(f"{method} has no ACP v1 form: this agent speaks ACP v1")

    async def _resume_v1(self, params: dict[str, Any], *, replay: bool) -> Any:
        """v1 ``session/load`` (replay) or ``session/resume``; a load whose replay was
        not asked for is kept out of the session's listeners."""
        assert self.v1 is not None
        v1 = self.v1
        if (
            isinstance(params.get("replayFrom"), dict)
            and params["replayFrom"].get("type") != "start"
        ):
            raise NotInV1(
                "replay from a cursor (_crow/after) is Crow's ACP v2 extension: "
                "this agent speaks ACP v1"
            )
        session_id = params["sessionId"]
        wire = v1.session_params(params)
        if not replay and v1.session_capabilities.resume is not None:
            await self.peer.request("session/resume", wire)
            return schema.ResumeSessionResponse()
        if not v1.can_load:
            raise NotInV1("this agent (ACP v1) cannot load a session (no loadSession)")
        if not replay:
            self._muted.add(session_id)
        try:
            await self.peer.request("session/load", wire)
        finally:
            self._muted.discard(session_id)
        return schema.ResumeSessionResponse()

    async def _prompt_v1(self, params: dict[str, Any]) -> schema.PromptResponse:
        """Send the v1 prompt, which is answered only when its turn ends: the turn's
        ``running`` and ``idle`` are made here (§7.2 then tells its end as in v2)."""
        assert self.v1 is not None
        session_id = params["sessionId"]
        self.v1.begin_turn(session_id)
        self._apply(session_id, V1Agent.state("running"))
        turn = asyncio.create_task(self._v1_turn(session_id, params), name="acp-v1-prompt")
        self._v1_turns.add(turn)
        turn.add_done_callback(self._v1_turns.discard)
        # One pass of the loop: the task's first step queues the prompt, so that a
        # session/cancel sent right after this returns is written after it.
        await asyncio.sleep(0)
        return schema.PromptResponse()

    async def _v1_turn(self, session_id: str, params: dict[str, Any]) -> None:
        assert self.v1 is not None
        error: dict[str, Any] | None = None
        try:
            stop = self.v1.stop_reason(await self.peer.request("session/prompt", params))
        except AcpError as exc:
            stop, error = "error", exc.to_error()
        except ValidationError as exc:
            stop, error = "error", {"code": -32603, "message": f"a malformed answer: {exc}"}
        except ConnectionError as exc:
            stop, error = "error", {"code": -32603, "message": str(exc) or "the agent went away"}
        self._apply(session_id, V1Agent.state("idle", stop_reason=stop, error=error))

    def _on_v1_update(self, params: Any) -> None:
        assert self.v1 is not None
        try:
            translated = self.v1.update(params or {})
        except ValidationError as exc:
            log.warning("dropping a malformed v1 session/update: %s", exc.errors()[0].get("msg"))
            return
        if translated is None or translated[0] in self._muted:
            return
        self._apply(*translated)

    # ---- inbound --------------------------------------------------------------
    def projection(self, session_id: str) -> SessionProjection:
        proj = self.projections.get(session_id)
        if proj is None:
            proj = self.projections[session_id] = SessionProjection(session_id)
        return proj

    async def _on_notification(self, method: str, params: dict[str, Any] | None) -> None:
        if method != "session/update":
            return
        if self.v1 is not None:
            self._on_v1_update(params)
            return
        try:
            note = schema.UpdateSessionNotification.model_validate(params or {})
        except ValidationError as exc:
            log.warning("dropping a malformed session/update: %s", exc.errors()[0].get("msg"))
            return
        meta = (params or {}).get("_meta")
        seq = meta.get("crow/seq") if isinstance(meta, dict) else None
        if isinstance(seq, int):  # a Crow agent's place in the session's log
            self.seqs[note.session_id] = seq
        self._apply(note.session_id, note.update)

    def _apply(self, session_id: str, update: Any) -> None:
        """Fold ``update`` into the session's projection, then tell the listeners."""
        self.projection(session_id).apply(update)
        for listener in self._listeners:
            listener(session_id, update)
        event = self._changed.pop(session_id, None)
        if event is not None:
            event.set()

    async def _on_request(self, method: str, params: dict[str, Any] | None) -> Any:
        if method != "session/request_permission":
            raise MethodNotFound.for_method(method)
        if self.v1 is not None:
            try:
                request, call = self.v1.permission(params or {})
            except ValidationError as exc:
                raise InvalidParams(f"a malformed ACP v1 permission request: {exc}") from None
            self._apply(request.session_id, call)  # v1: the question updates its tool call
        else:
            request = schema.RequestPermissionRequest.model_validate(params or {})
        if self.on_permission is None:
            return _CANCELLED
        task = asyncio.ensure_future(self.on_permission(request))
        tasks = self._permission_tasks.setdefault(request.session_id, set())
        tasks.add(task)
        try:
            response = await task
        except asyncio.CancelledError:
            if not task.cancelled():
                raise  # we were cancelled ($/cancel_request): the peer answers -32800
            return _CANCELLED  # session/cancel answered it
        finally:
            tasks.discard(task)
        return response.to_wire()


class Session:
    """A session as the client sees it: its projection and calls on it."""

    def __init__(self, client: ClientSide, session_id: str, response: Any) -> None:
        self.client = client
        self.id = session_id
        self.response = response
        self.projection = client.projection(session_id)
        self.last_prompt_response: Any = None  # the acknowledgement of the latest prompt

    async def prompt(
        self,
        *content: str | Any,
        meta: dict[str, Any] | None = None,
        withdraw: asyncio.Event | None = None,
    ) -> Turn:
        """Send a prompt of text and/or ContentBlock models; returns its Turn once the
        prompt is inserted (see ``ClientSide.prompt``)."""
        blocks = [schema.TextContent(text=c) if isinstance(c, str) else c for c in content]
        response, turn = await self.client.prompt(self.id, blocks, meta=meta, withdraw=withdraw)
        self.last_prompt_response = response
        return turn

    async def wait(self, turn: Turn) -> Turn:
        return await self.client.wait(self.id, turn)

    async def run(self, *content: str | Any) -> Turn:
        """Prompt and wait for the end of the turn."""
        return await self.wait(await self.prompt(*content))

    async def cancel(self) -> None:
        await self.client.cancel(self.id)

    async def close(self) -> None:
        await self.client.close_session(self.id)


def _set_session_options(
    request: schema.NewSessionRequest | schema.ResumeSessionRequest,
    meta: dict[str, Any] | None,
    mcp_servers: Sequence[Any],
    additional_directories: Sequence[str] | None,
) -> None:
    """What session/new and session/resume both carry, set only where given (an
    unset field stays off the wire)."""
    if meta:
        request.meta = meta
    if mcp_servers:
        request.mcp_servers = list(mcp_servers)
    if additional_directories is not None:
        request.additional_directories = list(additional_directories)
