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
- a session clients still have open is parked once idle for ``[server]
  unload_idle_s`` (crow.agent.parking), and comes back when a request names it
  (or, on a shared store, when another server writes to it);
- ``session/close`` detaches the caller; when the last watcher leaves, the
  running turn is cancelled and the session unloaded;
- ``session/cancel`` from any watcher cancels the turn; ``session/delete``
  ends everything.

The store is reached through ``AsyncStore`` only, so no store wait runs on the
event loop.  One turn runs per session across processes: a prompt takes the
session's lease in the store before it is acknowledged (``crow.store.lease``).

``CrowAgent`` is the hub: it holds the live sessions and the background tasks,
and wires its parts, which take it through the protocols of crow.agent.host:
the session methods (crow.agent.methods), inserting prompts (crow.agent.prompts),
leases and the other servers of a shared store (crow.agent.cluster), and verdicts
(crow.agent.verdicts).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from crow.acp import (
    AgentSide,
    InternalError,
    schema,
)
from crow.config import Config
from crow.extensions import (
    FROM,
    MEMORY_FORGET,
    MEMORY_REMEMBER,
    MEMORY_SEARCH,
    POST_JUDGING,
    POST_VERDICT,
    REPLAY_FROM,
    VERIFY,
)
from crow.models.errors import ModelError
from crow.models.router import ModelRouter
from crow.observe import tracing
from crow.runtime.quiet import MemoryRelease
from crow.runtime.slow_exit import REPORT_AFTER_S, report_if_slow
from crow.store.aio import AsyncStore
from crow.store.base import SessionStore
from crow.store.db import SessionRecord, Store, StoreUnavailable
from crow.store.lease import this_process
from crow.tools.acp_mcp import AcpMcpLinks

from . import verdicts
from .cluster import Cluster
from .content import prompt_capabilities
from .host import Follower
from .memory_panel import MemoryPanel
from .methods import SessionMethods, clients
from .params import (
    SUPPORTED_REPLAY,
    config_options,
)
from .prompts import Prompts
from .queue import insert_mode
from .recovery import close_interrupted_turns
from .session import LiveSession
from .tooling import mcp_capabilities
from .watchers import V2Watcher, Watcher

__all__ = ["CrowAgent", "Follower"]

log = logging.getLogger("crow.agent")

