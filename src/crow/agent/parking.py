"""Idle sessions that clients still have open, out of memory until one is named again.

A session idle for ``[server] unload_idle_s`` (no turn, nothing in the background, no
open question, no held prompt, no MCP servers its client named: what stops its tool
servers) is parked: its ``LiveSession`` goes, tool servers and all, and a handle of a
few hundred bytes stays.  The handle holds who watches it (the connections that have it
open, and a client judging it), where their updates stopped (the log's seq), and what
the store does not keep: its "always" permission answers for this session, the model
that last answered, whether its state updates list background work.

The next request that names it (a prompt, a config option, a verdict, a resume) brings
it back from the store with that handle: its watchers get its updates as before,
nothing is replayed to them, and its model, options, title, directories and commands
are the store's, as they were.  A connection that goes or closes it only leaves the
handle; the last one to leave drops it.

On a shared (PostgreSQL) store other servers write to the session while it is parked
here.  News of it (crow.agent.cluster) brings it back as a request would (``wake``):
an update another server logged past the handle's seq, a permission question filed on
it, a change to its held prompts.  Its watchers then get what was logged meanwhile,
each update once and in the log's order (a catch-up from the handle's seq), are asked
the open questions and shown the queue, as if it had stayed loaded.  After a lost
connection to the store (news may have been missed) each parked session whose log
grew comes back.  A parked session has nothing in the store's shared tables (no turn
lease, no held prompt, no question of ours), so another server takes a prompt sent to
it as it would anyway, and when this server dies its clients resume elsewhere as
before.

A session stays loaded, on either store, while:

- its state is not idle (on a shared store: a turn runs on another server).  Its
  updates would bring it back at once, and a ``session/cancel`` from its clients here
  reaches that turn only through the loaded session's state (CrowAgent.cancel);
- its log lock is held or a catch-up runs: the updates on their way would reach no
  watcher.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from crow.store.db import SessionRecord, StoreError
from crow.tools.permissions import Permissions

from .host import SessionHost
from .session import LiveSession
from .watchers import Watcher

__all__ = ["Parked", "Parking", "Returning", "parkable"]

log = logging.getLogger("crow.agent")

#: Given a session the moment it is live again, before anything can reach it.
Returning = Callable[[LiveSession], None]


@dataclass(slots=True, eq=False)
class Parked:
    """What a parked session keeps in memory."""

    watchers: set[Watcher]  # its clients (followers are told again on its return)
    judge: Watcher | None
    permissions: Permissions | None
    answered_by: str | None
    reports_background: bool
    delivered: int  # the last seq of its log its watchers were sent
    reviving: asyncio.Task[LiveSession | None] | None = None
    returned: bool = False  # the handle went back into a live session


class ParkingHost(SessionHost, Protocol):
    def maybe_quiet(self) -> None: ...


def parkable(session: LiveSession) -> bool:
    """Nothing runs or waits in the session, nothing is on its way to its watchers, a
    client watches it, and its tool servers are all Crow's own (a client's named
    servers keep their state)."""
    named = session.tool_setup is not None and bool(session.tool_setup[0])
    catching_up = session.catching_up is not None and not session.catching_up.done()
    return not (
        session.busy
        or session.state != "idle"  # (on a shared store: a turn on another server)
        or session.background
        or session.questions
        or session.held
        or session.attaching
        or session.log_lock.locked()
        or catching_up
        or named
    ) and any(not w.follower for w in session.watchers)


class Parking:
    """The parked sessions of one agent, and the sweep that parks idle ones.

    ``make_live(record, returning)`` makes a stored session live and hands it to
    ``returning`` at once (crow.agent.methods.SessionMethods.load); ``restart(session)``
    gives a returning session its tools and judge."""

    def __init__(
        self,
        host: ParkingHost,
        make_live: Callable[[SessionRecord, Returning], Awaitable[LiveSession]],
        restart: Callable[[LiveSession], Awaitable[None]],
    ) -> None:
        self.host = host
        self.make_live = make_live
        self.restart = restart
        self.parked: dict[str, Parked] = {}
        self._sweeper: asyncio.Task[None] | None = None

    def watch(self) -> None:
        """Park idle sessions from now on (called as sessions are made live)."""
        idle_s = self.host.config.server.unload_idle_s
        if self._sweeper is None and idle_s > 0:
            self._sweeper = self.host.spawn(self._sweep(idle_s), name="park-idle-sessions")

    async def _sweep(self, idle_s: float) -> None:
        """Every ``idle_s / 2``, park the sessions idle for ``idle_s`` at least."""
        while True:
            await asyncio.sleep(idle_s / 2)
            before = time.monotonic() - idle_s
            for session in list(self.host.live.values()):
                if session.active_at > before:
                    continue
                if parkable(session):
                    self.park(session)
                else:  # (one made live for a request whose client left meanwhile)
                    self.host.unload_if_unwatched(session)

    def park(self, session: LiveSession) -> None:
        if self.host.live.get(session.id) is not session:
            return
        del self.host.live[session.id]
        self.parked[session.id] = Parked(
            watchers={w for w in session.watchers if not w.follower},
            judge=session.judge,
            permissions=session.permissions,
            answered_by=session.answered_by,
            reports_background=session.reports_background,
            delivered=session.delivered,
        )
        session.watchers.clear()
        if self.host.judge is not None:
            self.host.judge.unfollow(session.id)
        self.host.spawn(session.close_tools(), name=f"park-{session.id}")
        log.info("session %s idle: unloaded until it is named again", session.id)
        self.host.maybe_quiet()

    def watched_by(self, session_id: str, watcher: Watcher) -> bool:
        parked = self.parked.get(session_id)
        return parked is not None and watcher in parked.watchers

    def leave(self, session_id: str, watcher: Watcher) -> None:
        """``watcher`` no longer has the parked session open; the last one drops it."""
        parked = self.parked.get(session_id)
        if parked is None:
            return
        parked.watchers.discard(watcher)
        if parked.judge is watcher:
            parked.judge = None
        if not parked.watchers:
            del self.parked[session_id]

    def drop(self, session_id: str) -> None:
        self.parked.pop(session_id, None)

    # ---- news from other servers (a shared store) -----------------------------------
    def wake(
        self,
        session_id: str,
        *,
        seq: int | None = None,
        then: Callable[[LiveSession], None] | None = None,
    ) -> bool:
        """News of a session from a shared store: another server logged its update
        ``seq``, or (``seq`` None) filed a question or changed its held prompts.  If it
        is parked here it comes back, in the background, so its watchers get the news;
        ``then`` is given it once back.  Returns whether it was parked."""
        parked = self.parked.get(session_id)
        if parked is None:
            return False
        if seq is not None and seq <= parked.delivered:
            return True  # its watchers have it already
        if parked.reviving is None or then is not None:  # (a return under way reads it)
            self.host.spawn(self._wake(session_id, then), name=f"wake-{session_id}")
        return True

    async def _wake(self, session_id: str, then: Callable[[LiveSession], None] | None) -> None:
        try:
            session = await self.revive(session_id)
        except StoreError as exc:  # the next news tries again, from the same seq
            log.warning("bringing session %s back for news failed: %s", session_id, exc)
            return
        if session is not None and then is not None:
            then(session)

    async def wake_grown(self) -> None:
        """After a lost connection to a shared store (news may have been missed): the
        parked sessions whose log grew meanwhile come back."""
        for session_id, parked in list(self.parked.items()):
            try:
                last = await self.host.store.last_seq(session_id)
            except StoreError as exc:
                log.warning("reading session %s failed: %s", session_id, exc)
                continue
            if self.parked.get(session_id) is parked:
                self.wake(session_id, seq=last)

    # ---- coming back --------------------------------------------------------------
    async def revive(self, session_id: str) -> LiveSession | None:
        """The session live again if it was parked (None if it is gone from the store
        meanwhile), else the live one, if any.  Requests that name it at once share
        one return."""
        parked = self.parked.get(session_id)
        if parked is None:
            session = self.host.live.get(session_id)
            if session is not None:  # named: not parked while the request is under way
                session.active_at = time.monotonic()
            return session
        if parked.reviving is None:
            parked.reviving = asyncio.ensure_future(self._revive(session_id, parked))
            parked.reviving.add_done_callback(lambda done: _retried(parked, done))
        return await asyncio.shield(parked.reviving)

    async def _revive(self, session_id: str, parked: Parked) -> LiveSession | None:
        record = await self.host.store.get_session(session_id)
        if record is None:  # deleted by another process
            if self.parked.get(session_id) is parked:
                del self.parked[session_id]
            return None
        session = await self.make_live(record, lambda fresh: self._unpark(parked, fresh))
        self._unpark(parked, session)  # (made live meanwhile, some other way)
        if self.host.store.shared:
            await session.catch_up()  # what other servers logged while it was parked
        await self.restart(session)
        log.info("session %s loaded again", session_id)
        return session

    def _unpark(self, parked: Parked, session: LiveSession) -> None:
        """The handle goes back into the session: before anything is sent to it or
        asked of it (another server's update, a question), so its watchers miss
        nothing; once only."""
        if parked.returned:
            return
        parked.returned = True
        if self.parked.get(session.id) is parked:
            del self.parked[session.id]
            if not session.watchers:  # (else those watching have more: none gets it twice)
                session.delivered = parked.delivered
            session.watchers |= parked.watchers
        session.judge = session.judge or parked.judge
        session.permissions = parked.permissions
        session.answered_by = parked.answered_by
        session.reports_background = parked.reports_background


def _retried(parked: Parked, done: asyncio.Task[Any]) -> None:
    """A return that failed (the store): the next request tries again."""
    if done.cancelled() or done.exception() is not None:
        parked.reviving = None
