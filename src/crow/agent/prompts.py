"""Inserting prompts: a turn of its own, held behind the running turn, or steered in.

``take_prompt`` decides by the session's state and the prompt's mode (crow.agent.queue
says what each mode means); ``start_turn`` takes the session's turn lease
(crow.agent.cluster) and starts the ``Turn``; ``advance`` lets the first held prompt
in once the session is free.  On a shared store the held prompts of every server
form one order (crow.agent.shared_queue): a server inserts its prompt only when it
is the first of all, and shows its watchers the whole queue.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

import orjson

from crow.acp import InvalidParams, RequestCancelled, schema
from crow.ids import new_id

from .cluster import Cluster, busy
from .content import to_user_content
from .host import SessionHost
from .session import LiveSession
from .turn import Turn
from .watchers import Watcher

__all__ = ["PromptHost", "Prompts", "Steered"]


class PromptHost(SessionHost, Protocol):
    @property
    def prompt_caps(self) -> schema.PromptCapabilities:
        """What prompts may hold."""
        ...


class Steered:
    """A prompt put into the running turn."""

    __slots__ = ("message_id",)

    def __init__(self, message_id: str) -> None:
        self.message_id = message_id


class Prompts:
    """The agent's prompt insertion: one per agent, over its live sessions."""

    def __init__(self, host: PromptHost, cluster: Cluster) -> None:
        self.host = host
        self.store = host.store
        self.cluster = cluster

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
                return await self.start_turn(
                    session, blocks, origin=origin, client=client_name(watcher)
                )
            except InvalidParams as exc:
                if not (self.store.shared and mode == "queue" and _elsewhere(exc)):
                    raise  # a turn on another server took it first: wait behind it
        elif mode == "reject":
            raise busy(session.id)
        content = self._user_content(blocks)  # a refused prompt is refused now, not held
        turn = session.turn
        if mode == "steer" and turn is not None and turn.takes_steers:
            return Steered(await turn.steer(blocks, content, origin, client_name(watcher)))
        if mode != "queue" and not self.store.shared:
            raise busy(session.id)  # (steering a turn that is ending: refused as busy)
        return await self._hold(session, watcher, blocks, origin)

    async def _free_elsewhere(self, session: LiveSession) -> bool:
        """On a shared store: no turn runs on another server and none holds prompts
        for the session (they come first).  Always true on a file."""
        if self.cluster.queue is None:
            return True
        return session.state == "idle" and not await self.cluster.queue.rows(session.id)

    async def _hold(
        self, session: LiveSession, watcher: Watcher, blocks: list[Any], origin: str | None
    ) -> Turn:
        """Hold a prompt until the session is free and it is first; then insert it."""
        text = " ".join(b.text for b in blocks if getattr(b, "type", None) == "text")
        held = session.held.hold(new_id("msg"), watcher, _sender(watcher), text)
        shared = self.cluster.queue
        try:
            if shared is not None:
                await shared.file(session, held)
            self.show_queue(session)
            self.advance(session)  # free meanwhile (a turn elsewhere just ended)
            while True:
                self.cluster.watch_turn_elsewhere(session)  # its server may die meanwhile
                await held.wake
                if not session.held.drop(held):
                    raise RequestCancelled("The held prompt was withdrawn")
                try:
                    return await self.start_turn(
                        session,
                        blocks,
                        origin=origin,
                        client=client_name(watcher),
                        message_id=held.message_id,
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
            if shared is not None:
                await shared.drop(session, held)  # (announced to every server)
            else:
                self.show_queue(session)
            self.advance(session)

    def advance(self, session: LiveSession) -> None:
        """The session may be free: the first held prompt inserts itself (on a shared
        store: if it is the first of every server's)."""
        if session.busy or not session.held:
            return
        if self.cluster.queue is None:
            session.held.wake_first()
        else:
            self.host.spawn(self._advance_shared(session), name=f"advance-{session.id}")

    async def _advance_shared(self, session: LiveSession) -> None:
        assert self.cluster.queue is not None
        first = await self.cluster.queue.first(session.id)
        if session.busy or session.state != "idle" or not session.held.items:
            return
        if session.held.items[0].message_id == first:
            session.held.wake_first()

    def show_queue(self, session: LiveSession) -> None:
        """Every watcher is shown the held prompts (live only, never logged); on a
        shared store, those of every server."""
        if self.cluster.queue is not None:
            self.host.spawn(self._show_shared_queue(session), name=f"queue-{session.id}")
            return
        for watcher in list(session.watchers):
            if not watcher.follower:
                update = session.held.snapshot(watcher)
                watcher.deliver(session.id, None, update, orjson.dumps(update))

    async def _show_shared_queue(self, session: LiveSession) -> None:
        assert self.cluster.queue is not None
        rows = [(r.id, r.sender, r.preview) for r in await self.cluster.queue.rows(session.id)]
        for watcher in list(session.watchers):
            if not watcher.follower:
                update = session.held.snapshot_of(rows, watcher)
                watcher.deliver(session.id, None, update, orjson.dumps(update))

    def _user_content(self, blocks: list[Any]) -> list[dict[str, Any]]:
        max_bytes = self.host.config.limits.max_prompt_bytes
        return to_user_content(blocks, self.host.prompt_caps, max_bytes=max_bytes)

    async def start_turn(
        self,
        session: LiveSession,
        blocks: list[Any],
        *,
        origin: str | None = None,
        client: str | None = None,
        message_id: str | None = None,
    ) -> Turn:
        """Start a prompt turn (v2 ContentBlock models); it runs until idle.

        Raises InvalidParams if the session is busy (here or in another
        process) or a block is refused.  ``origin`` (a prompt's ``_meta["crow/from"]``,
        e.g. "judge") and ``client`` (the sending client's name) are shown on its
        ``user_message``.  Once this returns, the prompt is
        acknowledged and its turn ends in ``idle`` whatever happens; the turn's
        first update goes out after this returns.
        """
        if session.busy:
            raise busy(session.id)
        content = self._user_content(blocks)
        # Busy from here: a prompt right behind this one is held (or refused), and a
        # cancel or close that comes meanwhile applies to this turn.
        starting = session.starting = asyncio.get_running_loop().create_future()
        started = False
        try:
            await self.cluster.take_lease(session)
            turn = session.turn = Turn(
                self.host,
                session,
                message_id=message_id or new_id("msg"),
                blocks=blocks,
                content=content,
            )
            turn.origin, turn.client = origin, client
            turn.start().add_done_callback(lambda _: self.host.unload_if_unwatched(session))
            started = True
            if session.cancel_on_start is not None:
                turn.cancel(session.cancel_on_start)
        finally:
            session.starting, session.cancel_on_start = None, None
            starting.set_result(None)
            if not started:
                self.advance(session)  # nothing was inserted: the next held prompt may be
        self.cluster.keep_leases()
        return turn


def _elsewhere(exc: InvalidParams) -> bool:
    """A busy refusal because another process runs the session's turn."""
    return isinstance(exc.data, dict) and bool(exc.data.get("elsewhere"))


def client_name(watcher: Watcher) -> str | None:
    """The name a watcher's client gave itself (``clientInfo.name``), if any."""
    info = getattr(getattr(watcher, "side", None), "client_info", None)
    name = getattr(info, "name", None) or getattr(watcher, "client_name", None)
    return str(name) if name else None


def _sender(watcher: Watcher) -> str:
    """Who a watcher's prompts are from, as its client named itself."""
    return client_name(watcher) or "a client"
