"""The agent's ACP surface: session methods over the store and the turn loop.

``CrowAgent`` is one per process.  ``attach(side)`` serves one ACP v2
connection; many connections may watch one session (each update fans out to
all of them).  The session methods take the connection's ``Watcher`` and v2
params models, so another protocol face (v1, ``crow.agent.v1``) calls the same
methods with its own watcher.  The agent owns turn tasks, not connections: a
turn outlives the request that started it, and ``shutdown`` cancels what is
still running.

Who may end what (README, "Several clients"):

- a client that disconnects only stops watching: a running turn goes on, and
  a session nobody watches is unloaded (its tool servers stop) once idle;
- ``session/close`` detaches the caller; when the last watcher leaves, the
  running turn is cancelled and the session unloaded;
- ``session/cancel`` from any watcher cancels the turn; ``session/delete``
  ends everything.

The store is reached through ``AsyncStore`` only, so no store wait runs on the
event loop.  One turn runs per session across processes: a prompt takes the
session's lease in the store before it is acknowledged (``crow.store.lease``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from dataclasses import replace
from typing import Any, Protocol

import orjson

from crow.acp import (
    AgentSide,
    InternalError,
    InvalidParams,
    InvalidRequest,
    RequestCancelled,
    SessionNotFound,
    schema,
)
from crow.config import Config
from crow.extensions import FROM, JUDGE_OF, POST_JUDGING, POST_VERDICT, VERIFY
from crow.models.errors import ModelError
from crow.models.router import ModelRouter
from crow.runtime.quiet import MemoryRelease
from crow.runtime.slow_exit import REPORT_AFTER_S, report_if_slow
from crow.store.aio import AsyncStore, settled
from crow.store.db import SessionRecord, Store, StoreError, StoreUnavailable
from crow.store.lease import RENEW_EVERY_S, expiry, this_process

from . import commands, verdicts
from .content import prompt_capabilities, to_user_content
from .queue import insert_mode
from .recovery import close_interrupted_turns, is_orphaned
from .session import LiveSession, new_id, now
from .shared_questions import SharedQuestions
from .shared_queue import SharedQueue
from .tooling import client_servers, mcp_capabilities, start_tools
from .turn import Turn
from .watchers import V2Watcher, Watcher

__all__ = ["CrowAgent", "Follower", "Steered"]

log = logging.getLogger("crow.agent")

#: Sessions one connection may have open at once (each holds tool servers).
MAX_SESSIONS_PER_CONNECTION = 64
#: How long shutdown lets cancelled turns write their last updates.
SHUTDOWN_TURN_WAIT_S = 0.5
#: On a shared store, how often a server looks for turns whose server died.
ORPHAN_SWEEP_S = 5.0
#: Crow's own replay cursor: {"type": "_crow/after", "seq": N} replays the updates after N.
AFTER_CURSOR = "_crow/after"
SUPPORTED_REPLAY = ("start", AFTER_CURSOR)


class Follower(Protocol):
    """Crow's own judge inside ``crow serve`` (crow.orchestra.resident): told which
    sessions to verify; it watches them over an in-process connection of followers."""

    def follow(self, session: LiveSession) -> None: ...

    def unfollow(self, session_id: str) -> None: ...

    async def aclose(self) -> None: ...


class CrowAgent:
    def __init__(
        self,
        config: Config,
        store: Store,
        router: ModelRouter | None = None,
        *,
        clients_authenticated: bool = True,
    ) -> None:
        self.config = config
        # False on an HTTP server without a token: its clients may not name MCP servers.
        self.clients_authenticated = clients_authenticated
        self.store = AsyncStore(store)
        self.router = router or ModelRouter(config)
        self.owner = this_process()  # the name this process takes turn leases under
        self.live: dict[str, LiveSession] = {}
        self._background: set[asyncio.Task[Any]] = set()
        self._lease_keeper: asyncio.Task[None] | None = None
        self._listener: asyncio.Task[None] | None = None  # other servers' updates
        self._shut_down = False
        self.shared_questions: SharedQuestions | None = None
        self.shared_queue: SharedQueue | None = None
        if self.store.shared:
            self.shared_questions = SharedQuestions(self.store, self.live)
            self.shared_queue = SharedQueue(self.store, self.owner)
        self.judge: Follower | None = None  # set by crow serve
        self.memory = MemoryRelease(lambda: not self.live)
        close_interrupted_turns(store)  # before serving anyone: one quick query when clean

    # ---- wiring -----------------------------------------------------------------
    @property
    def prompt_caps(self) -> schema.PromptCapabilities:
        """What prompts may hold: what the first model takes, as its server
        described it once it was asked (models.discovery), else as configured."""
        return prompt_capabilities(self.router.spec(self.config.chain[0]).capabilities)

    def capabilities(self) -> schema.AgentCapabilities:
        return schema.AgentCapabilities(
            session=schema.SessionCapabilities(
                prompt=self.prompt_caps,
                mcp=mcp_capabilities(self.config),
                delete=schema.SessionDeleteCapabilities(),
                additional_directories=schema.SessionAdditionalDirectoriesCapabilities(),
            ),
            # Crow's resumable cursor, and whether its judge verifies sessions (crow/verify)
            meta={"crow/replayFrom": list(SUPPORTED_REPLAY), VERIFY: self.judge is not None},
        )

    def attach(self, side: AgentSide, *, follower: bool = False) -> Watcher:
        """Serve ACP v2 on one connection; ``detach`` its watcher when it ends.
        A ``follower`` connection (the resident judge's) holds no session."""
        self.follow_store()
        watcher = V2Watcher(side, follower=follower)
        handlers: dict[str, Any] = {
            "session/new": self.new_session,
            "session/list": self.list_sessions,
            "session/resume": self.resume_session,
            "session/close": self.close_session,
            "session/delete": self.delete_session,
            "session/prompt": self.prompt,
            "session/cancel": self.cancel,
            "session/set_config_option": self.set_config_option,
            POST_VERDICT: self.post_verdict,
            POST_JUDGING: self.judging_started,
        }
        for method, handler in handlers.items():
            side.handle(method, _bind(handler, watcher))
        if self.config.tools.acp_servers and not follower:
            from crow.tools.acp_mcp import AcpMcpLinks

            links = watcher.mcp_links = AcpMcpLinks(side.peer)
            side.handle("mcp/message", lambda params: links.on_request(params.model_extra))
            side.handle_notification(
                "mcp/message", lambda params: links.on_notification(params.model_extra)
            )
        return watcher

    # ---- other servers on a shared store --------------------------------------------
    def follow_store(self) -> None:
        """On a shared store, hear the updates other servers log (crow.store.listen)."""
        if not self.store.shared or self._listener is not None:
            return
        from crow.store.listen import follow_updates

        url = self.store.sync.url  # type: ignore[attr-defined]
        assert self.shared_questions is not None
        heard = follow_updates(
            url,
            self._heard,
            self._heard_everything,
            self._heard_cancel,
            self.shared_questions.heard,
            self._heard_held,
        )
        self._listener = asyncio.create_task(heard, name="store-listener")
        self.spawn(self._close_orphans(), name="orphan-sweeper")

    async def _close_orphans(self) -> None:
        """On a shared store, close the turns of servers that died, without waiting for
        a client to touch the session: those watching elsewhere see the turn end."""
        assert self.shared_queue is not None
        while True:
            await asyncio.sleep(ORPHAN_SWEEP_S)
            try:
                await self.store.submit(close_interrupted_turns, self.store.sync)
                moved = await self.shared_queue.keep()  # ours renewed, the dead's dropped
            except StoreError as exc:
                log.warning("closing interrupted turns failed: %s", exc)
                continue
            for session_id in moved:
                self._heard_held(session_id)

    def _heard(self, session_id: str, seq: int) -> None:
        session = self.live.get(session_id)
        if session is not None and seq > session.delivered:
            self._catch_up(session)

    def _heard_held(self, session_id: str) -> None:
        """The session's held prompts changed somewhere: show them, and insert ours if
        it is now our turn."""
        session = self.live.get(session_id)
        if session is not None:
            self._show_queue(session)
            self.advance(session)

    def _heard_everything(self) -> None:
        for session in list(self.live.values()):
            self._catch_up(session)

    def _catch_up(self, session: LiveSession) -> None:
        """One catch-up task per session at a time; news during it runs it again."""
        if session.catching_up is not None and not session.catching_up.done():
            session.more_to_catch = True
            return

        async def catch_up() -> None:
            session.more_to_catch = True
            while session.more_to_catch:
                session.more_to_catch = False
                try:
                    await session.catch_up()
                except StoreUnavailable as exc:
                    log.warning("catching up session %s failed: %s", session.id, exc)
            if session.held:
                self.advance(session)  # another server's turn may have ended

        session.catching_up = self.spawn(catch_up(), name=f"catch-up-{session.id}")

    def detach(self, watcher: Watcher) -> None:
        """A connection has gone: its sessions stop sending to it, and those
        nobody watches any more are unloaded once idle (a running turn goes on)."""
        for session in list(self.live.values()):
            if session.judge is watcher:
                session.judge = None
                closing = verdicts.close_judging(self, session, "failed")  # it stopped
                self.spawn(closing, name=f"judge-gone-{session.id}")
            if watcher in session.watchers:
                session.watchers.discard(watcher)
                self.unload_if_unwatched(session)

    async def shutdown(self, grace_s: float = 0.0) -> None:
        """Let running turns finish for up to ``grace_s`` (a server stopping on
        SIGTERM: its clients resume elsewhere and watch the turn end there), then
        cancel the rest; each ends with idle/cancelled in the store.  Once only."""
        if self._shut_down:
            return
        self._shut_down = True
        report_if_slow(grace_s + REPORT_AFTER_S)
        self.memory.close()
        running = [s.turn.task for s in self.live.values() if s.turn and s.turn.task]
        if grace_s > 0 and (running := [t for t in running if not t.done()]):
            log.warning("waiting up to %.0f s for %d running turns", grace_s, len(running))
            await asyncio.wait(running, timeout=grace_s)
        if self._listener is not None:
            self._listener.cancel()
        if self.shared_questions is not None:
            await self.shared_questions.aclose()
        if self.judge is not None:
            await self.judge.aclose()
        for session in self.live.values():
            session.held.withdraw("the server is shutting down: send it again once resumed")
        turns = [s.turn for s in self.live.values() if s.turn is not None and not s.turn.done]
        for turn in turns:
            turn.cancel("shutdown")
        if turns:
            await asyncio.wait([t.task for t in turns if t.task], timeout=SHUTDOWN_TURN_WAIT_S)
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*(s.close_tools() for s in self.live.values()))
        await self.router.aclose()
        await self.store.drain()  # the queued writes are done

    # ---- sessions -----------------------------------------------------------------
    async def new_session(
        self, watcher: Watcher, params: schema.NewSessionRequest
    ) -> schema.NewSessionResponse:
        cwd = _existing_directory(_absolute(params.cwd, "cwd"), "cwd")
        dirs = [
            _existing_directory(d, "additionalDirectories")
            for d in _directories(params.additional_directories)
        ]
        servers = self._client_servers(params.mcp_servers)
        verify = self._verify_setting(params.meta)
        self._check_session_limit(watcher)
        config: dict[str, Any] = {"model": self.config.chain[0]}
        if verify:
            config.update(verify=verify, judgedSeq=0)
        record = await self.store.create_session(
            session_id=new_id("sess"),
            cwd=cwd,
            now=now(),
            additional_directories=dirs,
            config=config,
        )
        session = self.activate(record)
        session.watchers.add(watcher)
        self._start_tools(session, servers, dirs, watcher)
        await self._judge_if_verified(session)
        self.spawn(session.emit(commands.available_commands_update()), name="announce-commands")
        response = schema.NewSessionResponse(
            session_id=record.id,
            config_options=self.config_options(session),
            available_commands=commands.available_commands(),
        )
        if (keys := verdicts.handout(session)) is not None:
            response.meta = keys
        return response

    async def list_sessions(
        self, watcher: Watcher, params: schema.ListSessionsRequest
    ) -> schema.ListSessionsResponse:
        cwd = None if params.cwd in (schema.UNSET, None) else _absolute(params.cwd, "cwd")
        cursor = None if params.cursor in (schema.UNSET, None) else params.cursor
        try:
            records, next_cursor = await self.store.list_sessions(cwd=cwd, cursor=cursor)
        except StoreUnavailable:
            raise
        except StoreError as exc:
            raise InvalidParams(str(exc), data={"cursor": cursor}) from None
        response = schema.ListSessionsResponse(sessions=[_info(r) for r in records])
        if next_cursor is not None:
            response.next_cursor = next_cursor
        return response

    async def resume_session(
        self, watcher: Watcher, params: schema.ResumeSessionRequest
    ) -> schema.ResumeSessionResponse:
        record = await self.store.get_session(params.session_id)
        if record is None:
            raise SessionNotFound(params.session_id)
        if params.cwd != record.cwd:
            raise InvalidParams(
                f"cwd {params.cwd} is not this session's cwd ({record.cwd})",
                data={"cwd": params.cwd, "sessionCwd": record.cwd},
            )
        replay = _replay_cursor(params.replay_from)
        servers = self._client_servers(params.mcp_servers)
        dirs = _directories(params.additional_directories)
        verify = self._verify_setting(params.meta)
        session = self.live.get(record.id)
        if (session is None or watcher not in session.watchers) and not watcher.follower:
            self._check_session_limit(watcher)
        if session is None:
            session = await self._load(record)
        if watcher.follower:  # the judge reads; it leaves tools and settings alone
            await session.attach(watcher, replay)
            return schema.ResumeSessionResponse()
        judging = verdicts.judging(params.meta)
        if judging:
            verdicts.may_judge(self, session, watcher, verify)
        if dirs != session.record.additional_directories:
            await self.store.update_session(record.id, additional_directories=dirs)
        if not session.busy:  # the complete new set of servers and roots (§5.3)
            self._start_tools(session, servers, dirs, watcher)
        await session.attach(watcher, replay)
        if session.held:  # the queue as it is now (a replay has none of its history)
            update = session.held.snapshot(watcher)
            watcher.deliver(session.id, None, update, orjson.dumps(update))
        await self._judge_if_verified(session, verify)
        if judging:
            session.judge = watcher
            await verdicts.ensure_key(self, session, verdicts.EXTERNAL)
        response = schema.ResumeSessionResponse(
            config_options=self.config_options(session),
            available_commands=commands.available_commands(),
        )
        if (keys := verdicts.handout(session)) is not None:
            response.meta = keys
        return response

    async def close_session(self, watcher: Watcher, params: schema.CloseSessionRequest) -> None:
        """Detach the caller; the last watcher to leave also ends the turn and
        unloads the session (its tool servers stop)."""
        session = self.live.get(params.session_id)
        if session is None:
            return  # unknown or already closed: success (§5.4)
        if session.judge is watcher:
            session.judge = None
        if _clients(session.watchers - {watcher}):
            session.held.withdraw("its client closed the session", watcher)
            session.watchers.discard(watcher)
            return  # others still watch: their turn goes on
        session.held.withdraw("the session was closed (session/close)")
        await session.end_turn("session/close")  # the caller sees the turn end first
        session.watchers.discard(watcher)
        self.unload_if_unwatched(session)

    async def delete_session(self, watcher: Watcher, params: schema.DeleteSessionRequest) -> None:
        session = self.live.pop(params.session_id, None)
        if session is not None:
            session.held.withdraw("the session was deleted")
            await session.end_turn("session/close")
            session.watchers.clear()
            await session.close_tools()
            self._maybe_quiet()
        await self.store.delete_session(params.session_id)

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
        session.record = replace(session.record, config={**session.record.config, "model": model})
        await self.store.update_session(session.id, config=session.record.config)
        await session.emit(
            {
                "sessionUpdate": "config_option_update",
                "configOptions": [o.to_wire() for o in self.config_options(session)],
            }
        )

    # ---- prompts ------------------------------------------------------------------
    async def prompt(self, watcher: Watcher, params: schema.PromptRequest) -> schema.PromptResponse:
        meta = params.meta if isinstance(params.meta, dict) else {}
        origin = meta.get(FROM) if isinstance(meta.get(FROM), str) else None
        session = self.live_session(params.session_id)
        if origin is not None and not verdicts.is_judge(self, session, watcher):
            origin = None  # only the judge's own prompts are shown as the judge's
        mode = insert_mode(meta, self.config.session.while_busy)
        taken = await self.take_prompt(session, watcher, params.prompt, origin=origin, mode=mode)
        return schema.PromptResponse(message_id=taken.message_id)

    async def take_prompt(
        self,
        session: LiveSession,
        watcher: Watcher,
        blocks: list[Any],
        *,
        origin: str | None = None,
        mode: str = "queue",
    ) -> Turn | Steered:
        """Insert a prompt (crow.agent.queue): a turn of its own now, or once the turns
        and the prompts held before it are done ("queue"), or into the running turn
        ("steer"); "reject" refuses it while the session is busy.  Returns the turn it
        started, or what was steered; raises RequestCancelled if it was withdrawn."""
        if not session.busy and not session.held and await self._free_elsewhere(session):
            try:
                return await self.start_turn(session, blocks, origin=origin)
            except InvalidParams as exc:
                if not (self.store.shared and mode == "queue" and _elsewhere(exc)):
                    raise  # a turn on another server took it first: wait behind it
        elif mode == "reject":
            raise _busy(session.id)
        content = self._user_content(blocks)  # a refused prompt is refused now, not held
        turn = session.turn
        if mode == "steer" and turn is not None and turn.takes_steers:
            return Steered(await turn.steer(blocks, content, origin))
        if mode != "queue" and not self.store.shared:
            raise _busy(session.id)  # (steering a turn that is ending: refused as busy)
        return await self._hold(session, watcher, blocks, origin)

    async def _free_elsewhere(self, session: LiveSession) -> bool:
        """On a shared store: no turn runs on another server and none holds prompts
        for the session (they come first).  Always true on a file."""
        if self.shared_queue is None:
            return True
        return session.state == "idle" and not await self.shared_queue.rows(session.id)

    async def _hold(
        self, session: LiveSession, watcher: Watcher, blocks: list[Any], origin: str | None
    ) -> Turn:
        """Hold a prompt until the session is free and it is first; then insert it."""
        text = " ".join(b.text for b in blocks if getattr(b, "type", None) == "text")
        held = session.held.hold(new_id("msg"), watcher, _sender(watcher), text)
        try:
            if self.shared_queue is not None:
                await self.shared_queue.file(session, held)
            self._show_queue(session)
            self.advance(session)  # free meanwhile (a turn elsewhere just ended)
            while True:
                await held.wake
                if not session.held.drop(held):
                    raise RequestCancelled("The held prompt was withdrawn")
                try:
                    return await self.start_turn(
                        session, blocks, origin=origin, message_id=held.message_id
                    )
                except InvalidParams as exc:
                    data = exc.data if isinstance(exc.data, dict) else {}
                    if data.get("reason") != "busy" or (
                        data.get("elsewhere") and not self.store.shared
                    ):
                        raise  # refused; or another process on this file runs a turn
                    session.held.put_back(held)  # another turn came first: wait for its end
                    held.again()
        finally:
            session.held.drop(held)
            if self.shared_queue is not None:
                await self.shared_queue.drop(session, held)  # (announced to every server)
            else:
                self._show_queue(session)
            self.advance(session)

    def advance(self, session: LiveSession) -> None:
        """The session may be free: the first held prompt inserts itself (on a shared
        store: if it is the first of every server's)."""
        if session.busy or not session.held:
            return
        if self.shared_queue is None:
            session.held.wake_first()
        else:
            self.spawn(self._advance_shared(session), name=f"advance-{session.id}")

    async def _advance_shared(self, session: LiveSession) -> None:
        assert self.shared_queue is not None
        first = await self.shared_queue.first(session.id)
        if session.busy or session.state != "idle" or not session.held.items:
            return
        if session.held.items[0].message_id == first:
            session.held.wake_first()

    def _show_queue(self, session: LiveSession) -> None:
        """Every watcher is shown the held prompts (live only, never logged); on a
        shared store, those of every server."""
        if self.shared_queue is not None:
            self.spawn(self._show_shared_queue(session), name=f"queue-{session.id}")
            return
        for watcher in list(session.watchers):
            if not watcher.follower:
                update = session.held.snapshot(watcher)
                watcher.deliver(session.id, None, update, orjson.dumps(update))

    async def _show_shared_queue(self, session: LiveSession) -> None:
        assert self.shared_queue is not None
        rows = [(r.id, r.sender, r.preview) for r in await self.shared_queue.rows(session.id)]
        for watcher in list(session.watchers):
            if not watcher.follower:
                update = session.held.snapshot_of(rows, watcher)
                watcher.deliver(session.id, None, update, orjson.dumps(update))

    def _user_content(self, blocks: list[Any]) -> list[dict[str, Any]]:
        return to_user_content(
            blocks, self.prompt_caps, max_bytes=self.config.limits.max_prompt_bytes
        )

    async def start_turn(
        self,
        session: LiveSession,
        blocks: list[Any],
        *,
        origin: str | None = None,
        message_id: str | None = None,
    ) -> Turn:
        """Start a prompt turn (v2 ContentBlock models); it runs until idle.

        Raises InvalidParams if the session is busy (here or in another
        process) or a block is refused.  ``origin`` (a prompt's ``_meta["crow/from"]``,
        e.g. "judge") is shown on its ``user_message``.  Once this returns, the prompt is
        acknowledged and its turn ends in ``idle`` whatever happens; the turn's
        first update goes out after this returns.
        """
        if session.busy:
            raise _busy(session.id)
        content = self._user_content(blocks)
        # Busy from here: a prompt right behind this one is held (or refused), and a
        # cancel or close that comes meanwhile applies to this turn.
        starting = session.starting = asyncio.get_running_loop().create_future()
        started = False
        try:
            await self._take_lease(session)
            turn = session.turn = Turn(
                self,
                session,
                message_id=message_id or new_id("msg"),
                blocks=blocks,
                content=content,
            )
            turn.origin = origin
            turn.start().add_done_callback(lambda _: self.unload_if_unwatched(session))
            started = True
            if session.cancel_on_start is not None:
                turn.cancel(session.cancel_on_start)
        finally:
            session.starting, session.cancel_on_start = None, None
            starting.set_result(None)
            if not started:
                self.advance(session)  # nothing was inserted: the next held prompt may be
        self._keep_leases()
        return turn

    async def judging_started(self, watcher: Watcher, params: Any) -> dict[str, Any]:
        """``_crow/judging``: the session's judge starts on a turn (shown as background)."""
        return await verdicts.judging_started(self, watcher, params.model_extra or {})

    async def post_verdict(self, watcher: Watcher, params: Any) -> dict[str, Any]:
        """``_crow/verdict``: a judge's verdict on the session's last turn, for everyone."""
        return await verdicts.post_verdict(self, watcher, params.model_extra or {})

    async def cancel(self, watcher: Watcher, params: schema.CancelSessionNotification) -> None:
        session = self.live.get(params.session_id)
        if session is not None:
            session.held.withdraw("the session's turn was cancelled (session/cancel)")
        if session is not None and session.busy:
            session.cancel_turn("session/cancel")
        elif session is not None and self.store.shared and session.state != "idle":
            # The turn runs on another server (it holds the lease): ask it there.
            self.spawn(self.store.announce_cancel(session.id), name=f"cancel-{session.id}")

    def _heard_cancel(self, session_id: str) -> None:
        """Another server's client cancelled a turn: ours, if it runs here."""
        session = self.live.get(session_id)
        if session is not None and session.busy:
            session.cancel_turn("session/cancel")

    def learn_model(self, name: str) -> None:
        """Ask ``name``'s server what the model can do (router.describe), in the
        background: the first turn then need not wait for it, and the clients of a
        server started earlier get its figures in their ``initialize``."""
        self.spawn(self._describe(name), name=f"describe-{name}")

    async def _describe(self, name: str) -> None:
        with contextlib.suppress(ModelError):  # the turn that needs it will say
            await self.router.describe(name)

    # ---- live sessions ------------------------------------------------------------
    def spawn(self, coro: Any, *, name: str) -> asyncio.Task[Any]:
        """Work that outlives the request that started it (cancelled at shutdown)."""
        task = asyncio.create_task(coro, name=name)
        self._background.add(task)
        task.add_done_callback(self._finished)
        return task

    def _finished(self, task: asyncio.Task[Any]) -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("%s failed", task.get_name(), exc_info=task.exception())

    async def _load(self, record: SessionRecord) -> LiveSession:
        """Make a stored session live, closing first a turn its dead owner left.  A
        turn another live server runs: on a shared store its clients here watch it
        (and cannot prompt until it ends); on a file no update would reach them."""
        elsewhere = record.owner is not None and record.owner != self.owner
        if elsewhere and not is_orphaned(record) and not self.store.shared:
            raise InvalidParams(
                f"Session {record.id} is running a turn in another Crow process "
                f"(pid {record.owner_pid}): wait for it to finish",
                data={"sessionId": record.id, "reason": "busy"},
            )
        if is_orphaned(record):
            await self.store.submit(close_interrupted_turns, self.store.sync)
            record = await self.store.get_session(record.id) or record
        live = self.live.get(record.id)
        if live is not None or self.shared_questions is None:
            return live or self.activate(record)
        # A shared store: other servers append too.  Live updates start after what
        # the log holds now; the questions already open there are asked here too.
        delivered = await self.store.last_seq(record.id)
        live = self.live.get(record.id)  # made live meanwhile
        if live is not None:
            return live
        session = self.activate(record)
        session.delivered = delivered
        await self.shared_questions.pick_up(session.id)
        return session

    def activate(self, record: SessionRecord) -> LiveSession:
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
        if self.shared_questions is not None:
            session.remote_askers = self.shared_questions.asker(record.id)
        self.live[record.id] = session
        return session

    def unload_if_unwatched(self, session: LiveSession) -> None:
        """No client watches and nothing runs: free the session (it reloads on
        resume); a follower watching it stops."""
        if _clients(session.watchers) or session.busy or self.live.get(session.id) is not session:
            return
        del self.live[session.id]
        session.watchers.clear()
        if self.judge is not None:
            self.judge.unfollow(session.id)
        self.spawn(session.close_tools(), name=f"unload-{session.id}")
        self._maybe_quiet()

    def _maybe_quiet(self) -> None:
        """The last live session has gone: give the memory it used back soon."""
        if not self.live and not self._shut_down:
            self.memory.quiet()

    def _client_servers(self, servers: Any) -> list[Any]:
        return client_servers(servers, self.config, allowed=self.clients_authenticated)

    def _start_tools(
        self, session: LiveSession, servers: list[Any], dirs: list[str], watcher: Watcher
    ) -> None:
        """Start the session's tool servers unless the same set already runs: a
        resume that names the same servers and roots keeps them (and their
        background jobs).  A replaced set is closed in the background, so a
        cancelled resume never leaves the session without tools."""
        setup = (tuple(servers), tuple(dirs))
        if session.tools is not None and session.tool_setup == setup:
            return
        old = session.detach_tools()
        start_tools(session, self.config, servers, dirs, getattr(watcher, "mcp_links", None))
        self.learn_model(session.model)  # while the tool servers start
        session.tool_setup = setup
        if old is not None:
            self.spawn(old, name=f"retool-{session.id}")

    # ---- verifying ----------------------------------------------------------------
    def _verify_setting(self, meta: Any) -> dict[str, Any] | None:
        return verdicts.verify_setting(meta, authenticated=self.clients_authenticated)

    async def _judge_if_verified(
        self, session: LiveSession, setting: dict[str, Any] | None = None
    ) -> None:
        """Store a new verify ``setting`` (None: unchanged); then the resident judge
        follows the session if it is to be verified, and stops following if not.
        Verifying starts with the next turn: the history is taken as judged."""
        config = session.record.config
        if setting is not None:
            config = {**config, "verify": setting}
        verified = verdicts.resident_verifies(config, self.config.judge.every_session)
        if verified and "judgedSeq" not in config:
            last = await self.store.submit(self.store.sync.last_seq, session.id)
            config = {**config, "judgedSeq": last}
        if config is not session.record.config:
            session.record = replace(session.record, config=config)
            await self.store.update_session(session.id, config=config)
        if verified:
            session.judge = None  # crow serve's own judge takes over from a client's
            await verdicts.ensure_key(self, session, verdicts.RESIDENT)
        if self.judge is None:
            return
        if verified:
            self.judge.follow(session)
        else:
            self.judge.unfollow(session.id)

    # ---- the turn lease -----------------------------------------------------------
    async def _take_lease(self, session: LiveSession) -> None:
        """Take the session's turn lease, or raise busy if a live process has it."""
        taken = await self._acquire(session.id)
        if not taken:
            record = await self.store.get_session(session.id)
            if record is not None and is_orphaned(record):
                await self.store.submit(close_interrupted_turns, self.store.sync)
                taken = await self._acquire(session.id)
        if not taken:
            raise _busy(session.id, elsewhere=True)

    async def _acquire(self, session_id: str) -> bool:
        """Acquire; if the prompt is withdrawn meanwhile, give the lease back."""
        attempt = self.store.acquire_turn(
            session_id, owner=self.owner, pid=os.getpid(), expires=expiry()
        )
        taken, cancelled = await settled(attempt)
        if cancelled:
            if taken:
                self.spawn(self.store.release_turn(session_id, owner=self.owner), name="release")
            raise asyncio.CancelledError
        return taken

    def _keep_leases(self) -> None:
        if self._lease_keeper is None or self._lease_keeper.done():
            self._lease_keeper = asyncio.create_task(self._renew_leases(), name="lease-keeper")
            self._background.add(self._lease_keeper)
            self._lease_keeper.add_done_callback(self._finished)

    async def _renew_leases(self) -> None:
        """Renew this process's leases while any of its turns runs."""
        while any(s.busy for s in self.live.values()):
            await asyncio.sleep(RENEW_EVERY_S)
            try:
                await self.store.renew_leases(self.owner, expiry())
            except StoreUnavailable as exc:
                log.warning("could not renew turn leases: %s", exc)

    # ---- helpers ------------------------------------------------------------------
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
            schema.SessionConfigSelectOption(
                value=name, name=name, description=_describe(self.router.spec(name))
            )
            for name in self.config.models
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


