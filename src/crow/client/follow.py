"""Following a session in ``crow chat``: every update shown as it comes, whoever's
turn it belongs to.

Several clients may watch one session (an editor, a second chat, the judge).  The
chat shows their turns as its own: prompts marked by who sent them (``you>``,
``them>``, ``judge>``), the reply as it streams, tool calls, verdicts, and how each
turn ended.  Whose a prompt is: the ones whose answer named their ``messageId``
are yours; so are the ones the agent's queue (``_crow/queue``) lists as yours; and
a ``user_message`` that comes before the answer to a prompt you just sent, with
that prompt's text, is that prompt (the agent may send it first, ACP-V2.md §7.1).
A judge's follow-up prompt carries ``_meta["crow/from"] = "judge"``.

This module draws nothing itself: it writes to a sink, ``Console`` on a terminal
(finished lines above the input line, a live area for what changes) or ``Screen``
for pipes (reply on stdout, lines on stderr).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Protocol, TextIO, cast

from crow.acp import Message, Session, ToolCall, schema
from crow.extensions import FROM, QUEUE, TURN_ENDED

from .paint import Paint
from .render import TextRenderer, activity, status, tool_line
from .screen import ReplyStream
from .verifying import Verdicts

__all__ = ["HINT", "Follow", "Sent", "ending", "who_said"]

PROMPT = "you> "
CONTINUATION = "  .. "
#: The keys that apply while a turn runs, shown on the status line.
HINT = "Enter queues · Alt-Enter steers · Ctrl-C cancels"


class Sink(Protocol):
    in_place: bool

    def write(self, text: str) -> None: ...
    def line(self, text: str) -> None: ...
    def show_tool(self, key: str, title: str | None) -> None: ...


@dataclass(eq=False)
class Sent:
    """A prompt of yours on its way: sent, maybe held, not yet inserted."""

    text: str
    mode: str = "queue"  # or "steer": into the running turn
    withdraw: asyncio.Event = field(default_factory=asyncio.Event)
    message_id: str | None = None  # once inserted (its answer, or its user_message seen)
    withdrawn: bool = False  # by you (/queue drop): not "dropped by a cancel"


def who_said(message: Message, mine: bool) -> str:
    """``you``, ``them`` or ``judge``: the role (and mark) of a prompt."""
    meta = message.meta if isinstance(message.meta, dict) else {}
    if meta.get(FROM) == "judge":
        return "judge"
    return "you" if mine else "them"


def prompt_text(role: str, text: str) -> str:
    """A prompt as shown: ``you> …``, continued lines indented."""
    return f"{role}> " + text.replace("\n", "\n" + CONTINUATION)


def ending(stop: str, error: Any) -> str | None:
    """The line that says how a turn ended, or None for ``end_turn``."""
    if stop == "end_turn":
        return None
    if stop == "error":
        fields = error if isinstance(error, dict) else getattr(error, "__dict__", {})
        message = fields.get("message") if isinstance(fields, dict) else None
        return f"[error: {message}]" if isinstance(message, str) and message else "[error]"
    return f"[{stop}]"


class Follow:
    """Shows one session's updates on ``sink``; ``show_mine``: your own prompts too
    (a terminal erased them from the input line; a pipe has them in its input)."""

    def __init__(self, sink: Sink, paint: Paint, verdicts: Verdicts, *, show_mine: bool) -> None:
        self.sink = sink
        self.paint = paint
        self.verdicts = verdicts
        self.show_mine = show_mine
        self.session: Session | None = None
        self.renderer: TextRenderer | None = None
        self.mine: set[str] = set()  # message ids of your prompts
        self.sending: list[Sent] = []  # your prompts not yet inserted
        self.shown: set[str] = set()  # prompts already shown
        self.queue: list[dict[str, Any]] = []  # the agent's held prompts, in order
        self.end_shown = True  # how the latest turn ended was said (or it ran well)
        self.status: str | None = None  # what the busy session does now
        #: Work going on outside the turns, as the agent's latest ``state_update``
        #: listed it ([T] ``background``; an agent that does not report it: empty).
        self.background: list[str] = []

    def attach(self, session: Session) -> None:
        """Follow ``session`` (again, after a reconnect: the same projection)."""
        self.session = session
        if self.renderer is None or self.renderer.projection is not session.projection:
            self.renderer = TextRenderer(
                session.projection, cast(TextIO, ReplyStream(self.sink)), self.verdicts
            )
            for message in session.projection.messages.values():  # replayed: shown
                self.shown.add(message.message_id)
                if message.role == "agent":
                    self.renderer.written[message.message_id] = len(message.text)

    @property
    def busy(self) -> bool:
        return self.session is not None and self.session.projection.state != "idle"

    def line(self, text: str) -> None:
        """A line of its own (the reply's current line ends first)."""
        if self.renderer is not None:
            self.renderer.finish()
        self.sink.line(text)

    # ---- the history a resume replays --------------------------------------------------
    def replay(self, session: Session, turn_ends: list[tuple[int, str]]) -> None:
        """Print the history a resume with replay rebuilt in the projection, and
        ``[cancelled]``/``[error: …]`` where a turn ended so (``turn_ends``: after
        how many entries, and the line)."""
        projection = session.projection
        ends: dict[int, list[str]] = {}
        for at, text in turn_ends:
            ends.setdefault(at, []).append(text)
        for text in ends.get(0, []):
            self.sink.line(self.paint("note", text))
        for shown, entry in enumerate(projection.entries, 1):
            note: str | None = None
            if isinstance(entry, Message):
                note = self._replayed(session, entry)
            elif isinstance(entry, ToolCall):
                update = schema.ToolCallUpdateVariant(
                    tool_call_id=entry.tool_call_id,
                    status=entry.status,
                    raw_output=entry.fields.get("raw_output", schema.UNSET),
                )
                note = activity(projection, update, self.verdicts)
                note = self.paint.mark(note) if note else None
            if note:
                self.sink.line(note)
            for text in ends.get(shown, []):
                self.sink.line(self.paint("note", text))

    def _replayed(self, session: Session, message: Message) -> str | None:
        projection, verdicts = session.projection, self.verdicts
        if message.role == "user":
            role = who_said(message, mine=True)  # earlier chats' prompts: yours
            return self.paint(role, prompt_text(role, message.text))
        if message.role == "thought":
            update: Any = schema.AgentThought(message_id=message.message_id)
            note = activity(projection, update, verdicts)
            return self.paint.mark(note) if note else None
        if verdicts.is_note(message):
            update = schema.AgentMessage(message_id=message.message_id, meta=message.meta)
            note = activity(projection, update, verdicts)
            return self.paint.mark(note) if note else None
        if message.text:
            self.sink.write(message.text if message.text.endswith("\n") else message.text + "\n")
        return None

    # ---- updates --------------------------------------------------------------------
    def update(self, update: Any) -> None:
        session, renderer = self.session, self.renderer
        if session is None or renderer is None:
            return
        projection = session.projection
        kind = getattr(update, "session_update", None)
        if kind in ("user_message", "user_message_chunk"):
            self._prompt(update.message_id, whole=kind == "user_message")
        elif kind == "state_update":
            self._state(update)
        elif kind == QUEUE:
            self.update_queue(update)
        elif kind == TURN_ENDED:
            fields = update.model_extra or {}
            said = ending(str(fields.get("stopReason")), fields.get("error"))
            if said:
                self.line(self.paint("note", said))
            self.end_shown = True
        else:
            renderer.update(update)
            self.status = status(projection, update) or self.status
            self._activity(update)

    def _prompt(self, message_id: str, *, whole: bool) -> None:
        if message_id in self.shown or not whole:
            return  # chunks: shown once the turn runs (see _state)
        assert self.session is not None
        message = self.session.projection.messages.get(message_id)
        if message is None:
            return
        self.shown.add(message_id)
        mine = self._claim(message)
        role = who_said(message, mine)
        if mine and role == "you" and not self.show_mine:
            return
        self.line(self.paint(role, prompt_text(role, message.text)))

    def _claim(self, message: Message) -> bool:
        """Is ``message`` one of your prompts?  (See the module's docstring.)"""
        if message.message_id in self.mine:
            return True
        if any(p.get("messageId") == message.message_id and p.get("yours") for p in self.queue):
            self.mine.add(message.message_id)
            return True
        for sent in self.sending:
            if sent.message_id is None and sent.text == message.text:
                sent.message_id = message.message_id
                self.mine.add(message.message_id)
                return True
        return False

    def _state(self, update: Any) -> None:
        assert self.session is not None and self.renderer is not None
        state = update.state
        listed = getattr(update, "background", schema.UNSET)
        if listed is None or isinstance(listed, list):
            self.background = [self._background_label(item) for item in listed or []]
        if state != "idle":
            self.end_shown = False
            for message in list(self.session.projection.messages.values()):
                if message.role == "user":  # one sent as chunks shows now
                    self._prompt(message.message_id, whole=True)
            if state == "requires_action":
                self.status = "waiting for an answer"
            elif self.status in (None, "waiting for an answer"):
                self.status = "working"
            return
        self.renderer.finish()
        for key in list(getattr(self.sink, "tools", {})):
            self.sink.show_tool(key, None)
        self.status = None
        stop = getattr(update, "stop_reason", schema.UNSET)
        error = getattr(update, "error", schema.UNSET)
        said = ending(str(stop), None if error is schema.UNSET else error)
        if stop not in (schema.UNSET, None) and said and not self.end_shown:
            self.line(self.paint("note", said))  # an agent without _crow/turnEnded
        self.end_shown = True

    def _background_label(self, item: Any) -> str:
        """What a ``background`` item is, for people: a tool call's title, a
        terminal's command."""
        assert self.session is not None
        projection = self.session.projection
        kind = getattr(item, "type", None)
        if kind == "tool_call":
            call = projection.tool_calls.get(item.tool_call_id)
            return (call.title if call else None) or "a tool call"
        if kind == "terminal":
            terminal = projection.terminals.get(item.terminal_id)
            command = terminal.fields.get("command") if terminal else None
            return str(command) if command else "a terminal"
        return str(kind or "work")

    def update_queue(self, update: Any) -> None:
        """The agent's held prompts now (``_crow/queue``)."""
        prompts = (update.model_extra or {}).get("prompts")
        self.queue = (
            [p for p in prompts if isinstance(p, dict)] if isinstance(prompts, list) else []
        )
        for held in self.queue:
            if held.get("yours") and isinstance(held.get("messageId"), str):
                self.mine.add(held["messageId"])

    def _activity(self, update: Any) -> None:
        assert self.session is not None
        projection = self.session.projection
        tool = tool_line(projection, update)
        if tool is not None and self.sink.in_place:
            text, over = tool
            if not over:
                self.sink.show_tool(update.tool_call_id, text.split(" ", 1)[-1])
                return
            self.sink.show_tool(update.tool_call_id, None)
        note = activity(projection, update, self.verdicts)
        if note:
            self.line(self.paint.mark(note))
