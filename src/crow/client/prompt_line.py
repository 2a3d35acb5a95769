"""``crow chat``'s input line at a terminal: open all along, while turns run too.

It reads prompts with prompt_toolkit (history, completion, multi-line input) and
hands them to the chat; it answers the chat's own commands (``/help``, ``/queue``,
``/steer``, ``/exit``, ``/quit``); and it asks permission questions, one at a
time, in place of the input line (what was typed comes back after).

Keys: Enter sends (queued while the session is busy); Alt-Enter is a new line,
or while the session is busy sends the prompt into the running turn (steer); a
line ending in a backslash continues; Ctrl-C clears a line with text, cancels a
running turn (a second one leaves), and on an empty line of an idle session
leaves; Ctrl-D leaves.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterable
from typing import Any, Protocol

from prompt_toolkit import PromptSession
from prompt_toolkit.application import get_app
from prompt_toolkit.completion import CompleteEvent, Completer, Completion
from prompt_toolkit.document import Document
from prompt_toolkit.filters import Condition
from prompt_toolkit.history import FileHistory, History, InMemoryHistory
from prompt_toolkit.input import Input, create_input
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent
from prompt_toolkit.output import Output, create_output

from crow.acp import Session, schema
from crow.config import Paths
from crow.private import private_dir, private_file

from .asking import CANCELLED, _selected, pick, question_lines
from .console import Console
from .follow import CONTINUATION, PROMPT, Follow, Sent
from .paint import Paint

__all__ = ["OWN_COMMANDS", "ChatHost", "PromptLine"]

#: The chat's own commands (never sent to the agent): name, argument hint, what it does.
OWN_COMMANDS = [
    ("steer", "<text>", "Put a prompt into the running turn (Alt-Enter does too)"),
    ("queue", "[drop [N]]", "List the held prompts; drop withdraws yours (all, or the Nth)"),
    ("exit", None, "Leave (so do /quit and Ctrl-D)"),
    ("quit", None, "Leave"),
]
LEAVE = ("/exit", "/quit")
#: How long the spinner waits between frames.
SPIN_EVERY_S = 0.1


class ChatHost(Protocol):
    """What the input line needs of its chat (crow.client.chat.Chat, which makes it)."""

    sink: Any  # the Console
    paint: Paint
    follow: Follow
    session: Session | None
    unsent: list[Sent]
    leaving: asyncio.Event
    exit_code: int

    def send(self, text: str, *, steer: bool = False) -> Sent: ...
    def returned(self, sent: Sent) -> None: ...
    def show_status(self) -> None: ...
    def interrupt(self) -> None: ...
    def leave(self, code: int) -> None: ...
    def sigint(self) -> Any: ...


class _Wake(Exception):
    """Ends the input line for a while: a question to ask, or the chat leaves."""


def _history() -> History:
    home = Paths.from_env().home
    try:  # 0700 / 0600: prompts are private
        private_file(private_dir(home) / "history")
    except OSError:
        return InMemoryHistory()
    return FileHistory(str(home / "history"))


class CommandCompleter(Completer):
    """``/name`` from the agent's commands and the chat's own, the description as meta."""

    def __init__(self, chat: ChatHost) -> None:
        self.chat = chat

    def commands(self) -> list[tuple[str, str | None, str]]:
        """(name, hint, description) of every command: the agent's, then the chat's."""
        session = self.chat.session
        announced: list[Any] = []
        if session is not None:
            announced = list(session.projection.commands)
            listed = getattr(session.response, "available_commands", None)
            if not announced and isinstance(listed, list):
                announced = listed
        found = []
        for command in announced:
            hint = getattr(getattr(command, "input", None), "hint", None)
            found.append(
                (command.name, hint if isinstance(hint, str) else None, command.description or "")
            )
        names = {name for name, _, _ in found}
        return found + [c for c in OWN_COMMANDS if c[0] not in names]

    def get_completions(
        self, document: Document, complete_event: CompleteEvent
    ) -> Iterable[Completion]:
        text = document.text_before_cursor
        if not text.startswith("/") or any(c.isspace() for c in text):
            return
        for name, _, description in self.commands():
            if f"/{name}".startswith(text):
                yield Completion(f"/{name}", start_position=-len(text), display_meta=description)


class PromptLine:
    def __init__(self, chat: ChatHost) -> None:
        self.chat = chat
        self.console: Console = chat.sink
        self.history: History = InMemoryHistory()  # the file's, once the chat starts
        self.completer = CommandCompleter(chat)
        self.input: Input | None = None
        self.output: Output | None = None
        self.prompts: PromptSession[str] | None = None
        self.asking: PromptSession[str] | None = None  # a permission question's line
        self.saved = ""  # what was typed, while a question is asked
        self.steer = False  # the line was sent with Alt-Enter on a busy session
        self.questions: list[tuple[schema.RequestPermissionRequest, asyncio.Future[Any]]] = []

    # ---- the loop --------------------------------------------------------------------
    async def run(self) -> int:
        chat = self.chat
        self.history = _history()
        self.input = create_input(sys.stdin)
        self.output = create_output(sys.stdout)
        prompt = chat.paint("you", PROMPT.rstrip()) + " "
        self.prompts = PromptSession(
            message=lambda: self.console.message(prompt),
            history=self.history,
            completer=self.completer,
            complete_while_typing=True,
            key_bindings=self._bindings(),
            multiline=False,
            prompt_continuation=CONTINUATION,
            erase_when_done=True,  # a prompt is shown where it is inserted
            input=self.input,
            output=self.output,
        )
        spinning = asyncio.create_task(self._spin())
        # Raw mode all along (prompt_toolkit nests its own): Ctrl-C is a key, not a
        # SIGINT, and nothing typed between two prompts echoes over the output.
        try:
            with self.input.raw_mode(), chat.sigint():
                while not chat.leaving.is_set():
                    await self._ask_questions()
                    if chat.leaving.is_set():
                        break
                    default, self.saved, self.steer = self.saved, "", False
                    try:
                        text = await self.prompts.prompt_async(default=default)
                    except (KeyboardInterrupt, EOFError):
                        return 0
                    except _Wake:
                        continue
                    self.accept(text, steer=self.steer)
        finally:
            spinning.cancel()
            self.console.flush()
        return chat.exit_code

    def wake(self, *, questions: bool = True) -> None:
        """End the input line now, keeping its text (and a question being asked, with
        ``questions``): a question to ask, or the chat leaves."""
        prompts = self.prompts
        if prompts is not None and _running(prompts):
            self.saved = prompts.default_buffer.text
            prompts.app.exit(exception=_Wake())
        if questions and self.asking is not None and _running(self.asking):
            self.asking.app.exit(exception=_Wake())

    def keep(self, text: str) -> None:
        """Put ``text`` back in the input line (if it is empty), else in the history."""
        prompts = self.prompts
        if prompts is not None and prompts.app.is_running and not prompts.default_buffer.text:
            prompts.default_buffer.text = text
            prompts.default_buffer.cursor_position = len(text)
        elif not self.saved:
            self.saved = text
        else:
            self.history.append_string(text)

    def remember(self, text: str) -> None:
        """Put ``text`` in the history, where Up finds it at once."""
        self.history.append_string(text)
        prompts = self.prompts
        if prompts is not None and _running(prompts):
            buffer = prompts.default_buffer
            buffer.reset(document=buffer.document)  # reloads the history, keeps the line
            prompts.app.invalidate()

    async def _spin(self) -> None:
        while True:
            await asyncio.sleep(SPIN_EVERY_S)
            if self.console.status or self.console.tools:
                self.console.refresh()

    def _bindings(self) -> KeyBindings:
        bindings = KeyBindings()
        chat = self.chat

        @bindings.add("escape", "enter")
        def _alt_enter(event: KeyPressEvent) -> None:
            if chat.follow.busy and event.current_buffer.text.strip():
                self.steer = True  # into the running turn
                event.current_buffer.validate_and_handle()
            else:
                event.current_buffer.insert_text("\n")

        @Condition
        def continued() -> bool:
            document = get_app().current_buffer.document
            return document.is_cursor_at_the_end and document.text.endswith("\\")

        @bindings.add("enter", filter=continued)
        def _continue(event: KeyPressEvent) -> None:
            event.current_buffer.delete_before_cursor(1)
            event.current_buffer.insert_text("\n")

        @bindings.add("c-c")
        def _interrupt(event: KeyPressEvent) -> None:
            if event.current_buffer.text:
                event.current_buffer.reset()
            elif chat.follow.busy:
                chat.interrupt()
            else:
                event.app.exit(exception=KeyboardInterrupt, style="class:aborting")

        return bindings

    # ---- what was typed --------------------------------------------------------------
    def accept(self, text: str, *, steer: bool) -> None:
        chat = self.chat
        text = text.strip()
        if not text:
            return
        if text in LEAVE:
            chat.leave(0)
            return
        command, _, rest = text.partition(" ")
        if command == "/help":
            self.help()
        elif command == "/queue":
            self.queue(rest.split())
        elif command == "/steer":
            if rest.strip():
                chat.send(rest.strip(), steer=True)
            else:
                self.console.line("crow: /steer <text> puts a prompt into the running turn")
        else:
            chat.send(text, steer=steer)

    def help(self) -> None:
        lines = ["Commands:"]
        for name, hint, description in self.completer.commands():
            lines.append(f"/{name}{' ' + hint if hint else ''} — {description}")
        lines.append("Keys: Enter sends (queued while a turn runs), Alt-Enter steers while a turn")
        lines.append("runs (else a new line), Ctrl-C cancels the turn, Ctrl-D leaves.")
        self.console.line("\n".join(lines))

    def queue(self, words: list[str]) -> None:
        """``/queue``: list the held prompts; ``/queue drop [N]``: withdraw yours."""
        chat = self.chat
        held = chat.follow.queue
        local = list(chat.unsent)
        if not words:
            if not held and not local:
                self.console.line("crow: nothing is queued")
                return
            lines = ["Queued, in the order they will run:"]
            for n, item in enumerate(held, 1):
                sender = "yours" if item.get("yours") else f"from {item.get('from', 'a client')}"
                lines.append(f"  {n}) {item.get('preview', '')} ({sender})")
            for n, sent in enumerate(local, len(held) + 1):
                lines.append(f"  {n}) {sent.text} (yours, sent once connected)")
            lines.append("/queue drop N withdraws one of yours, /queue drop all of them")
            self.console.line("\n".join(lines))
            return
        if words[0] != "drop" or len(words) > 2 or (len(words) == 2 and not words[1].isdigit()):
            self.console.line(
                "crow: /queue lists the held prompts; /queue drop [N] withdraws yours"
            )
            return
        mine = self._held_sent()
        numbered = {n: sent for n, sent in enumerate([*mine.values(), *local], 1)}
        if len(words) == 2:
            wanted = int(words[1])
            by_place = {n: mine.get(str(item.get("messageId"))) for n, item in enumerate(held, 1)}
            by_place.update({n: sent for n, sent in enumerate(local, len(held) + 1)})
            picked = by_place.get(wanted)
            if picked is None:
                self.console.line(
                    f"crow: {wanted} is not one of your queued prompts (/queue lists them)"
                )
                return
            chosen = [picked]
        else:
            chosen = list(numbered.values())
        if not chosen:
            self.console.line("crow: none of the queued prompts is yours")
            return
        for sent in chosen:
            sent.withdrawn = True
            if sent in chat.unsent:
                chat.unsent.remove(sent)
                chat.returned(sent)
            else:
                sent.withdraw.set()  # the agent answers -32800: back to the history
        if len(chosen) == 1:
            self.saved = chosen[0].text  # to edit and send again
            self.console.line("crow: withdrawn; it is back in the input line")
        else:
            self.console.line(f"crow: {len(chosen)} prompts withdrawn; Up brings them back")
        chat.show_status()

    def _held_sent(self) -> dict[str, Any]:
        """Your held prompts (by the agent's message id) and the sends they are."""
        chat = self.chat
        waiting = [s for s in chat.follow.sending if s.message_id is None and s not in chat.unsent]
        found: dict[str, Any] = {}
        for item in chat.follow.queue:
            if not item.get("yours"):
                continue
            preview = str(item.get("preview", "")).rstrip("…")
            for sent in waiting:
                if " ".join(sent.text.split()).startswith(preview):
                    found[str(item.get("messageId"))] = sent
                    waiting.remove(sent)
                    break
        return found

    # ---- permission questions ----------------------------------------------------------
    async def ask(self, request: schema.RequestPermissionRequest) -> Any:
        """Ask in place of the input line; cancelled when the agent withdraws it."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.questions.append((request, future))
        self.wake(questions=False)  # one at a time: this one waits its turn
        return await future

    async def _ask_questions(self) -> None:
        while self.questions:
            request, future = self.questions.pop(0)
            if future.done():
                continue  # answered elsewhere, or the turn was cancelled
            outcome = await self._question(request, future)
            if not future.done():
                future.set_result(outcome)

    async def _question(
        self, request: schema.RequestPermissionRequest, future: asyncio.Future[Any]
    ) -> Any:
        chat = self.chat
        session = chat.session
        projection = session.projection if session is not None else None
        self.console.line("\n".join(question_lines(request, projection, chat.paint)))
        options = list(request.options)
        asking: PromptSession[str] = PromptSession(input=self.input, output=self.output)
        self.asking = asking

        def withdrawn(_: Any) -> None:  # answered elsewhere, or the turn was cancelled
            if _running(asking):
                asking.app.exit(exception=_Wake())

        future.add_done_callback(withdrawn)
        try:
            while not future.done():
                try:
                    answer = await asking.prompt_async(
                        f"choose 1-{len(options)}: ", handle_sigint=False
                    )
                except KeyboardInterrupt:
                    chat.interrupt()  # as Ctrl-C in the turn: cancel it
                    return CANCELLED
                except (EOFError, _Wake):
                    return CANCELLED
                choice = pick(options, answer)
                if choice is not None:
                    return _selected(choice)
                self.console.line(f"  answer a number from 1 to {len(options)}, y or n")
            return CANCELLED
        finally:
            self.asking = None


def _running(session: PromptSession[str]) -> bool:
    app = session.app
    return bool(app.is_running) and app.future is not None and not app.future.done()
