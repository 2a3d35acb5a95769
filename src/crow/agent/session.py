"""A live session: its foreground state, its running turn, who is watching.

``emit`` is the one way an update leaves the agent: it is logged in the store
(committed) and only then queued to every attached connection.  The session's
log lock spans both, so all watchers see the log's order, and a watcher that
attaches (``attach``, with its replay) sees the log with nothing missing or
doubled; a crash can lose nothing a client has seen.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from crow.extensions import WAIT_OVER
from crow.ids import now
from crow.observe import metrics, tracing
from crow.store.aio import retrieved, settled
from crow.store.base import SessionStore
from crow.store.db import PendingUpdate, SessionRecord, TranscriptEntry
from crow.tools.hub import ToolHub
from crow.tools.permissions import Permissions

from .asking import Question
from .queue import HeldPrompts
from .updates import note_update, state_update
from .watchers import Watcher

__all__ = ["LiveSession", "RunningTurn"]

#: Logged updates a replay reads at a time (a page is a few hundred KiB).
REPLAY_PAGE = 1000
#: A wait shorter than this is not worth a notice: it would flicker past.
NOTICE_WAITS_AFTER_S = 0.25


class RunningTurn(Protocol):
    """What a session and its agent need of the turn it runs (crow.agent.turn.Turn)."""

    task: asyncio.Task[None] | None
    takes_steers: bool  # the react loop runs: a prompt may join it

    @property
    def done(self) -> bool:
        """Its idle has gone out, or it is over."""
        ...

    def cancel(self, reason: str) -> None: ...

    async def wait(self) -> None: ...

    async def steer(
        self,
        blocks: list[Any],
        content: list[dict[str, Any]],
        origin: str | None,
        client: str | None = None,
    ) -> str:
        """Put a prompt into the running turn; returns its message id."""
        ...


@dataclass(eq=False)
class LiveSession:
    record: SessionRecord
    store: SessionStore
    model: str  # the model that answers this session's prompts
    #: The model that gave the latest reply: another of the chain when this one failed.
    answered_by: str | None = None
    state: str = "idle"  # idle | running | requires_action
    stop_reason: str | None = None
    watchers: set[Watcher] = field(default_factory=set)
    #: Clients attaching now (a resume: its replay may take a while before it watches);
    #: while any does, the session is not unloaded under it.
    attaching: int = 0
    turn: RunningTurn | None = None  # the latest turn; running while ``busy``
    starting: asyncio.Future[None] | None = None  # set while a prompt is being accepted
    cancel_on_start: str | None = None  # a cancel that came while it was
    title: str | None = None
    permissions: Permissions | None = None
    tools: ToolHub | None = None
    tools_started: asyncio.Task[None] | None = None  # the first prompt waits for it
    #: What starts the tools (crow.agent.tooling.start_tools), until the first turn calls it.
    tools_pending: Callable[[], None] | None = None
    turns_started: int = 0  # turns that asked for the tools (``ready_tools``)
    idle_watch: asyncio.Task[None] | None = None  # stops the tools once idle long enough
    tool_setup: Any = None  # the (servers, directories) the tools were started with
    questions: set[Question] = field(default_factory=set)  # open permission questions
    #: A client registered as the session's judge (crow.agent.verdicts.may_judge).
    judge: Watcher | None = None
    #: Prompts that came while it was busy, waiting for their turn (crow.agent.queue).
    held: HeldPrompts = field(default_factory=HeldPrompts)
    #: Work that goes on outside the turn, as ``state_update.background`` lists it
    #: (crow.agent.background): key -> item.  Once listed, every state update says it.
    background: dict[str, dict[str, Any]] = field(default_factory=dict)
    reports_background: bool = False
    jobs: set[asyncio.Task[None]] = field(default_factory=set)  # what watches that work
    log_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    #: The last seq of the log the watchers were sent.  Other servers on a shared
    #: store append too: what lies between is read from the log (``catch_up``), so
    #: every watcher gets every update once, in log order.
    delivered: int = 0
    catching_up: asyncio.Task[None] | None = None
    more_to_catch: bool = False
    #: On a shared store: the clients of the other servers, asked with ours.
    remote_askers: Any = None
    #: When it last logged an update, sent one another server logged, or a client
    #: attached (time.monotonic): an idle session is parked after a while
    #: (crow.agent.parking).
    active_at: float = field(default_factory=time.monotonic)
    #: What the model sees, as last read (``transcript``), and the seq it was read to.
    _transcript: list[TranscriptEntry] | None = None
    _transcript_seq: int = 0

    async def transcript(self) -> list[TranscriptEntry]:
        """What the model sees (``Store.transcript``): the latest summary and every
        message after it.  Read whole once, then only what was added since: every
        model call asks, and reading and decoding a long session's every message
        each time cost more than the rest of the call.  Asking the store what was
        added rather than trusting our own writes keeps another process's turns (on
        the same store) in; the store answers what this process wrote itself
        without a read where it can prove nobody else wrote (crow.store.tails).
        The entries are shared between calls: never change them."""
        if self._transcript is None:
            entries = await self.store.transcript(self.id)
        else:
            entries = list(self._transcript)
            for entry in await self.store.transcript_after(self.id, self._transcript_seq):
                if entry.kind == "summary":
                    entries = []  # what came before it is in it
                entries.append(entry)
        if entries:
            self._transcript_seq = max(self._transcript_seq, entries[-1].seq)
        self._transcript = entries
        return list(entries)

    async def ready_tools(self) -> ToolHub | None:
        """The session's tool hub once its servers have started (or failed).
        A wait long enough to notice is said in a live ``notice``, and its end.
        The first call starts them."""
        self.turns_started += 1
        if self.tools_pending is not None:
            launch, self.tools_pending = self.tools_pending, None
            launch()
        started = self.tools_started
        if started is None or started.done():
            return self.tools
        done, _ = await asyncio.wait([started], timeout=NOTICE_WAITS_AFTER_S)
        if not done:
            self.notice("starting the tool servers", "info")
            await asyncio.shield(started)
            self.notice("the tool servers are up", "info", meta={WAIT_OVER: True})
        return self.tools

    def detach_tools(self) -> Coroutine[Any, Any, None] | None:
        """Take the tools away from the session; returns what closes them (and ends
        the watching of the processes they ran in the background)."""
        for job in list(self.jobs):
            job.cancel()
        if self.idle_watch is not None:
            self.idle_watch.cancel()
        hub, started = self.tools, self.tools_started
        self.tools, self.tools_started, self.tool_setup = None, None, None
        self.tools_pending, self.idle_watch = None, None
        if hub is None and started is None:
            return None
        return _close_tools(hub, started)

    def release_when_idle(
        self, idle_s: float, launch: Callable[[], None], released: Callable[[], None] | None
    ) -> None:
        """Stop the tool servers once the session has been idle (no turn, nothing in
        the background, no question or held prompt) for ``idle_s`` to ``2 * idle_s``;
        ``launch`` starts them again at the next turn, as at the first; ``released``
        is told once they have stopped."""
        self.idle_watch = asyncio.create_task(
            self._watch_idle(idle_s, launch, released), name=f"idle-tools-{self.id}"
        )

    async def _watch_idle(
        self, idle_s: float, launch: Callable[[], None], released: Callable[[], None] | None
    ) -> None:
        quiet_before, turns = False, self.turns_started
        while True:
            await asyncio.sleep(idle_s)
            quiet = (
                not self.busy
                and not self.background
                and not self.questions
                and not self.held
                and turns == self.turns_started
            )
            if quiet and quiet_before:
                break
            quiet_before, turns = quiet, self.turns_started
        self.idle_watch = None  # (detaching would cancel this very task)
        setup = self.tool_setup
        closing = self.detach_tools()
        self.tools_pending, self.tool_setup = launch, setup
        if closing is not None:
            await closing
        if released is not None:
            released()

    async def close_tools(self) -> None:
        closing = self.detach_tools()
        if closing is not None:
            await closing

    async def note(self, text: str, severity: str) -> None:
        """A message for the user from Crow itself (not the model's words)."""
        await self.emit(note_update(text, severity))

    @property
    def id(self) -> str:
        return self.record.id

    @property
    def busy(self) -> bool:
        return self.starting is not None or (self.turn is not None and not self.turn.done)

    def cancel_turn(self, reason: str) -> None:
        """Cancel the running turn, or the one being started (it ends cancelled)."""
        if self.starting is not None:
            self.cancel_on_start = self.cancel_on_start or reason
        elif self.turn is not None:
            self.turn.cancel(reason)

    async def end_turn(self, reason: str) -> None:
        """Cancel the turn (started or being started) and wait until its idle went out."""
        if self.starting is not None:
            self.cancel_on_start = self.cancel_on_start or reason
            await asyncio.shield(self.starting)
        if self.turn is not None:
            self.turn.cancel(reason)
            await self.turn.wait()

    async def emit(self, update: dict[str, Any]) -> int | None:
        """Log ``update``, then send it to every watcher; returns its seq in the log.

        Raises StoreUnavailable if it could not be logged (then nobody got it).
        Once logged it is sent even if the caller is cancelled meanwhile.
        """
        [seq] = await self.emit_together(update)
        return seq

    async def emit_together(
        self, *updates: dict[str, Any], transcript: Sequence[dict[str, Any]] = ()
    ) -> list[int | None]:
        """``emit`` each of ``updates``, with no resume between them: a watcher that
        attaches meanwhile sees all of them or none (a turn's user_message and
        ``running``: a resume between them would say "idle" with the prompt taken).

        ``transcript``: messages for the model's history, saved in the updates'
        transaction (the user's prompt with its user_message, the model's reply
        with its agent_message): after a crash, what the client was shown and what
        the model will read agree."""
        seqs: list[int | None] = []
        backed_up: set[Watcher] = set()
        cancelled = False
        self.active_at = time.monotonic()
        async with self.log_lock:
            for update in updates:
                self._with_background(update)
            pending = [self._pending(update) for update in updates]
            messages = [(self.id, message, "message") for message in transcript]
            appending = time.perf_counter()
            logged = self.store.append_updates(pending, messages)  # one transaction
            try:
                # One span: the updates are one transaction, done when the first is.
                with tracing.child("crow.store.append", updates=len(updates)):
                    for update, (_, body, state, stop_reason, _), written in zip(
                        updates, pending, logged, strict=True
                    ):
                        seq, interrupted = await settled(written)
                        if appending:  # timed here: a done-callback costs a loop turn
                            metrics.store_append(time.perf_counter() - appending)
                            appending = 0.0
                        cancelled = cancelled or interrupted
                        if seq is not None and seq > self.delivered + 1 and self.store.shared:
                            await self._catch_up_locked(before=seq)  # another server's, first
                        if state is not None:
                            self.state, self.stop_reason = state, stop_reason
                        backed_up.update(self._deliver(seq, update, body))
                        seqs.append(seq)
            finally:
                retrieved(logged)  # a failed batch fails each: the first failure is raised
        if cancelled:
            raise asyncio.CancelledError
        for slow in backed_up:  # a slow reader slows its turn, never drops updates
            await slow.drained()
        return seqs

    def _with_background(self, update: dict[str, Any]) -> None:
        """A state update says what runs in the background, once anything has."""
        if self.reports_background and update.get("sessionUpdate") == "state_update":
            update["background"] = list(self.background.values())

    async def set_background(self, key: str, item: dict[str, Any] | None) -> None:
        """List ``item`` as background work under ``key`` (None: it ended), and say so
        in a state update (the same state: a snapshot, not a new turn's)."""
        if item is None:
            self.background.pop(key, None)
        else:
            self.background[key] = item
        self.reports_background = True
        await self.emit(self.state_snapshot())

    def _pending(self, update: dict[str, Any]) -> PendingUpdate:
        """``update`` as the store logs it, with the state it sets."""
        state = update["state"] if update.get("sessionUpdate") == "state_update" else None
        stop_reason = update.get("stopReason") if state == "idle" else None
        stamp = now() if state == "idle" else None
        return (self.id, orjson.dumps(update), state, stop_reason, stamp)

    def notice(
        self,
        title: str,
        severity: str,
        *,
        description: str | None = None,
        meta: dict[str, Any] | None = None,
    ) -> None:
        """A live ``notice`` for whoever watches now: what the turn waits for
        (tool servers starting, a retry, a model loading), or ``WAIT_OVER`` in
        ``meta`` when that wait ended.  Not session history: never logged or replayed."""
        update: dict[str, Any] = {"sessionUpdate": "notice", "severity": severity, "title": title}
        if description:
            update["description"] = description
        if meta:
            update["_meta"] = meta
        body = orjson.dumps(update)
        for watcher in list(self.watchers):
            watcher.deliver(self.id, None, update, body)

    def broadcast_unlogged(self, update: dict[str, Any]) -> None:
        """Send without logging: only when the store has failed, so that no
        client waits forever for a turn's end (the log catches up later)."""
        if update.get("sessionUpdate") == "state_update":
            self.state = update["state"]
            self.stop_reason = update.get("stopReason") if self.state == "idle" else None
            self._with_background(update)
        body = orjson.dumps(update)
        for watcher in list(self.watchers):
            watcher.deliver(self.id, None, update, body)

    async def catch_up(self) -> None:
        """Send the watchers what other servers logged since ``delivered``."""
        async with self.log_lock:
            await self._catch_up_locked()

    async def _catch_up_locked(self, before: int | None = None) -> None:
        rows = await self.store.updates(self.id, after=self.delivered)
        if rows:  # another server works in it: not idle here either (crow.agent.parking)
            self.active_at = time.monotonic()
        for seq, body in rows:
            if before is not None and seq >= before:
                break
            update = orjson.loads(body)
            if update.get("sessionUpdate") == "state_update":
                self.state = update.get("state", self.state)
                self.stop_reason = update.get("stopReason") if self.state == "idle" else None
            self._deliver(seq, update, body)

    def _deliver(self, seq: int | None, update: dict[str, Any], body: bytes) -> list[Watcher]:
        if seq is not None:
            self.delivered = max(self.delivered, seq)
        backed_up = []
        for watcher in list(self.watchers):
            watcher.deliver(self.id, seq, update, body)
            if watcher.backed_up:
                backed_up.append(watcher)
        return backed_up

    async def attach(self, watcher: Watcher, replay_after: int | None) -> None:
        """Start sending to ``watcher``: first the log after ``replay_after``
        (None: no replay), then the current state, then the live updates, with
        nothing between them.  An open permission question is put to it too.

        A long log is read and sent a page at a time, waiting for the watcher to
        take each (its memory stays bounded, the first update goes out at once),
        without the log's lock while full pages come: the session's turn goes on
        meanwhile.  The tail is sent under the lock, then the live updates follow."""
        self.active_at = time.monotonic()
        after = replay_after
        if after is not None and watcher not in self.watchers:  # (else live ones interleave)
            after = await self._replay_pages(watcher, after, locked=False)
        async with self.log_lock:
            shared = self.store.shared
            if shared:
                await self._catch_up_locked()  # the others' updates, to those watching
            if after is not None:
                await self._replay_pages(watcher, after, locked=True)
            self.watchers.add(watcher)
            await watcher.resumed(self.id, self.state_snapshot())
        if watcher.follower:
            return  # a judge reads; only clients are asked
        for question in self.questions:
            question.ask(watcher)

    async def _replay_pages(self, watcher: Watcher, after: int, *, locked: bool) -> int:
        """Send ``watcher`` the log after ``after``, a page at a time, to its end;
        returns where it stopped (the last seq read).  Unlocked, a page waits while
        the watcher lags; under the log's lock nothing waits for a slow reader."""
        while True:
            rows, last = await self.store.replay_page(self.id, after=after, limit=REPLAY_PAGE)
            for seq, body in rows:
                if self.store.shared and seq > self.delivered:
                    return seq - 1  # logged elsewhere just now: a catch-up sends it
                watcher.replay(self.id, seq, body)
            if last == after:
                return after
            after = last
            if not locked:  # let the writer send this page; wait if the reader lags
                await (watcher.drained() if watcher.backed_up else asyncio.sleep(0))

    async def ask(self, question: Question) -> Any:
        """Put ``question`` to every watcher, and to every one that attaches while it
        is open; the first answer's outcome (cancelling withdraws it from all)."""
        self.questions.add(question)
        try:
            for watcher in list(self.watchers):
                if not watcher.follower:
                    question.ask(watcher)
            if self.remote_askers is not None:
                question.ask(self.remote_askers)
            return await question.outcome()
        finally:
            self.questions.discard(question)

    def state_snapshot(self) -> dict[str, Any]:
        """The current foreground state, as sent after every resume."""
        update = state_update(self.state)
        if self.state == "idle" and self.stop_reason:
            update["stopReason"] = self.stop_reason
        self._with_background(update)
        return update


async def _close_tools(hub: ToolHub | None, started: asyncio.Task[None] | None) -> None:
    if started is not None and not started.done():
        started.cancel()
    if hub is not None:
        await hub.aclose()
