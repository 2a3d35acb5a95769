"""This server among others on one store: turn leases, other servers' news, orphans.

One turn runs per session across processes: a prompt takes the session's lease in
the store before it is acknowledged (``crow.store.lease``), and the server renews
its leases while any of its turns runs.  On a file store that is all.

On a shared (PostgreSQL) store other servers append to the same sessions.  A
server hears what they log (``crow.store.listen``) and sends its watchers what
they have not seen (``LiveSession.catch_up``, one task per session at a time);
hears cancels, permission questions (crow.agent.shared_questions) and held prompts
(crow.agent.shared_queue) of the others; and every ``[server] orphan_sweep_s`` closes
the turns of servers that died, so those watching elsewhere see the turn end.  While
a prompt is held here behind another server's turn, that server is looked at far
more often (``watch_turn_elsewhere``): its death lets the prompt in at once, not at
the next sweep.  News of a session parked here brings it back first
(crow.agent.parking).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from typing import Any, Protocol

from crow.acp import InvalidParams
from crow.store.aio import settled
from crow.store.db import SessionRecord, StoreError, StoreUnavailable
from crow.store.lease import RENEW_EVERY_S, expiry
from crow.store.listen import Heard

from .host import SessionHost
from .recovery import close_interrupted_turns, is_orphaned
from .session import LiveSession
from .shared_questions import SharedQuestions
from .shared_queue import SharedQueue

__all__ = ["Cluster", "ClusterHost", "busy"]

log = logging.getLogger("crow.agent")

#: While a prompt is held here behind another server's turn, how often that server is
#: looked at (its process, on this host; its lease as last read, on another): a dead
#: one's turn is closed about this soon, not at the next sweep.
OWNER_CHECK_S = 0.1
#: ... and how often the lease is read again (renewed, or the turn now another's).
OWNER_READ_S = 1.0


class ClusterHost(SessionHost, Protocol):
    def show_queue(self, session: LiveSession) -> None:
        """Show every watcher the session's held prompts."""
        ...

    def wake(
        self,
        session_id: str,
        *,
        seq: int | None = None,
        then: Callable[[LiveSession], None] | None = None,
    ) -> bool:
        """News of a session (crow.agent.parking.Parking.wake): if it is parked here it
        comes back, and ``then`` is given it; whether it was parked."""
        ...

    def wake_grown(self) -> None:
        """After a lost connection to the store: the parked sessions whose log grew
        meanwhile come back."""
        ...


