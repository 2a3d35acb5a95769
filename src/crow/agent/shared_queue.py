"""Held prompts across the servers of a shared (PostgreSQL) store: one order for all.

A session's turn may run on server A while its clients on server B prompt it.  B
holds such a prompt (crow.agent.queue) and files it in the store's
``held_prompts``, last in the session's order; every server hears of each change
(``crow_held``, crow.store.listen).  When the session is free (A's ``idle``, heard
on B through the update log), the server holding the *first* prompt in the store's
order inserts it: it takes the turn's lease, as any prompt does, and answers its
request.  So the order is the arrival order at the store, whichever server each
prompt came through; every server shows its clients the whole queue.

Every prompt asks whether the session holds prompts elsewhere (they come first),
a round trip to the store.  Almost always it holds none, and any change to that is
announced, so a session read to hold none is kept so (``rows``) until a change to
its held prompts is heard, while the server listens (crow.store.listen): a row that
expires leaves it holding none still.

The server holding a prompt renews its row while it lives.  A server that dies
(kill -9) leaves rows nobody can answer: their requests died with its connections,
and their clients see those connections close, with nothing inserted.  The next
sweep (every few seconds, on every server) drops such rows at once when the dead
server was on the same host, and once they expire (``HELD_S``) when it was not; the
prompts behind them move up.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING

from crow.store.db import HeldRow, StoreError
from crow.store.lease import owner_alive, this_process

if TYPE_CHECKING:
    from crow.store.base import SessionStore

    from .queue import Held
    from .session import LiveSession

__all__ = ["HELD_S", "SharedQueue"]

log = logging.getLogger("crow.agent")

#: How long a held prompt's row lasts unrenewed (its server renews it every sweep).
HELD_S = 30.0


class SharedQueue:
    """One server's side of the held prompts of a shared store."""

    def __init__(self, store: SessionStore, owner: str) -> None:
        self.store = store
        self.owner = owner
        # Sessions read to hold no prompt, and not changed since, as far as we heard:
        # kept only while every change is heard (``listening``).
        self._none_held: set[str] = set()
        self._listening = False
        self._news = 0  # changes heard (and listening gained or lost), to date

    def listening(self, live: bool) -> None:
        """Whether every change to held prompts is heard from now on (crow.store.listen)."""
        self._listening = live
        self._news += 1
        self._none_held.clear()

    def heard(self, session_id: str) -> None:
        """The session's held prompts changed (on any server, this one included)."""
        self._news += 1
        self._none_held.discard(session_id)

    async def file(self, session: LiveSession, held: Held) -> None:
        """File ``held`` last in the session's order."""
        await self.store.hold_prompt(
            held.message_id,
            session.id,
            owner=self.owner,
            sender=held.sender,
            preview=held.preview,
            expires=time.time() + HELD_S,
        )
        self.heard(session.id)  # before its announcement comes back

    async def drop(self, session: LiveSession, held: Held) -> None:
        """Take ``held``'s row out (inserted or withdrawn), whatever cancels the caller."""
        dropping = asyncio.ensure_future(self.store.drop_held(held.message_id, session.id))
        with contextlib.suppress(StoreError, asyncio.CancelledError):
            await asyncio.shield(dropping)
        self.heard(session.id)

    async def rows(self, session_id: str) -> list[HeldRow]:
        """The session's held prompts, on every server, in order: none without a read
        while the session is known to hold none."""
        if session_id in self._none_held:
            return []
        news = self._news
        rows = await self.store.held_prompts(session_id, time.time())
        if not rows and self._listening and news == self._news:  # nothing heard meanwhile
            self._none_held.add(session_id)
        return rows

    async def first(self, session_id: str) -> str | None:
        """The id of the prompt to insert next, on whichever server holds it."""
        rows = await self.rows(session_id)
        return rows[0].id if rows else None

    async def keep(self) -> list[str]:
        """Renew our rows; drop those of dead servers.  The sessions whose queue moved."""
        now = time.time()
        await self.store.renew_held(self.owner, now + HELD_S)
        owners = await self.store.submit(self.store.sync.held_owners)
        dead = [o for o in owners if o != self.owner and not owner_alive(o, None, now=now)]
        # An owner elsewhere cannot be checked: its rows go when they expire.
        dead = [o for o in dead if _same_host(o)]
        moved: list[str] = await self.store.submit(self.store.sync.drop_held_of, dead, now)
        for session_id in moved:
            self.heard(session_id)
        return moved


def _same_host(owner: str) -> bool:
    return owner.partition(":")[0] == this_process().partition(":")[0]
