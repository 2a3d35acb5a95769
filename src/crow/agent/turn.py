"""One prompt turn: the react loop, from the user's message to ``idle``.

    user_message → running → (agent_thought_chunk | agent_message_chunk)* →
    agent_thought / agent_message snapshots → usage_update → … →
    [_crow/turnEnded(stopReason)] → idle(stopReason)

The stop reason is always the true one: ``end_turn``; ``max_tokens`` (the model
hit its output limit); ``refusal`` (its content filter); ``max_turn_requests``
(the step budget ran out); ``cancelled`` (``session/cancel``, ``session/close``
or shutdown); ``error`` (the model chain, the store or the agent failed: the
user sees why in a note, and the idle update carries the error).  Cancellation
becomes ``cancelled`` in exactly one place, ``run``.

A turn whose prompt was acknowledged always ends in ``idle``: ``cancel`` before
the turn's first step is remembered and honoured right after its
``user_message`` (a task cancelled before it starts would never run at all).
When the store fails, the end is still sent to every watcher, unlogged, and
logged later (``settle_in_background``); until then the store still holds the
turn's lease, so a process that inherits it closes the turn as interrupted.

A turn that ends other than ``end_turn`` also logs ``_crow/turnEnded`` (a custom
update, ignored by other clients): a resume replays content but no state
changes, and this is how a replay still shows that a turn was cancelled or failed.

While the react loop runs, a prompt can be *steered* into it (crow.agent.queue):
its ``user_message`` goes out and it joins the model's history at once, and the
loop calls the model again rather than end before the model has seen it.  A
steer that lands while tool calls are in flight sits in the history before their
results; ``messages`` moves it after them, where the model's API wants it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import orjson

from crow.extensions import COMPLETION_TOKENS, MODEL, PROMPT_TOKENS
from crow.ids import new_id, now
from crow.models.errors import ContextLengthExceeded, ModelError
from crow.models.events import (
    Finished,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    Usage,
)
from crow.observe import metrics, tracing
from crow.store.aio import settled
from crow.store.db import StoreUnavailable
from crow.tools.hub import ToolHub

from . import commands, compaction, instructions, memory
from .history import DURING_REPLY, estimate_tokens, in_model_order
from .host import TurnHost
from .reply import Reply, accumulate, add_delta, tell
from .session import LiveSession
from .toolrun import ToolRunner
from .updates import (
    agent_message,
    agent_thought,
    idle_update,
    note_update,
    state_update,
    title_update,
    turn_ended,
    user_message,
)

__all__ = ["Turn"]

log = logging.getLogger("crow.agent")

#: Compact before a model call once the request is estimated past this share of
#: the model's context window (the estimate is rough: about 4 characters a token).
COMPACT_AT = 0.8
TITLE_CHARS = 80
#: How long a turn whose end could not be logged keeps trying, and how often.
SETTLE_FOR_S = 300.0
SETTLE_EVERY_S = 1.0


class Turn:
    def __init__(
        self,
        host: TurnHost,
        session: LiveSession,
        *,
        message_id: str,
        blocks: list[Any],
        content: list[dict[str, Any]],
    ) -> None:
        self.host = host
        self.session = session
        self.store = host.store
        self.message_id = message_id
        self.blocks = blocks
        self.content = content
        self.reply: Reply | None = None  # the model call under way, for cancellation
        self.tools: list[dict[str, Any]] = []  # what the model may call, OpenAI-shaped
        self.system: str | None = None  # the system prompt, once composed
        self.command = commands.parse(blocks)  # a slash command is not model input
        self.origin: str | None = None  # who sent the prompt, if not a person ("judge")
        self.client: str | None = None  # the name of the client that sent it
        self.stop_reason: str | None = None  # set when the turn has ended
        self.error: str | None = None  # the error message of a turn that ended in "error"
        self.task: asyncio.Task[None] | None = None
        self._stepped = False  # the task has taken its first step
        self._early_cancel: str | None = None  # a cancel that came before that
        self.ended = False  # the idle has been sent: the session takes a new prompt
        self.takes_steers = False  # the react loop runs: a prompt may join it
        self.steers = 0  # prompts steered into it so far
        self.in_reply = False  # a model reply is streaming or being saved
        self._steering: list[asyncio.Future[Any]] = []  # their writes

    # ---- lifecycle ----------------------------------------------------------------
    def start(self) -> asyncio.Task[None]:
        self.task = asyncio.create_task(self.run(), name=f"turn-{self.session.id}")
        return self.task

    @property
    def done(self) -> bool:
        """Its idle has gone out (the task may still be winding down), or it is over."""
        return self.ended or (self.task is not None and self.task.done())

    def cancel(self, reason: str) -> None:
        """End the turn as ``cancelled`` (``reason``: session/cancel, session/close, shutdown)."""
        if self.task is None or self.task.done():
            return
        if self._stepped:
            self.task.cancel(reason)
        elif self._early_cancel is None:
            self._early_cancel = reason

    async def wait(self) -> None:
        if self.task is not None:
            await asyncio.wait([self.task])

    # ---- the one place outcomes become stop reasons --------------------------------
    async def run(self) -> None:
        with tracing.turn(self.session.id):
            await self._run()

    async def _run(self) -> None:
        self._stepped = True
        stop, error, note, severity, partial = "end_turn", None, None, "error", False
        try:
            # The user's message and ``running`` go out together, whatever comes:
            # a client that sees ``idle`` before ``running`` takes it for the
            # state before its prompt (§7.2) and would wait on.
            await _shielded(self.begin())
            if self.session.title is None:
                await self.set_title()
            if self._early_cancel is not None:
                raise asyncio.CancelledError(self._early_cancel)
            stop = await self.handle_command() or await self.react()
        except asyncio.CancelledError as exc:
            _uncancel()
            stop, partial = "cancelled", True
            if "shutdown" in exc.args:
                note, severity = "The agent stopped before this turn finished.", "warning"
        except ModelError as exc:
            stop, error, partial = "error", exc.message, True
            note = f"The model failed: {exc.message}"
        except StoreUnavailable as exc:
            log.error("session %s: %s", self.session.id, exc)
            stop, error = "error", f"The session store failed: {exc}"
        except Exception as exc:
            log.exception("turn failed in session %s", self.session.id)
            stop, error = "error", f"Internal error: {type(exc).__name__}: {exc}"
            note = error
        # The end runs to completion: a session/cancel that lands while the turn is
        # already ending (a model error, say) must not cut it short before idle.
        _, cancelled = await settled(
            asyncio.ensure_future(self.end(stop, error, note, severity, partial=partial))
        )
        if cancelled:
            _uncancel()

    async def end(
        self, stop: str, error: str | None, note: str | None, severity: str, *, partial: bool
    ) -> None:
        """The turn's last steps: what the model said so far, a note, then idle."""
        if partial:
            await self.quietly(self.save_partial_reply())
        if note is not None:
            await self.quietly(self.note(note, severity))
        await self.finish(stop, error)

    async def quietly(self, step: Any) -> None:
        """A step on the way out: a store failure there must not stop the turn's end."""
        try:
            await step
        except StoreUnavailable as exc:
            log.error("session %s: %s", self.session.id, exc)

    async def begin(self) -> None:
        session = self.session
        blocks = [b.to_wire() for b in self.blocks]
        user = user_message(self.message_id, blocks, self.origin, self.client)
        running = state_update("running")
        # A slash command is answered without the model: not in its history.
        prompt = [{"role": "user", "content": self.content}] if self.command is None else []
        await session.emit_together(user, running, transcript=prompt)

    async def finish(self, stop: str, error: str | None) -> None:
        self.stop_reason, self.error = stop, error
        metrics.prompt_ended(stop)
        tracing.set_attribute("crow.stop_reason", stop)
        update = idle_update(stop, error)
        if stop != "end_turn":  # history keeps how a turn ended; replay drops state_update
            await self.quietly(self.session.emit(turn_ended(update)))
        try:
            await self.session.emit(update)
        except StoreUnavailable as exc:
            self.settle_in_background(update, str(exc))
        self.ended = True
        self.host.advance(self.session)  # a held prompt is next

    def settle_in_background(self, idle: dict[str, Any], why: str) -> None:
        """The store refused the turn's end: tell every watcher now, log it later."""
        session = self.session
        log.error("session %s: could not log the end of the turn: %s", session.id, why)
        text = f"The session store failed ({why}); this turn's end is not saved yet."
        note = note_update(text, "error")
        session.broadcast_unlogged(note)
        session.broadcast_unlogged(idle)
        self.host.spawn(_log_when_possible(session, [note, idle]), name=f"settle-{session.id}")

    async def set_title(self) -> None:
        text = " ".join(b.text for b in self.blocks if getattr(b, "type", None) == "text")
        title = " ".join(text.split())[:TITLE_CHARS] or "Untitled"
        self.session.title = title
        await self.store.update_session(self.session.id, title=title)
        await self.session.emit(title_update(title))

    async def handle_command(self) -> str | None:
        """A slash command is answered here, without the model."""
        return await commands.run(self, self.command)

    # ---- the react loop ---------------------------------------------------------
    async def react(self) -> str:
        hub = await self.session.ready_tools()
        self.tools = [t.openai() for t in hub.tools()] if hub is not None else []
        await memory.recall_into(self)
        self.takes_steers = True
        try:
            return await self.steps(hub)
        finally:
            self.takes_steers = False  # from here a prompt waits for the next turn

    async def steps(self, hub: ToolHub | None) -> str:
        for _ in range(self.host.config.max_steps):
            steered = self.steers
            reply = await self.call_model()
            if reply.finish_reason == "length":
                return "max_tokens"
            if reply.finish_reason == "content_filter":
                return "refusal"
            if not reply.tool_calls or hub is None:
                if self.steers > steered:
                    continue  # somebody spoke meanwhile: the model answers that too
                return "end_turn"
            await self.run_tools(hub, reply)
            self.tools = [t.openai() for t in hub.tools()]  # a dead server's are gone
        steps = self.host.config.max_steps
        await self.note(
            f"Stopped after {steps} model calls (the limit is model.max_steps "
            "in config.toml). Send another prompt to go on.",
            "warning",
        )
        return "max_turn_requests"

    async def run_tools(self, hub: ToolHub, reply: Reply) -> None:
        config = self.host.config
        runner = ToolRunner(
            self.session,
            hub,
            max_result_bytes=config.tools.max_result_kib * 1024,
            kept_in=config.paths.tool_output(self.session.id),
        )
        calls = [reply.tool_calls[i] for i in sorted(reply.tool_calls)]
        try:
            await runner.run_all(calls)
        finally:  # cancelled or not, every call the model made gets its answer
            for message in runner.messages:
                await _shielded(self.store.append_message(self.session.id, message))

    async def steer(
        self,
        blocks: list[Any],
        content: list[dict[str, Any]],
        origin: str | None,
        client: str | None = None,
    ) -> str:
        """Put a prompt into this running turn; returns its message id once it is logged
        (shown to every watcher, and in the model's history)."""
        message_id = new_id("msg")
        self.steers += 1
        user = user_message(message_id, [b.to_wire() for b in blocks], origin, client)
        prompt: dict[str, Any] = {"role": "user", "content": content}
        if self.in_reply:  # it belongs after the reply the model is giving now
            prompt[DURING_REPLY] = True
        write = asyncio.ensure_future(self.session.emit_together(user, transcript=[prompt]))
        self._steering.append(write)
        await asyncio.shield(write)
        return message_id

    async def messages(self) -> list[dict[str, Any]]:
        if self._steering:  # what was steered in reaches this model call
            steering, self._steering = self._steering, []
            await asyncio.gather(*steering, return_exceptions=True)
        out: list[dict[str, Any]] = [{"role": "system", "content": await self.system_prompt()}]
        for entry in await self.session.transcript():
            if entry.kind == "summary":
                out.append({"role": "user", "content": compaction.summary_text(entry.message)})
            else:
                out.append(entry.message)
        return in_model_order(out)

    async def system_prompt(self) -> str:
        """Composed once a turn (AGENTS.md files are read then), for every model call."""
        if self.system is None:
            spec = await self.host.router.describe(self.session.model)
            takes_tools = "tools" in spec.capabilities
            offered = {t["function"]["name"] for t in self.tools} if takes_tools else set()
            self.system = await instructions.system_prompt(
                self.host.config, self.session.record.cwd, offered
            )
        return self.system

    async def call_model(self) -> Reply:
        spec = await self.host.router.describe(self.session.model)
        messages = await self.messages()
        if estimate_tokens(messages) > COMPACT_AT * spec.context_window:
            await compaction.compact(self, reason="the conversation nears the context window")
            messages = await self.messages()
        try:
            return await self.replying(messages)
        except ContextLengthExceeded:
            await compaction.compact(self, reason="the model said the request is too long")
            return await self.replying(await self.messages())  # once: then an error

    async def replying(self, messages: list[dict[str, Any]]) -> Reply:
        """``stream_reply``, marked as under way for prompts steered in meanwhile."""
        self.in_reply = True
        try:
            return await self.stream_reply(messages)
        finally:
            self.in_reply = False

    async def stream_reply(self, messages: list[dict[str, Any]]) -> Reply:
        session = self.session
        reply = self.reply = Reply(message_id=new_id("msg"))
        thought_id = new_id("msg")
        stream = self.host.router.stream(session.model, messages, tools=self.tools)
        # Deltas that arrived together are logged together (one transaction) and
        # sent together.  No wait comes between a delta with ``more`` and the next
        # event, so a burst is never left unsent.
        burst: list[dict[str, Any]] = []
        async for event in stream:
            if isinstance(event, TextDelta | ReasoningDelta):
                burst.append(add_delta(event, reply, thought_id))
                if not event.more:
                    await session.emit_together(*burst)
                    burst.clear()
                continue
            if burst:
                await session.emit_together(*burst)
                burst.clear()
            if isinstance(event, ToolCallDelta):
                accumulate(reply.tool_calls, event)
            elif isinstance(event, Finished):
                reply.finish_reason, reply.model, reply.usage = (
                    event.finish_reason,
                    event.model,
                    event.usage,
                )
                session.answered_by = event.model
            else:
                await tell(session, event)
        if burst:
            await session.emit_together(*burst)
        if reply.reasoning:
            await session.emit(agent_thought(thought_id, "".join(reply.reasoning)))
        for index, call in reply.tool_calls.items():
            call["id"] = call["id"] or f"call_{reply.message_id}_{index}"
        self.reply = None  # recorded whole below, even if the turn is cancelled meanwhile
        await self.record_reply(reply, usage=True)
        return reply

    async def record_reply(self, reply: Reply, *, usage: bool = False) -> None:
        """The whole-message snapshot (replay shows it whole), the token usage (with
        ``usage``) and the transcript's message, in one transaction that finishes
        even if the turn is cancelled meanwhile."""
        text = "".join(reply.text)
        updates = []
        if text or not reply.tool_calls:
            meta = {MODEL: reply.model} if reply.model else None
            updates.append(agent_message(reply.message_id, text, meta))
        if usage and reply.usage is not None and reply.model is not None:
            updates.append(self.usage_update(reply.model, reply.usage))
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if reply.tool_calls:
            message["content"] = text or None
            message["tool_calls"] = [
                {
                    "id": c["id"],
                    "type": "function",
                    "function": {"name": c["name"], "arguments": c["arguments"] or "{}"},
                }
                for _, c in sorted(reply.tool_calls.items())
            ]
        if updates:
            await _shielded(self.session.emit_together(*updates, transcript=[message]))
        else:  # only tool calls: nothing to show yet
            await _shielded(self.store.append_message(self.session.id, message))

    def usage_update(self, model: str, usage: Usage) -> dict[str, Any]:
        return {
            "sessionUpdate": "usage_update",
            "used": usage.prompt_tokens + usage.completion_tokens,
            "size": self.host.router.spec(model).context_window,
            "_meta": {
                MODEL: model,
                PROMPT_TOKENS: usage.prompt_tokens,
                COMPLETION_TOKENS: usage.completion_tokens,
            },
        }

    async def save_partial_reply(self) -> None:
        """After a cancel or failure mid-reply, what was shown stays in history."""
        reply, self.reply = self.reply, None
        if reply is not None and reply.text:
            await self.record_reply(reply)

    async def note(self, text: str, severity: str) -> None:
        """A message for the user from Crow itself (not the model's words)."""
        await self.session.note(text, severity)


async def _log_when_possible(session: LiveSession, updates: list[dict[str, Any]]) -> None:
    """Log what was sent unlogged once the store works again (bounded)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + SETTLE_FOR_S
    pending = list(updates)
    while pending and loop.time() < deadline:
        await asyncio.sleep(SETTLE_EVERY_S)
        update = pending[0]
        state = update.get("state") if update.get("sessionUpdate") == "state_update" else None
        try:
            await session.store.append_update(
                session.id,
                orjson.dumps(update),
                state=state,
                stop_reason=update.get("stopReason"),
                now=now() if state == "idle" else None,
            )
        except StoreUnavailable:
            continue
        pending.pop(0)
    if pending:
        log.error("session %s: gave up logging the end of a turn", session.id)


async def _shielded(write: Any) -> Any:
    """A transcript write the model's history depends on: done even if cancelled."""
    result, cancelled = await settled(asyncio.ensure_future(write))
    if cancelled:
        raise asyncio.CancelledError
    return result


def _uncancel() -> None:
    task = asyncio.current_task()
    if task is not None:
        task.uncancel()
