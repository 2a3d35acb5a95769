"""The agent's ACP surface: session methods over the store and the turn loop.

``CrowAgent`` is one per process.  ``attach(side)`` serves one ACP v2
connection; many connections may watch one session (each update fans out to
all of them).  The session methods take the connection's ``Watcher`` and v2
params models, so another protocol face (v1, ``crow.agent.v1``) calls the same
methods with its own watcher.  The agent owns turn tasks, not connections: a
turn outlives the request that started it, and ``shutdown`` cancels what is
still running.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

from crow.acp import AgentSide, InvalidParams, InvalidRequest, SessionNotFound, schema
from crow.config import Config
from crow.models.router import ModelRouter
from crow.store.db import SessionRecord, Store, StoreError

from . import commands
from .content import prompt_capabilities, to_user_content
from .recovery import close_interrupted_turns, owner_alive
from .session import LiveSession, new_id, now
from .tooling import client_servers, mcp_capabilities, start_tools
from .turn import Turn
from .watchers import V2Watcher, Watcher

__all__ = ["CrowAgent"]

log = logging.getLogger("crow.agent")

#: Sessions one connection may have open at once (each holds tool servers).
MAX_SESSIONS_PER_CONNECTION = 64
#: How long shutdown lets cancelled turns write their last updates.
SHUTDOWN_TURN_WAIT_S = 0.5
#: Crow's own replay cursor: {"type": "_crow/after", "seq": N} replays the updates after N.
AFTER_CURSOR = "_crow/after"
SUPPORTED_REPLAY = ("start", AFTER_CURSOR)


class CrowAgent:
    def __init__(self, config: Config, store: Store, router: ModelRouter | None = None) -> None:
        self.config = config
        self.store = store
        self.router = router or ModelRouter(config)
        self.live: dict[str, LiveSession] = {}
        self._background: set[asyncio.Task[Any]] = set()
        self.prompt_caps = prompt_capabilities(config.models[config.chain[0]].capabilities)
        close_interrupted_turns(store)

    # ---- wiring -----------------------------------------------------------------
    def capabilities(self) -> schema.AgentCapabilities:
        return schema.AgentCapabilities(
            session=schema.SessionCapabilities(
                prompt=self.prompt_caps,
                mcp=mcp_capabilities(),
                delete=schema.SessionDeleteCapabilities(),
                additional_directories=schema.SessionAdditionalDirectoriesCapabilities(),
            ),
            meta={"crow/replayFrom": list(SUPPORTED_REPLAY)},  # Crow's resumable cursor
        )

    def attach(self, side: AgentSide) -> Watcher:
        """Serve ACP v2 on one connection; ``detach`` its watcher when it ends."""
        watcher = V2Watcher(side)
        handlers: dict[str, Any] = {
            "session/new": self.new_session,
            "session/list": self.list_sessions,
            "session/resume": self.resume_session,
            "session/close": self.close_session,
            "session/delete": self.delete_session,
            "session/prompt": self.prompt,
            "session/cancel": self.cancel,
            "session/set_config_option": self.set_config_option,
        }
        for method, handler in handlers.items():
            side.handle(method, _bind(handler, watcher))
        return watcher

    def detach(self, watcher: Watcher) -> None:
        """A connection has gone: its sessions stop sending to it."""
        for session in self.live.values():
            session.watchers.discard(watcher)

    async def shutdown(self) -> None:
        """Cancel running turns; each ends with idle/cancelled in the store."""
        turns = [s.turn for s in self.live.values() if s.turn is not None and not s.turn.done()]
        for task in turns:
            task.cancel("shutdown")
        for task in self._background:
            task.cancel()
        if turns:
            await asyncio.wait(turns, timeout=SHUTDOWN_TURN_WAIT_S)
        await asyncio.gather(*(s.close_tools() for s in self.live.values()))
        await self.router.aclose()

    # ---- sessions -----------------------------------------------------------------
    async def new_session(
        self, watcher: Watcher, params: schema.NewSessionRequest
    ) -> schema.NewSessionResponse:
        cwd = _absolute(params.cwd, "cwd")
        dirs = _directories(params.additional_directories)
        servers = client_servers(params.mcp_servers, self.config)
        self._check_session_limit(watcher)
        record = self.store.create_session(
            session_id=new_id("sess"),
            cwd=cwd,
            now=now(),
            additional_directories=dirs,
            config={"model": self.config.chain[0]},
        )
        session = self._activate(record)
        session.watchers.add(watcher)
        start_tools(session, self.config, servers, dirs)
        self._spawn(session.emit(commands.available_commands_update()), name="announce-commands")
        return schema.NewSessionResponse(
            session_id=record.id,
            config_options=self.config_options(session),
            available_commands=commands.available_commands(),
        )

    async def list_sessions(
        self, watcher: Watcher, params: schema.ListSessionsRequest
    ) -> schema.ListSessionsResponse:
        cwd = None if params.cwd in (schema.UNSET, None) else _absolute(params.cwd, "cwd")
        cursor = None if params.cursor in (schema.UNSET, None) else params.cursor
        try:
            records, next_cursor = self.store.list_sessions(cwd=cwd, cursor=cursor)
        except StoreError as exc:
            raise InvalidParams(str(exc), data={"cursor": cursor}) from None
        response = schema.ListSessionsResponse(sessions=[_info(r) for r in records])
        if next_cursor is not None:
            response.next_cursor = next_cursor
        return response

    async def resume_session(
        self, watcher: Watcher, params: schema.ResumeSessionRequest
    ) -> schema.ResumeSessionResponse:
        record = self.store.get_session(params.session_id)
        if record is None:
            raise SessionNotFound(params.session_id)
        if params.cwd != record.cwd:
            raise InvalidParams(
                f"cwd {params.cwd} is not this session's cwd ({record.cwd})",
                data={"cwd": params.cwd, "sessionCwd": record.cwd},
            )
        replay = _replay_cursor(params.replay_from)
        servers = client_servers(params.mcp_servers, self.config)
        dirs = _directories(params.additional_directories)
        session = self.live.get(record.id)
        if session is None or watcher not in session.watchers:
            self._check_session_limit(watcher)
        if session is None:
            if record.state != "idle" and owner_alive(record.owner_pid):
                raise InvalidParams(
                    f"Session {record.id} is running a turn in another Crow process "
                    f"(pid {record.owner_pid}): wait for it to finish",
                    data={"sessionId": record.id, "reason": "busy"},
                )
            session = self._activate(self.store.get_session(record.id) or record)
        self.store.update_session(record.id, additional_directories=dirs)
        if not session.busy:  # the complete new set of servers and roots (§5.3)
            await session.close_tools()
            start_tools(session, self.config, servers, dirs)
        if replay is not None:
            for seq, body in self.store.updates(record.id, after=replay):
                watcher.replay(record.id, seq, body)
        # Watch from here: live updates follow the replay with nothing between.
        session.watchers.add(watcher)
        await watcher.resumed(record.id, session.state_snapshot())
        return schema.ResumeSessionResponse(
            config_options=self.config_options(session),
            available_commands=commands.available_commands(),
        )

    async def close_session(self, watcher: Watcher, params: schema.CloseSessionRequest) -> None:
        session = self.live.get(params.session_id)
        if session is None:
            return  # unknown or already closed: success (§5.4)
        await self._stop_turn(session)
        session.watchers.discard(watcher)
        if not session.watchers:
            del self.live[session.id]
            await session.close_tools()

    async def delete_session(self, watcher: Watcher, params: schema.DeleteSessionRequest) -> None:
        session = self.live.pop(params.session_id, None)
        if session is not None:
            await self._stop_turn(session)
            session.watchers.clear()
            await session.close_tools()
        self.store.delete_session(params.session_id)

    async def set_config_option(
        self, watcher: Watcher, params: schema.SetSessionConfigOptionRequest
    ) -> schema.SetSessionConfigOptionResponse:
        session = self.live_session(params.session_id)
        if params.config_id != "model":
            raise InvalidParams(
                f"Unknown config option {params.config_id!r}", data={"configId": params.config_id}
            )
        value = getattr(params, "value", None)
        if params.type != "id" or value not in self.config.models:
            raise InvalidParams(
                f"model must be one of {sorted(self.config.models)}, got {value!r}",
                data={"configId": "model", "value": value},
            )
        await self.switch_model(session, value)
        return schema.SetSessionConfigOptionResponse(config_options=self.config_options(session))

    async def switch_model(self, session: LiveSession, model: str) -> None:
        session.model = model
        self.store.update_session(session.id, config={**session.record.config, "model": model})
        await session.emit(
            {
                "sessionUpdate": "config_option_update",
                "configOptions": [o.to_wire() for o in self.config_options(session)],
            }
        )

    # ---- prompts ------------------------------------------------------------------
    async def prompt(self, watcher: Watcher, params: schema.PromptRequest) -> schema.PromptResponse:
        turn, _ = self.start_turn(self.live_session(params.session_id), params.prompt)
        return schema.PromptResponse(message_id=turn.message_id)

    def start_turn(
        self, session: LiveSession, blocks: list[Any]
    ) -> tuple[Turn, asyncio.Task[None]]:
        """Start a prompt turn (v2 ContentBlock models); it runs until idle.

        Raises InvalidParams if the session is busy or a block is refused.  The
        turn's first update goes out on the next loop iteration, not before
        this returns.
        """
        if session.busy:
            raise InvalidParams(
                "The session is busy with a prompt: wait for idle or send session/cancel",
                data={"sessionId": session.id, "reason": "busy"},
            )
        content = to_user_content(blocks, self.prompt_caps)
        turn = Turn(self, session, message_id=new_id("msg"), blocks=blocks, content=content)
        self.store.update_session(session.id, owner_pid=os.getpid())
        # Busy from here on: a second prompt right behind this one is refused.
        task = session.turn = asyncio.create_task(turn.run(), name=f"turn-{session.id}")
        return turn, task

    async def cancel(self, watcher: Watcher, params: schema.CancelSessionNotification) -> None:
        session = self.live.get(params.session_id)
        if session is not None and session.turn is not None and not session.turn.done():
            session.turn.cancel("session/cancel")

    async def _stop_turn(self, session: LiveSession) -> None:
        """Cancel the running turn and wait until its idle/cancelled went out."""
        if session.turn is not None and not session.turn.done():
            session.turn.cancel("session/close")
            await asyncio.wait([session.turn])

    # ---- helpers ------------------------------------------------------------------
    def _spawn(self, coro: Any, *, name: str) -> None:
        """Work that outlives the request that started it (cancelled at shutdown)."""
        task = asyncio.create_task(coro, name=name)
        self._background.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[Any]) -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("%s failed", task.get_name(), exc_info=task.exception())

    def _activate(self, record: SessionRecord) -> LiveSession:
        model = record.config.get("model")
        if model not in self.config.models:
            model = self.config.chain[0]
        session = LiveSession(
            record=record,
            store=self.store,
            model=model,
            state=record.state,
            stop_reason=record.stop_reason,
            title=record.title,
        )
        self.live[record.id] = session
        return session

    def _check_session_limit(self, watcher: Watcher) -> None:
        open_here = sum(1 for s in self.live.values() if watcher in s.watchers)
        if open_here >= MAX_SESSIONS_PER_CONNECTION:
            raise InvalidRequest(
                f"Too many open sessions on this connection (limit "
                f"{MAX_SESSIONS_PER_CONNECTION}): close one with session/close first"
            )

    def live_session(self, session_id: str) -> LiveSession:
        """The live session; raises SessionNotFound (-32002) if it is not active."""
        session = self.live.get(session_id)
        if session is None:
            raise SessionNotFound(session_id)
        return session

    def config_options(self, session: LiveSession) -> list[schema.SessionConfigOption]:
        options = [
            schema.SessionConfigSelectOption(value=name, name=name, description=_describe(spec))
            for name, spec in self.config.models.items()
        ]
        return [
            schema.SelectSessionConfigOption(
                config_id="model",
                name="Model",
                category="model",
                current_value=session.model,
                options=options,
                description="The model that answers; others take over on failure",
            )
        ]


def _bind(handler: Any, watcher: Watcher) -> Any:
    async def bound(params: Any) -> Any:
        return await handler(watcher, params)

    return bound


def _absolute(path: Any, field: str) -> str:
    if not isinstance(path, str) or not os.path.isabs(path):
        raise InvalidParams(f"{field} must be an absolute path, got {path!r}", data={field: path})
    return os.path.normpath(path)


def _directories(value: Any) -> list[str]:
    if value in (schema.UNSET, None):
        return []
    return [_absolute(p, "additionalDirectories") for p in value]


def _replay_cursor(replay: Any) -> int | None:
    """Replay the updates after this seq (0: from the start); None: no replay."""
    if replay in (schema.UNSET, None):
        return None
    kind = getattr(replay, "type", None)
    if kind == "start":
        return 0
    seq = (replay.model_extra or {}).get("seq") if kind == AFTER_CURSOR else None
    if type(seq) is not int or seq < 0:
        raise InvalidParams(
            f"Unsupported replay cursor {kind!r}: this agent supports {list(SUPPORTED_REPLAY)}"
            f' ({AFTER_CURSOR} takes "seq", the last params._meta["crow/seq"] seen)',
            data={"replayFrom": kind},
        )
    return seq


def _info(record: SessionRecord) -> schema.SessionInfo:
    info = schema.SessionInfo(session_id=record.id, cwd=record.cwd, updated_at=record.updated_at)
    if record.title:
        info.title = record.title
    if record.additional_directories:
        info.additional_directories = record.additional_directories
    return info


def _describe(spec: Any) -> str:
    caps = ", ".join(sorted(spec.capabilities)) or "text only"
    return f"{spec.model_id} ({caps}; {spec.context_window} tokens)"
