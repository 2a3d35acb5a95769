"""``crow chat``: a line REPL that follows its session.

The options and what they mean for people are in ``crow.cli.client.CHAT_HELP``.

The chat is a client of one session like any other: it shows every turn of the
session, its own or another client's (``crow.client.follow``), and its input line
stays open while turns run (``crow.client.prompt_line``).  A prompt typed while the
session is busy is *queued*: sent at once with ``_meta["crow/insert"] = "queue"``,
held by the agent and inserted in order as turns end (ACP-V2.md §6.1, [T]); the
status line says "queued (n)", ``/queue`` lists them and withdraws yours
(``$/cancel_request``).  Alt-Enter or ``/steer`` sends it with ``"steer"`` instead,
into the running turn.  Ctrl-C cancels the running turn; the agent then answers
held prompts -32800 and yours go back to the input history.  This keeps what was
typed (nothing is refused for being early) and leaves the order to the agent,
which every client shares.

With ``--url`` a lost connection is made again (``crow.client.link``); prompts
typed meanwhile, and ones the lost server held, are sent once it is back.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
from typing import Any

from crow.acp import AcpError, RequestCancelled, Session, schema
from crow.acp.transports.http_client import split_token
from crow.extensions import INSERT, QUEUE, TURN_ENDED

from .args import usage_problem
from .asking import CANCELLED
from .console import Console
from .failure import EXIT_CONNECTION, EXIT_NO_SESSION, EXIT_USAGE, FAILURES, say_failure
from .follow import HINT, Follow, Sent, ending
from .link import Link
from .paint import Paint, wants_colour
from .prompt_line import PromptLine
from .render import JUDGE_AT_WORK
from .screen import Screen, isatty
from .session_ids import lookup
from .verifying import NO_KEY, Verdicts, VerdictWaiter, can_verify, no_judge, verify_meta

__all__ = ["main"]

EXIT_INTERRUPTED = 130
LEAVE = ("/exit", "/quit")  # the client's own commands: they never reach the agent


def main(args: argparse.Namespace) -> int:
    if problem := usage_problem(args):
        print(f"crow: {problem}", file=sys.stderr)
        return EXIT_USAGE
    try:
        return asyncio.run(_chat(args))
    except FAILURES as exc:
        return say_failure(exc, args.session)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


async def _chat(args: argparse.Namespace) -> int:
    terminal = isatty(sys.stdin) and isatty(sys.stdout)
    paint = Paint(terminal and wants_colour(sys.stdout, no_color=args.no_color))
    sink: Any = Console(sys.stdout, paint) if terminal else Screen(sys.stdout, sys.stderr)
    if not terminal:
        sink.separate = True
    chat = Chat(args, sink, paint, terminal=terminal)
    try:
        return await chat.start()
    finally:
        await chat.link.close()


class Chat:
    """The session, what is shown of it, and your prompts on their way."""

    def __init__(self, args: argparse.Namespace, sink: Any, paint: Paint, *, terminal: bool):
        self.args = args
        self.sink = sink
        self.paint = paint
        self.terminal = terminal
        self.link = Link(args, on_permission=self.answer, on_update=self.on_update)
        self.follow = Follow(sink, paint, Verdicts("", None), show_mine=terminal)
        self.line = PromptLine(self) if terminal else None
        self.session: Session | None = None
        self.meta: dict[str, Any] | None = None
        self.cwd = ""
        self.replaying = True  # the first resume's replay is printed by ``replay``
        self.turn_ends: list[tuple[int, str]] = []  # (entries before it, its line)
        self.unsent: list[Sent] = []  # typed, or lost with a server: sent once connected
        self.connected = asyncio.Event()
        self.presses = 0  # Ctrl-C since the turn started
        self.leaving = asyncio.Event()
        self.exit_code = 0
        self.tasks: set[asyncio.Task[Any]] = set()

    # ---- setup -----------------------------------------------------------------
    async def start(self) -> int:
        args = self.args
        client = await self.link.open()
        self.meta = verify_meta(args.check) if args.verify else None
        if self.meta and not can_verify(client):
            print(f"crow: {no_judge(client)}", file=sys.stderr)
            return EXIT_USAGE
        if args.session:
            listed = await lookup(client, args.session)  # a unique prefix will do
            args.session = str(listed.session_id) if listed else args.session
            cwd = args.cwd or (str(listed.cwd) if listed else None) or os.getcwd()
            self.cwd = os.path.abspath(cwd)
            session = await client.resume_session(
                args.session, self.cwd, replay=True, meta=self.meta
            )
        else:
            self.cwd = os.path.abspath(args.cwd or os.getcwd())
            session = await client.new_session(self.cwd, meta=self.meta)
        self.follow.verdicts = Verdicts.of_session(session)
        if self.meta and self.follow.verdicts.handout is None:
            print(f"crow: {NO_KEY}", file=sys.stderr)
            return EXIT_USAGE
        if args.session:
            self.follow.replay(session, self.turn_ends)
        self.attach(session)
        self.say(f"crow: session {session.id} — /help lists commands, Ctrl-D leaves")
        watching = asyncio.create_task(self.watch_connection())
        try:
            if self.line is not None:
                return await self.line.run()
            return await self.run_piped()
        finally:
            watching.cancel()
            for task in list(self.tasks):
                task.cancel()

    def attach(self, session: Session) -> None:
        self.session = session
        self.replaying = False
        self.follow.attach(session)
        self.connected.set()
        self.show_status()

    def say(self, text: str, role: str = "") -> None:
        """A line of the chat's own."""
        self.follow.line(self.paint(role, text) if role else text)

    # ---- the history a resume replays ----------------------------------------------
    def on_update(self, session_id: str, update: Any) -> None:
        if self.replaying:
            if getattr(update, "session_update", None) == QUEUE:
                self.follow.update_queue(update)  # the queue as it is (after the replay)
            if getattr(update, "session_update", None) == TURN_ENDED:
                fields = update.model_extra or {}
                said = ending(str(fields.get("stopReason")), fields.get("error"))
                assert self.link.client is not None
                at = len(self.link.client.projection(session_id).entries)
                self.turn_ends.append((at, said or "[ended]"))
            return
        if self.session is None or session_id != self.session.id:
            return
        was_busy = self.follow.busy
        self.follow.update(update)
        if was_busy and not self.follow.busy:
            self.presses = 0
        self.show_status()

    # ---- what the status line says ---------------------------------------------------
    def show_status(self) -> None:
        follow = self.follow
        held = [p for p in follow.queue if p.get("yours")]
        if isinstance(self.sink, Console):
            self.sink.queued = len(follow.queue) + len(self.unsent)
            self.sink.held = [str(p.get("preview", "")) for p in held]
            self.sink.held += [f"{s.text} (sent once connected)" for s in self.unsent]
            if not self.connected.is_set():
                return  # the reconnecting status stays
            if follow.busy:
                self.sink.say(follow.status or "working", HINT)
            elif follow.status is None and follow.background:
                names = ", ".join(follow.background)
                self.sink.say(f"{len(follow.background)} running in the background: {names}")
            else:
                self.sink.say(follow.status)
        elif follow.busy or follow.status:
            self.sink.say(follow.status or "working")

    # ---- your prompts --------------------------------------------------------------
    def send(self, text: str, *, steer: bool = False) -> Sent:
        """Send a prompt; on a busy session it is queued (or steered in)."""
        sent = Sent(text, "steer" if steer else "queue")
        if not self.connected.is_set():
            self.unsent.append(sent)
            self.follow.sending.append(sent)
            self.show_status()
            return sent
        self._spawn(self._send(sent))
        return sent

    def _spawn(self, coroutine: Any) -> asyncio.Task[Any]:
        task = asyncio.create_task(coroutine)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    async def _send(self, sent: Sent) -> None:
        assert self.session is not None
        session = self.session
        if sent not in self.follow.sending:
            self.follow.sending.append(sent)
        judged = VerdictWaiter(session, self.follow.verdicts) if self.meta else None
        try:
            turn = await session.prompt(sent.text, meta={INSERT: sent.mode}, withdraw=sent.withdraw)
        except RequestCancelled:
            self._forget(sent)
            self.returned(sent)
            return
        except AcpError as exc:
            self._forget(sent)
            self.say(f"crow: not sent: {exc.message or exc}", "fail")
            if self.line is not None:
                self.line.keep(sent.text)
            return
        except ConnectionError:
            if self.link.can_reconnect:
                self.unsent.append(sent)  # sent again once connected, unless it was inserted
                return
            self._forget(sent)
            raise
        self._forget(sent)
        if turn.message_id:
            sent.message_id = turn.message_id
            self.follow.mine.add(turn.message_id)
        if judged is not None and self.terminal:
            await session.wait(turn)
            if turn.stop_reason != "cancelled" and not self.follow.busy:
                self.follow.status = JUDGE_AT_WORK
                self.show_status()
                await judged.wait()
                if self.follow.status == JUDGE_AT_WORK:
                    self.follow.status = None
                self.show_status()

    def _forget(self, sent: Sent) -> None:
        with contextlib.suppress(ValueError):
            self.follow.sending.remove(sent)
        self.show_status()

    def returned(self, sent: Sent) -> None:
        """A held prompt came back (-32800): into the input history (Up)."""
        if self.line is not None:
            self.line.remember(sent.text)
        if not sent.withdrawn:
            self.say(
                f"crow: not sent (the turn was cancelled), Up brings it back: {sent.text}", "note"
            )

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
            if text and await self._turn_piped(text):
                return self.exit_code
        return 0

    async def _turn_piped(self, text: str) -> bool:
        """Send one prompt and wait for its turn (and verdict); True to leave."""
        assert self.session is not None and isinstance(self.sink, Screen)
        session = self.session
        judged = VerdictWaiter(session, self.follow.verdicts)
        sent = Sent(text)
        self.follow.sending.append(sent)
        async with self.sink.spinning_while("working"):
            try:
                turn = await session.prompt(text)
            except AcpError as exc:
                self.say(f"crow: {exc.message or exc}")
                return False
            finally:
                self._forget(sent)
            if turn.message_id:  # its user_message may come after this answer: still yours
                self.follow.mine.add(turn.message_id)
            if await self.until(session.wait(turn)):
                return True
            if self.meta and turn.stop_reason != "cancelled":
                self.sink.say(JUDGE_AT_WORK)
                if await self.until(judged.wait()):
                    return True
        return False

    async def until(self, done: Any) -> bool:
        """Wait for ``done``; True when the chat is leaving meanwhile."""
        waiting = asyncio.ensure_future(done)
        leaving = asyncio.ensure_future(self.leaving.wait())
        finished, _ = await asyncio.wait({waiting, leaving}, return_when=asyncio.FIRST_COMPLETED)
        waiting.cancel()
        leaving.cancel()
        if waiting not in finished:
            return True
        waiting.result()  # ConnectionError when the agent went away
        return False

    # ---- keys ----------------------------------------------------------------------
    def interrupt(self) -> None:
        """Ctrl-C while the session is busy: the first cancels its turn, the next leaves."""
        if self.session is None or not self.follow.busy:
            return
        self.presses += 1
        if self.presses > 1:
            self.leave(0)
            return
        self.say("^C cancelling… (Ctrl-C again to leave)", "note")
        self._spawn(self.session.cancel())

    def leave(self, code: int) -> None:
        self.exit_code = code
        self.leaving.set()
        if self.line is not None:
            self.line.wake()

    @contextlib.contextmanager
    def sigint(self) -> Any:
        """``kill -INT`` does what Ctrl-C does (a raw terminal sends no SIGINT)."""
        loop = asyncio.get_running_loop()
        try:
            loop.add_signal_handler(signal.SIGINT, self.interrupt)
        except (NotImplementedError, RuntimeError, ValueError):
            yield
            return
        try:
            yield
        finally:
            loop.remove_signal_handler(signal.SIGINT)

    # ---- permission questions --------------------------------------------------------
    async def answer(self, request: schema.RequestPermissionRequest) -> Any:
        if self.line is None:  # prompts from a pipe: nobody to ask
            self.say(f"crow: refused {request.title!r}: nobody at a terminal to ask")
            return CANCELLED
        return await self.line.ask(request)

    # ---- a server that goes away -------------------------------------------------------
    async def watch_connection(self) -> None:
        while True:
            client = self.link.client
            assert client is not None
            await client.closed.wait()
            if self.leaving.is_set():
                return
            if not self.link.can_reconnect:
                self.say("crow: the agent went away", "fail")
                self.leave(EXIT_CONNECTION)
                return
            await self.reconnect()

    async def reconnect(self) -> None:
        assert self.session is not None
        self.connected.clear()
        self.follow.status = None
        url = self.args.url
        began = asyncio.get_running_loop().time()

        async def waiting(attempt: int, seconds: float, why: str) -> None:
            if isinstance(self.sink, Console):
                self.sink.say(f"reconnecting to {_bare(url)} (attempt {attempt}: {why})")
            await asyncio.sleep(seconds)

        if isinstance(self.sink, Console):
            self.sink.say(f"the connection to {_bare(url)} was lost; reconnecting")
        try:
            session = await self.link.reopen(
                self.session, cwd=self.cwd, meta=self.meta, waiting=waiting
            )
        except AcpError as exc:
            self.say(f"crow: {_bare(url)} no longer has session {self.session.id}: {exc.message}")
            self.leave(EXIT_NO_SESSION)
            return
        took = asyncio.get_running_loop().time() - began
        self.attach(session)
        self.say(
            f"crow: the connection to {_bare(url)} was lost; reconnected after {took:.0f} s "
            "and caught up",
            "note",
        )
        unsent, self.unsent = self.unsent, []
        for sent in unsent:
            if sent.message_id is None:  # not seen inserted while we were away
                self._spawn(self._send(sent))
            else:
                self._forget(sent)
        self.show_status()


def _bare(url: str) -> str:
    return split_token(url)[0]