#: How long shutdown lets cancelled turns write their last updates.
SHUTDOWN_TURN_WAIT_S = 0.5


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
        self.store: SessionStore = AsyncStore(store)
        self.router = router or ModelRouter(config)
        self.owner = this_process()  # the name this process takes turn leases under
        self.live: dict[str, LiveSession] = {}
        self._background: set[asyncio.Task[Any]] = set()
        self._shut_down = False
        self.cluster = Cluster(self, self.owner)  # leases; the other servers of a shared store
        self.prompts = Prompts(self, self.cluster)
        self.methods = SessionMethods(self)
        self.judge: Follower | None = None  # set by crow serve
        self.memory = MemoryRelease(self._quiet)
        self.memory_panel = MemoryPanel(config, self.live_session)
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
            meta={REPLAY_FROM: list(SUPPORTED_REPLAY), VERIFY: self.judge is not None},
        )

    def attach(self, side: AgentSide, *, follower: bool = False) -> Watcher:
        """Serve ACP v2 on one connection; ``detach`` its watcher when it ends.
        A ``follower`` connection (the resident judge's) holds no session."""
        self.cluster.follow_store()
        watcher = V2Watcher(side, follower=follower)
        handlers: dict[str, Any] = {
            "session/new": self.methods.new_session,
            "session/list": self.methods.list_sessions,
            "session/resume": self.methods.resume_session,
            "session/close": self.methods.close_session,
            "session/delete": self.methods.delete_session,
            "session/prompt": self.prompt,
            "session/cancel": self.cancel,
            "session/set_config_option": self.methods.set_config_option,
            POST_VERDICT: self.post_verdict,
            POST_JUDGING: self.judging_started,
        }
        if not follower:  # a client's memory panel (crow.agent.memory_panel)
            panel = self.memory_panel
            handlers[MEMORY_SEARCH] = _extra(panel.search)
            handlers[MEMORY_REMEMBER] = _extra(panel.remember)
            handlers[MEMORY_FORGET] = _extra(panel.forget)
        for method, handler in handlers.items():
            side.handle(method, _bind(handler, watcher))
        if self.config.tools.acp_servers and not follower:
            links = watcher.mcp_links = AcpMcpLinks(side.peer)
            side.handle("mcp/message", lambda params: links.on_request(params.model_extra))
            side.handle_notification(
                "mcp/message", lambda params: links.on_notification(params.model_extra)
            )
        return watcher

    def detach(self, watcher: Watcher) -> None:
        """A connection has gone: its sessions stop sending to it, and those
        nobody watches any more are unloaded once idle (a running turn goes on)."""
        self.methods.forget(watcher)
        for session in list(self.live.values()):
            if session.judge is watcher:
                session.judge = None
                closing = verdicts.close_judging(self, session, "failed")  # it stopped
                self.spawn(closing, name=f"judge-gone-{session.id}")
            if watcher in session.watchers:
                session.watchers.discard(watcher)
                self.unload_if_unwatched(session, quiet=False)
        self.maybe_quiet()  # once: each check looks at every live session

    async def shutdown(self, grace_s: float = 0.0, hurry: asyncio.Event | None = None) -> None:
        """Let running turns finish for up to ``grace_s`` (a server stopping on
        SIGTERM: its clients resume elsewhere and watch the turn end there), or until
        ``hurry`` is set (Ctrl-C again), then cancel the rest; each ends with
        idle/cancelled in the store.  Once only."""
        if self._shut_down:
            return
        self._shut_down = True
        report_if_slow(grace_s + REPORT_AFTER_S)
        self.memory.close()
        running = [s.turn.task for s in self.live.values() if s.turn and s.turn.task]
        if grace_s > 0 and (running := [t for t in running if not t.done()]):
            again = " (Ctrl-C again cancels them)" if hurry is not None else ""
            log.warning("waiting up to %.0f s for %d running turns%s", grace_s, len(running), again)
            await _until_done_or(running, hurry, grace_s)
        await self.cluster.aclose()
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
        session = await self.live_session(params.session_id)
        if origin is not None and not verdicts.is_judge(self, session, watcher):
            origin = None  # only the judge's own prompts are shown as the judge's
        mode = insert_mode(meta, self.config.session.while_busy)
        with tracing.client_context(meta):  # the turn's task starts in it: its parent
            taken = await self.prompts.take_prompt(
                session, watcher, params.prompt, origin=origin, mode=mode
            )
        return schema.PromptResponse(message_id=taken.message_id)

    def advance(self, session: LiveSession) -> None:
        """The session may be free: its first held prompt goes in (crow.agent.prompts)."""
        self.prompts.advance(session)

    def show_queue(self, session: LiveSession) -> None:
        self.prompts.show_queue(session)

    def wake(
        self,
        session_id: str,
        *,
        seq: int | None = None,
        then: Callable[[LiveSession], None] | None = None,
    ) -> bool:
        """News of a session from the store: back if it was parked (crow.agent.parking)."""
        return self.methods.parking.wake(session_id, seq=seq, then=then)

    def wake_grown(self) -> None:
        self.spawn(self.methods.parking.wake_grown(), name="wake-grown")

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

    def learn_model(self, name: str) -> None:
        """Ask ``name``'s server what the model can do (router.describe), in the
        background: the first turn then need not wait for it, and the clients of a
        server started earlier get its figures in their ``initialize``."""
        if self.router.described(name):
            return  # (every session/new asks: a task each cost more than the check)
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
        if self.cluster.questions is not None:
            session.remote_askers = self.cluster.questions.asker(record.id)
        self.live[record.id] = session
        self.methods.parking.watch()
        return session

    def unload_if_unwatched(self, session: LiveSession, *, quiet: bool = True) -> None:
        """No client watches and nothing runs: free the session (it reloads on
        resume); a follower watching it stops.  ``quiet``: then give memory back if
        it was the last (a caller unloading many checks once, after them)."""
        if (
            clients(session.watchers)
            or session.busy
            or session.attaching
            or self.live.get(session.id) is not session
        ):
            return
        del self.live[session.id]
        session.watchers.clear()
        if self.judge is not None:
            self.judge.unfollow(session.id)
        self.spawn(session.close_tools(), name=f"unload-{session.id}")
        if quiet:
            self.maybe_quiet()

    def maybe_quiet(self) -> None:
        """The last live session has gone, or stopped its tool servers: give the
        memory they used back soon."""
        if self._quiet() and not self._shut_down:
            self.memory.quiet()

    def _quiet(self) -> bool:
        """No session holds tool servers or runs a turn (none may be live)."""
        return all(s.tools is None and not s.busy for s in self.live.values())

    # ---- helpers ------------------------------------------------------------------
    async def live_session(self, session_id: str) -> LiveSession:
        """The live session, brought back if it was parked (crow.agent.parking);
        raises SessionNotFound (-32002) if it is not open here."""
        return await self.methods.named(session_id)

    def config_options(self, session: LiveSession) -> list[schema.SessionConfigOption]:
        return config_options(self.config, self.router, session.model)


def _extra(handler: Any) -> Any:
    """A handler of a custom method, given its params as a dict."""

    async def extra(watcher: Watcher, params: Any) -> Any:
        return await handler(watcher, getattr(params, "model_extra", None) or {})

    return extra


def _bind(handler: Any, watcher: Watcher) -> Any:
    async def bound(params: Any) -> Any:
        try:
            return await handler(watcher, params)
        except StoreUnavailable as exc:
            raise InternalError(f"{exc}: try again shortly") from None

    return bound


async def _until_done_or(
    tasks: list[asyncio.Task[Any]], hurry: asyncio.Event | None, timeout: float
) -> None:
    """Wait for every task, for ``timeout`` at most, or until ``hurry`` is set."""
    finished = asyncio.ensure_future(asyncio.wait(tasks))
    waits: list[asyncio.Future[Any]] = [finished]
    if hurry is not None:
        waits.append(asyncio.ensure_future(hurry.wait()))
    try:
        await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()  # (the tasks themselves go on: the caller cancels them)