def _clients(watchers: set[Watcher]) -> bool:
    """Whether any of ``watchers`` is a client (not a follower)."""
    return any(not w.follower for w in watchers)


def _busy(session_id: str, *, elsewhere: bool = False) -> InvalidParams:
    where = " in another Crow process" if elsewhere else ""
    data: dict[str, Any] = {"sessionId": session_id, "reason": "busy"}
    if elsewhere:
        data["elsewhere"] = True
    return InvalidParams(
        f"The session is busy with a prompt{where}: wait for idle or send session/cancel",
        data=data,
    )


def _elsewhere(exc: InvalidParams) -> bool:
    """A busy refusal because another process runs the session's turn."""
    return isinstance(exc.data, dict) and bool(exc.data.get("elsewhere"))


def _sender(watcher: Watcher) -> str:
    """Who a watcher's prompts are from, as its client named itself."""
    info = getattr(getattr(watcher, "side", None), "client_info", None)
    name = getattr(info, "name", None) or getattr(watcher, "client_name", None)
    return str(name) if name else "a client"


class Steered:
    """A prompt put into the running turn."""

    __slots__ = ("message_id",)

    def __init__(self, message_id: str) -> None:
        self.message_id = message_id


def _bind(handler: Any, watcher: Watcher) -> Any:
    async def bound(params: Any) -> Any:
        try:
            return await handler(watcher, params)
        except StoreUnavailable as exc:
            raise InternalError(f"{exc}: try again shortly") from None

    return bound


def _absolute(path: Any, field: str) -> str:
    if not isinstance(path, str) or not os.path.isabs(path) or not _storable(path):
        raise InvalidParams(
            f"{field} must be an absolute path, got {path!r}", data={field: ascii(path)}
        )
    return os.path.normpath(path)


def _existing_directory(path: str, field: str) -> str:
    """A new session's directories must exist: a typo would otherwise be stored
    and confine its tools to nothing."""
    if not os.path.isdir(path):
        raise InvalidParams(f"{field} {path} is not an existing directory", data={field: path})
    return path


def _storable(text: str) -> bool:
    """No NUL and valid UTF-8 (a lone surrogate cannot be stored or sent back)."""
    if "\0" in text:
        return False
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


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
    judged = record.config.get("judgeOf")
    if isinstance(judged, str):  # a judge session: crow sessions hides it by default
        info.meta = {JUDGE_OF: judged}
    return info


def _describe(spec: Any) -> str:
    caps = ", ".join(sorted(spec.capabilities)) or "text only"
    return f"{spec.model_id} ({caps}; {spec.context_window} tokens)"