class Cluster:
    """The turn leases of this process, and (on a shared store) the other servers."""

    def __init__(self, host: ClusterHost, owner: str) -> None:
        self.host = host
        self.store = host.store
        self.owner = owner  # the name this process takes turn leases under
        self.questions: SharedQuestions | None = None
        self.queue: SharedQueue | None = None
        if self.store.shared:
            self.questions = SharedQuestions(self.store, host.live, host.wake)
            self.queue = SharedQueue(self.store, owner)
        self._listener: asyncio.Task[None] | None = None  # other servers' updates
        self._lease_keeper: asyncio.Task[None] | None = None
        self._owner_watches: dict[str, asyncio.Task[None]] = {}  # by session id
        self._sweep_lock = asyncio.Lock()
        self._sweeps = 0  # sweeps begun, to date

    # ---- other servers on a shared store --------------------------------------------
    def follow_store(self) -> None:
        """On a shared store, hear the updates other servers log (crow.store.listen)."""
        if self.questions is None or self._listener is not None:
            return
        heard = self.store.follow_updates(
            Heard(
                update=self._heard,
                reconnect=self._heard_everything,
                cancel=self._heard_cancel,
                question=self.questions.heard,
                held=self._heard_held,
                listening=self._listening,
            )
        )
        self._listener = asyncio.create_task(heard, name="store-listener")
        self.host.spawn(self._close_orphans(), name="orphan-sweeper")

    async def aclose(self) -> None:
        """Stop hearing the other servers (at shutdown)."""
        if self._listener is not None:
            self._listener.cancel()
        if self.questions is not None:
            await self.questions.aclose()

    async def _close_orphans(self) -> None:
        """On a shared store, close the turns of servers that died, without waiting for
        a client to touch the session: those watching elsewhere see the turn end."""
        while True:
            await asyncio.sleep(self.host.config.server.orphan_sweep_s)
            await self._sweep()

    async def _sweep(self) -> None:
        """Close the turns of dead servers and drop the prompts they held.  One sweep
        at a time; a call that waited for one begun after it was made is done (the
        held prompts of many sessions may find one dead server at once)."""
        assert self.queue is not None
        asked = self._sweeps
        async with self._sweep_lock:
            if self._sweeps > asked:
                return
            self._sweeps += 1
            try:
                await self.store.submit(close_interrupted_turns, self.store.sync)
                moved = await self.queue.keep()  # ours renewed, the dead's dropped
            except StoreError as exc:
                log.warning("closing interrupted turns failed: %s", exc)
                return
        for session_id in moved:
            self._heard_held(session_id)

    def watch_turn_elsewhere(self, session: LiveSession) -> None:
        """A prompt is held here: whenever the session's turn runs on another server
        meanwhile, look at that server often, and close its turn as soon as it is dead
        (the held prompt then goes in), not at the next sweep."""
        watch = self._owner_watches.get(session.id)
        if self.queue is None or (watch is not None and not watch.done()):
            return
        watch = self.host.spawn(self._watch_owner(session), name=f"owner-watch-{session.id}")
        self._owner_watches[session.id] = watch
        watch.add_done_callback(lambda done: self._watch_ended(session.id, done))

    def _watch_ended(self, session_id: str, watch: asyncio.Task[None]) -> None:
        if self._owner_watches.get(session_id) is watch:
            del self._owner_watches[session_id]

    async def _watch_owner(self, session: LiveSession) -> None:
        """While prompts are held here: sweep whenever a turn that runs elsewhere is
        orphaned, by the rule of every other look (``is_orphaned``).  The record last
        read is judged every ``OWNER_CHECK_S``; the store is read every
        ``OWNER_READ_S``, and as soon as that record looks orphaned."""
        record: SessionRecord | None = None
        read_at = float("-inf")
        while session.held:
            elsewhere = not session.busy and session.state != "idle"  # a turn, not ours
            looks_orphaned = record is not None and is_orphaned(record)
            if elsewhere and (looks_orphaned or time.monotonic() - read_at >= OWNER_READ_S):
                record, read_at = None, time.monotonic()
                try:
                    record = await self.store.get_session(session.id)
                except StoreError as exc:
                    log.warning("reading session %s failed: %s", session.id, exc)
                if record is not None and is_orphaned(record):
                    await self._sweep()
                    record = None  # closed (or being closed by another server)
            await asyncio.sleep(OWNER_CHECK_S)

    def _heard(self, session_id: str, seq: int) -> None:
        """An update logged, by any server: ours are sent by the turn that logged
        them, another's are read from the log.  Ours may be heard before the append
        comes back to the loop: while appends are under way, ask again after them."""
        session = self.host.live.get(session_id)
        if session is None:
            self.host.wake(session_id, seq=seq)  # parked here: back, and caught up
            return
        if seq <= max(session.delivered, self.store.logged_here(session_id)):
            return
        if not self.store.after_appends(lambda: self._heard(session_id, seq)):
            self._catch_up(session)

    def _listening(self, live: bool) -> None:
        if self.queue is not None:
            self.queue.listening(live)

    def _heard_held(self, session_id: str) -> None:
        """The session's held prompts changed somewhere: show them, and insert ours if
        it is now our turn."""
        if self.queue is not None:
            self.queue.heard(session_id)
        session = self.host.live.get(session_id)
        if session is None:
            self.host.wake(session_id, then=self._show_held)  # parked here: back first
        else:
            self._show_held(session)

    def _show_held(self, session: LiveSession) -> None:
        self.host.show_queue(session)
        self.host.advance(session)

    def _heard_everything(self) -> None:
        for session in list(self.host.live.values()):
            self._catch_up(session)
        self.host.wake_grown()

    def _heard_cancel(self, session_id: str) -> None:
        """Another server's client cancelled a turn: ours, if it runs here."""
        session = self.host.live.get(session_id)
        if session is not None and session.busy:
            session.cancel_turn("session/cancel")

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
                self.host.advance(session)  # another server's turn may have ended

        session.catching_up = self.host.spawn(catch_up(), name=f"catch-up-{session.id}")

    # ---- the turn lease -----------------------------------------------------------
    async def take_lease(self, session: LiveSession) -> None:
        """Take the session's turn lease, or raise busy if a live process has it."""
        taken = await self._acquire(session.id)
        if not taken:
            record = await self.store.get_session(session.id)
            if record is not None and is_orphaned(record):
                await self.store.submit(close_interrupted_turns, self.store.sync)
                taken = await self._acquire(session.id)
        if not taken:
            raise busy(session.id, elsewhere=True)

    async def _acquire(self, session_id: str) -> bool:
        """Acquire; if the prompt is withdrawn meanwhile, give the lease back."""
        attempt = self.store.acquire_turn(
            session_id, owner=self.owner, pid=os.getpid(), expires=expiry()
        )
        taken, cancelled = await settled(attempt)
        if cancelled:
            if taken:
                releasing = self.store.release_turn(session_id, owner=self.owner)
                self.host.spawn(releasing, name="release")
            raise asyncio.CancelledError
        return taken

    def keep_leases(self) -> None:
        """Renew this process's leases while any of its turns runs."""
        if self._lease_keeper is None or self._lease_keeper.done():
            self._lease_keeper = self.host.spawn(self._renew_leases(), name="lease-keeper")

    async def _renew_leases(self) -> None:
        while any(s.busy for s in self.host.live.values()):
            await asyncio.sleep(RENEW_EVERY_S)
            try:
                await self.store.renew_leases(self.owner, expiry())
            except StoreUnavailable as exc:
                log.warning("could not renew turn leases: %s", exc)


def busy(session_id: str, *, elsewhere: bool = False) -> InvalidParams:
    """The refusal of a prompt while the session's turn runs (here, or ``elsewhere``:
    in another process)."""
    where = " in another Crow process" if elsewhere else ""
    data: dict[str, Any] = {"sessionId": session_id, "reason": "busy"}
    if elsewhere:
        data["elsewhere"] = True
    return InvalidParams(
        f"The session is busy with a prompt{where}: wait for idle or send session/cancel",
        data=data,
    )
