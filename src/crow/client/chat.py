"""``crow chat``: a line REPL on the shared session projection.

The options and what they mean for people are in ``crow.client.args.CHAT_HELP``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Coroutine, Iterable, Iterator
from typing import Any, TextIO, cast

from prompt_toolkit import PromptSession
from prompt_toolkit.application import get_app
from prompt_toolkit.completion import CompleteEvent, Completer, Completion
from prompt_toolkit.document import Document
from prompt_toolkit.filters import Condition
from prompt_toolkit.history import FileHistory, History, InMemoryHistory
from prompt_toolkit.input import Input, create_input
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent
from prompt_toolkit.keys import Keys
from prompt_toolkit.output import Output, create_output

from crow.acp import AcpError, ClientSide, Message, Session, ToolCall, schema
from crow.config import Paths
from crow.extensions import TURN_ENDED

from .args import no_such_session, serve_options, usage_problem
from .asking import CANCELLED, _selected, pick
from .connect import AgentUnavailable, connect
from .render import TextRenderer, activity, status
from .screen import ReplyStream, Screen, isatty
from .session_ids import AmbiguousSession, resolve
from .verifying import NO_KEY, Verdicts, VerdictWaiter, can_verify, no_judge, verify_meta

__all__ = ["main"]

EXIT_USAGE, EXIT_CONNECTION, EXIT_NO_SESSION, EXIT_INTERRUPTED = 2, 7, 10, 130
PROMPT = "you> "
CONTINUATION = "  .. "
LEAVE = ("/exit", "/quit")  # the client's own commands: they never reach the agent


def main(args: argparse.Namespace) -> int:
    if problem := usage_problem(args):
        print(f"crow: {problem}", file=sys.stderr)
        return EXIT_USAGE
    try:
        return asyncio.run(_chat(args))
    except AgentUnavailable as exc:
        print(f"crow: {exc}", file=sys.stderr)
        return EXIT_CONNECTION
    except AmbiguousSession as exc:
        print(f"crow: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (AcpError, ConnectionError) as exc:
        if no_such_session(exc, args.session):
            print(f"crow: no session {args.session} (crow sessions lists them)", file=sys.stderr)
            return EXIT_NO_SESSION
        detail = getattr(exc, "message", None) or str(exc) or "the agent went away"
        print(f"crow: {detail}", file=sys.stderr)
        return EXIT_CONNECTION
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


async def _chat(args: argparse.Namespace) -> int:
    screen = Screen(sys.stdout, sys.stderr, separate=True)
    chat = Chat(screen)
    async with connect(
        args.command,
        url=args.url,
        token=args.token,
        on_permission=chat.answer,
        serve_options=serve_options(args),
    ) as client:
        meta = verify_meta(args.check) if args.verify else None
        if meta and not can_verify(client):
            print(f"crow: {no_judge(client)}", file=sys.stderr)
            return EXIT_USAGE
        chat.verify = bool(meta)
        if args.session:
            args.session = await resolve(client, args.session)  # a unique prefix will do
            cwd = args.cwd or await _session_cwd(client, args.session) or os.getcwd()
            chat.note_turn_ends(client)
            session = await client.resume_session(
                args.session, os.path.abspath(cwd), replay=True, meta=meta
            )
            chat.verdicts = Verdicts.of_session(session)
            chat.replay(session)
        else:
            session = await client.new_session(os.path.abspath(args.cwd or os.getcwd()), meta=meta)
        chat.attach(client, session)
        if meta and chat.verdicts.handout is None:
            print(f"crow: {NO_KEY}", file=sys.stderr)
            return EXIT_USAGE
        screen.line(f"crow: session {session.id} — /help lists commands, Ctrl-D leaves")
        return await chat.run()


async def _session_cwd(client: ClientSide, session_id: str) -> str | None:
    """The directory a stored session belongs to, from ``session/list``."""
    cursor: str | None = None
    try:
        for _ in range(1000):
            page = await client.list_sessions(cursor=cursor)
            for info in page.sessions:
                if info.session_id == session_id:
                    return str(info.cwd)
            if page.next_cursor in (schema.UNSET, None):
                return None
            cursor = str(page.next_cursor)
    except AcpError:
        return None  # an agent without session/list: the caller falls back
    return None


class CommandCompleter(Completer):
    """``/name`` from the session's available commands, the description as meta."""

    def __init__(self) -> None:
        self.session: Session | None = None

    def commands(self) -> list[Any]:
        if self.session is None:
            return []
        announced = self.session.projection.commands
        if announced:
            return announced
        listed = getattr(self.session.response, "available_commands", None)
        return list(listed) if isinstance(listed, list) else []

    def get_completions(
        self, document: Document, complete_event: CompleteEvent
    ) -> Iterable[Completion]:
        text = document.text_before_cursor
        if not text.startswith("/") or any(c.isspace() for c in text):
            return
        for command in self.commands():
            name = f"/{command.name}"
            if name.startswith(text):
                yield Completion(
                    name, start_position=-len(text), display_meta=command.description or ""
                )


def _bindings() -> KeyBindings:
    bindings = KeyBindings()

    @bindings.add("escape", "enter")
    def _newline(event: KeyPressEvent) -> None:
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
        else:
            event.app.exit(exception=KeyboardInterrupt, style="class:aborting")

    return bindings


def _history() -> History:
    home = Paths.from_env().home
    try:
        from crow.private import private_dir, private_file  # 0700 / 0600: prompts are private

        private_file(private_dir(home) / "history")
    except OSError:
        return InMemoryHistory()
    return FileHistory(str(home / "history"))


class Chat:
    """The REPL: prompts between turns, and a turn's output, keys and questions."""

    def __init__(self, screen: Screen) -> None:
        self.screen = screen
        self.verify = False  # --verify: each turn waits for the judge's final verdict
        self.verdicts = Verdicts("", None)  # which messages are proven verdicts
        self.completer = CommandCompleter()
        self.input: Input | None = None
        self.output: Output | None = None
        self.client: ClientSide | None = None
        self.session: Session | None = None
        self.renderer: TextRenderer | None = None  # set while a turn runs
        self.presses = 0
        self.leave = asyncio.Event()
        self.cancelling: list[asyncio.Task[None]] = []
        self.typeahead = ""
        self.asking = asyncio.Lock()  # one permission question at a time
        self.turn_ends: list[tuple[int, str]] = []  # (entries before it, its line), replayed

    # ---- setup -----------------------------------------------------------------
    def attach(self, client: ClientSide, session: Session) -> None:
        self.client, self.session = client, session
        self.verdicts = Verdicts.of_session(session)
        self.completer.session = session
        client.on_update(self.on_update)

    def note_turn_ends(self, client: ClientSide) -> None:
        """While a resume replays, note where each turn that did not end with
        ``end_turn`` ended (``_crow/turnEnded``: after how many entries)."""

        def on_update(session_id: str, update: Any) -> None:
            if self.session is None and getattr(update, "session_update", None) == TURN_ENDED:
                fields = update.model_extra or {}
                ending = _ending(str(fields.get("stopReason")), fields.get("error"))
                at = len(client.projection(session_id).entries)
                self.turn_ends.append((at, ending or "[ended]"))

        client.on_update(on_update)

    def replay(self, session: Session) -> None:
        """Print the history a resume with replay rebuilt in the projection, and
        ``[cancelled]``/``[error: …]`` where a turn ended so."""
        projection = session.projection
        ends: dict[int, list[str]] = {}
        for at, text in self.turn_ends:
            ends.setdefault(at, []).append(text)
        for line in ends.get(0, []):
            self.screen.line(line)
        for shown, entry in enumerate(projection.entries, 1):
            if isinstance(entry, Message):
                self._replay_message(session, entry)
            elif isinstance(entry, ToolCall):
                update = schema.ToolCallUpdateVariant(
                    tool_call_id=entry.tool_call_id,
                    status=entry.status,
                    raw_output=entry.fields.get("raw_output", schema.UNSET),
                )
                note = activity(projection, update, self.verdicts)
                if note:
                    self.screen.line(note)
            for line in ends.get(shown, []):
                self.screen.line(line)

    def _replay_message(self, session: Session, message: Message) -> None:
        projection = session.projection
        if message.role == "user":
            self.screen.line(PROMPT + message.text.replace("\n", "\n" + CONTINUATION))
        elif message.role == "thought":
            thought = schema.AgentThought(message_id=message.message_id)
            note = activity(projection, thought, self.verdicts)
            if note:
                self.screen.line(note)
        elif self.verdicts.is_note(message):
            update = schema.AgentMessage(message_id=message.message_id, meta=message.meta)
            note = activity(projection, update, self.verdicts)
            if note:
                self.screen.line(note)
        elif message.text:
            self.screen.write(message.text)
            if not message.text.endswith("\n"):
                self.screen.write("\n")

    # ---- the loop --------------------------------------------------------------
    async def run(self) -> int:
        if not isatty(sys.stdin):
            return await self.run_piped()
        self.input = create_input(sys.stdin)
        self.output = create_output(sys.stdout)
        prompts: PromptSession[str] = PromptSession(
            history=_history(),
            completer=self.completer,
            complete_while_typing=True,
            reserve_space_for_menu=6,
            key_bindings=_bindings(),
            multiline=False,
            prompt_continuation=CONTINUATION,
            input=self.input,
            output=self.output,
        )
        # Raw mode all along (prompt_toolkit nests its own): Ctrl-C is a key, not a
        # SIGINT (the agent, in a session of its own, would not get one anyway); and
        # nothing the user types echoes over the streaming reply.
        with self.input.raw_mode():
            while True:
                default, self.typeahead = self.typeahead, ""
                try:
                    text = await prompts.prompt_async(PROMPT, default=default)
                except (KeyboardInterrupt, EOFError):
                    return 0
                if not text.strip():
                    continue
                if text.strip() in LEAVE:
                    return 0
                if await self.turn(text.strip()):
                    return 0

    async def run_piped(self) -> int:
        """Prompts from a pipe or a file: a line each (a trailing backslash joins
        the next), no line editor; nobody is there to answer a permission question."""
        pending: list[str] = []
        while line := await asyncio.to_thread(sys.stdin.readline):
            line = line.rstrip("\n")
            if line.endswith("\\"):
                pending.append(line[:-1])
                continue
            text = "\n".join([*pending, line]).strip()
            pending = []
            if text in LEAVE:
                return 0
            if text and await self.turn(text):
                return 0
        return 0

    async def turn(self, text: str) -> bool:
        """Send one prompt and show its turn; True when the person chose to leave."""
        assert self.session is not None
        session = self.session
        self.renderer = TextRenderer(
            session.projection, cast(TextIO, ReplyStream(self.screen)), self.verdicts
        )
        self.presses, self.leave = 0, asyncio.Event()
        spinning = asyncio.create_task(self.screen.spin())
        try:
            with self.screen.spinner(), self._keys():
                judged = VerdictWaiter(session, self.verdicts)
                try:
                    turn = await session.prompt(text)
                except AcpError as exc:
                    self.screen.line(f"crow: {exc.message or exc}")
                    return False
                if await self._until(session.wait(turn)):
                    return True
                if self.verify and turn.stop_reason != "cancelled":
                    self.screen.say("the judge is checking the turn")
                    if await self._until(judged.wait()):
                        return True
        finally:
            spinning.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await spinning
            for cancelling in self.cancelling:
                with contextlib.suppress(Exception):
                    await cancelling
            self.cancelling.clear()
            self.renderer.finish()
            self.renderer = None
        ending = _ending(turn.stop_reason or "end_turn", turn.error)
        if ending:
            self.screen.line(ending)
        return False

    async def _until(self, done: Coroutine[Any, Any, Any]) -> bool:
        """Wait for ``done``; True when the person chose to leave meanwhile."""
        waiting = asyncio.create_task(done)
        leaving = asyncio.create_task(self.leave.wait())
        finished, _ = await asyncio.wait({waiting, leaving}, return_when=asyncio.FIRST_COMPLETED)
        waiting.cancel()
        leaving.cancel()
        if waiting not in finished:
            return True
        waiting.result()  # ConnectionError when the agent went away
        return False

    # ---- while a turn runs -----------------------------------------------------
    def on_update(self, session_id: str, update: Any) -> None:
        session, renderer = self.session, self.renderer
        if session is None or session_id != session.id or renderer is None:
            return  # between turns nothing is written over the prompt
        renderer.update(update)
        self.screen.say(status(session.projection, update) or self.screen.status)
        note = activity(session.projection, update, self.verdicts)
        if note:
            if not renderer.ends_with_newline:
                renderer.finish()
            self.screen.line(note)

    @contextlib.contextmanager
    def _keys(self) -> Iterator[None]:
        """Read keys during the turn: Ctrl-C interrupts, typing waits for the next prompt."""
        loop = asyncio.get_running_loop()
        with contextlib.ExitStack() as stack:
            if self.input is not None and sys.stdin.isatty():
                stack.enter_context(self.input.attach(self._on_keys))
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(signal.SIGINT, self.interrupt)  # kill -INT, too
                stack.callback(loop.remove_signal_handler, signal.SIGINT)
            yield

    def _on_keys(self) -> None:
        assert self.input is not None
        for press in self.input.read_keys():
            if press.key == Keys.ControlC:
                self.interrupt()
            elif not isinstance(press.key, Keys) and press.key.isprintable():
                self.typeahead += press.key
        if self.input.closed:
            self.leave.set()

    def interrupt(self) -> None:
        """Ctrl-C in a turn: the first cancels it, the next one leaves."""
        if self.renderer is None or self.session is None:
            return
        self.presses += 1
        if self.presses > 1:
            self.leave.set()
            return
        if not self.renderer.ends_with_newline:
            self.renderer.finish()
        self.screen.line("^C cancelling… (Ctrl-C again to leave)")
        self.cancelling.append(asyncio.create_task(self.session.cancel()))

    async def answer(self, request: schema.RequestPermissionRequest) -> Any:
        """A permission question, asked inline with prompt_toolkit on the event loop."""
        options = list(request.options)
        if self.input is None:  # prompts from a pipe: nobody to ask
            self.screen.line(f"crow: refused {request.title!r}: nobody at a terminal to ask")
            return CANCELLED
        async with self.asking:
            if self.renderer is not None and not self.renderer.ends_with_newline:
                self.renderer.finish()
            with self.screen.paused():
                self.screen.line(f"? {request.title}")
                description = getattr(request, "description", None)
                if isinstance(description, str) and description:
                    self.screen.line(f"  {description}")
                for number, option in enumerate(options, 1):
                    self.screen.line(f"  {number}) {option.name}")
                return await self._choose(options)

    async def _choose(self, options: list[Any]) -> Any:
        question: PromptSession[str] = PromptSession(input=self.input, output=self.output)
        while True:
            try:
                answer = await question.prompt_async(
                    f"choose 1-{len(options)}: ", handle_sigint=False
                )
            except KeyboardInterrupt:
                self.interrupt()  # as Ctrl-C in the turn: cancel it
                return CANCELLED
            except EOFError:
                return CANCELLED
            choice = pick(options, answer)
            if choice is not None:
                return _selected(choice)
            self.screen.line(f"  answer a number from 1 to {len(options)}, y or n")


def _ending(stop: str, error: Any) -> str | None:
    """The line that says how a turn ended, or None for ``end_turn``."""
    if stop == "end_turn":
        return None
    if stop == "error":
        message = _error_message(error)
        return f"[error: {message}]" if message else "[error]"
    return f"[{stop}]"


def _error_message(error: Any) -> str | None:
    fields = error if isinstance(error, dict) else getattr(error, "__dict__", {})
    message = fields.get("message")
    return message if isinstance(message, str) and message else None
