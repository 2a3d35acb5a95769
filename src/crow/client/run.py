"""``crow run``: one prompt, its reply on stdout, its outcome in the exit code.

The options and what they mean for people are in ``crow.cli.client.RUN_HELP``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import Coroutine, Iterator
from typing import Any, TextIO, cast

from crow import pipes
from crow.acp import ClientSide, InvalidParams, RequestCancelled, Session, Turn
from crow.acp.transports.http_client import split_token
from crow.extensions import INSERT
from crow.redact import redact_url

from .args import serve_options, usage_problem
from .asking import PermissionAsker
from .connect import connect
from .failure import FAILURES, say_failure
from .paint import Paint, wants_colour
from .render import JUDGE_AT_WORK, TextRenderer, activity, status, tool_line
from .screen import ERASE, ReplyStream, Screen
from .session_ids import resolve
from .verifying import (
    NO_KEY,
    Verdicts,
    VerdictWaiter,
    can_verify,
    no_judge,
    unknown_line,
    verify_meta,
)

__all__ = ["EXIT", "main"]

EXIT = {
    "end_turn": 0,
    "error": 1,
    "refusal": 3,
    "max_tokens": 4,
    "cancelled": 5,
    "max_turn_requests": 8,
}
EXIT_USAGE, EXIT_PERMISSION, EXIT_INTERRUPTED = 2, 6, 130
EXIT_NOT_VERIFIED = 9  # --verify: the judge's final verdict is not "pass"
EXIT_BUSY = 11  # --no-wait: the session is busy with another turn
MESSAGES = {
    "error": "the turn failed",
    "refusal": "the model refused",
    "max_tokens": "the reply hit the model's output limit",
    "cancelled": "cancelled",
    "max_turn_requests": "the turn hit its step limit (model.max_steps)",
}


def main(args: argparse.Namespace) -> int:
    if problem := usage_problem(args):
        print(f"crow: {problem}", file=sys.stderr)
        return EXIT_USAGE
    prompt = sys.stdin.read() if args.prompt == "-" else args.prompt
    if not prompt.strip():
        print("crow: the prompt is empty", file=sys.stderr)
        return EXIT_USAGE
    mode = "yes" if args.yes else "no" if args.no else "refuse"
    if mode == "refuse" and args.prompt != "-" and sys.stdin.isatty():
        mode = "ask"
    asker = PermissionAsker(mode)
    asker.paint = Paint(wants_colour(sys.stderr, no_color=args.no_color))
    opened: dict[str, str] = {}  # the session's id, once there is one
    try:
        code = asyncio.run(_run(args, prompt, asker, opened))
        _say_the_session(opened, code, json_lines=args.json)
        return code
    except (*FAILURES, Dropped) as exc:
        return say_failure(exc, args.session)


def _say_the_session(opened: dict[str, str], code: int, *, json_lines: bool) -> None:
    """The session's id, last, so it can be continued: on stderr, and with --json
    a last line ``{"sessionId", "end": {"stopReason", "exitCode"}}`` too."""
    if "id" not in opened:
        return
    if json_lines:
        end = {"stopReason": opened.get("stop"), "exitCode": code}
        print(json.dumps({"sessionId": opened["id"], "end": end}), flush=True)
    print(f"crow: session {opened['id']} (--session {opened['id']} continues it)", file=sys.stderr)


async def _run(
    args: argparse.Namespace, prompt: str, asker: PermissionAsker, opened: dict[str, str]
) -> int:
    cwd = os.path.abspath(args.cwd or os.getcwd())
    screen = asker.screen = Screen(sys.stdout, sys.stderr)
    async with contextlib.AsyncExitStack() as stack:
        await stack.enter_async_context(screen.spinning_while("starting the agent"))
        if args.url:
            screen.say(f"connecting to {redact_url(args.url)}")
        with _ctrl_c_leaves_at_once(screen):  # nothing was sent yet: nothing to cancel
            client = await stack.enter_async_context(
                connect(
                    args.command,
                    url=args.url,
                    token=args.token,
                    on_permission=asker,
                    serve_options=serve_options(args),
                )
            )
            screen.say("opening the session")
            meta = verify_meta(args.check) if args.verify else None
            if meta and not can_verify(client):
                print(f"crow: {no_judge(client)}", file=sys.stderr)
                return EXIT_USAGE
            if args.session:
                args.session = await resolve(client, args.session)  # a unique prefix will do
                session = await client.resume_session(args.session, cwd, replay=False, meta=meta)
            else:
                session = await client.new_session(cwd, meta=meta)
            opened["id"] = session.id
        verdicts = Verdicts.of_session(session)
        if meta and verdicts.handout is None:
            print(f"crow: {NO_KEY}", file=sys.stderr)
            return EXIT_USAGE
        asker.projection = session.projection
        began = asyncio.Event()
        renderer, notes = _attach_output(
            client,
            session,
            screen,
            verdicts=verdicts,
            json_lines=args.json,
            paint=asker.paint,
            prompt=prompt,
            began=began,
        )
        judged = VerdictWaiter(session, verdicts)
        _leave_when_the_reader_goes(session)
        try:
            turn = await _prompt(session, prompt, screen, no_wait=args.no_wait)
            if turn is None:
                return EXIT["cancelled"]  # withdrawn from the queue
            if not began.is_set():  # (its updates may come before the answer)
                screen.say("working")
            if await _wait(session, _until_done(session, turn, asker), screen):
                return EXIT_INTERRUPTED
            opened["stop"] = turn.stop_reason or "end_turn"
            verdict = None
            if args.verify and turn.stop_reason != "cancelled" and not asker.refused:
                if not args.json:
                    renderer.finish()  # the reply's last line is done: the status shows below
                screen.say(JUDGE_AT_WORK)
                if await _wait(session, judged.wait(), screen):
                    return EXIT_INTERRUPTED
                verdict = judged.final()
        except Busy:
            print(
                f"crow: session {session.id} is busy with another turn; without --no-wait "
                "the prompt waits in its queue",
                file=sys.stderr,
            )
            return EXIT_BUSY
        except ConnectionError:
            raise Dropped(_resume_hint(args, session.id)) from None
    if not args.json:
        renderer.finish()
    if asker.refused:
        print(
            f"crow: the agent asked to {asker.refused[0]!r}; pass --yes to allow it or --no "
            "to refuse it",
            file=sys.stderr,
        )
        return EXIT_PERMISSION
    stop = turn.stop_reason or "end_turn"
    if stop != "end_turn":
        error = getattr(turn.error, "message", None)
        if not (error and any(error in note for note in notes)):  # said once is enough
            reason = error or MESSAGES.get(stop, f"the turn ended: {stop}")
            print(f"crow: {reason}", file=sys.stderr)
        return EXIT.get(stop, 1)
    if args.verify:
        return _verified(verdict, notes)
    return EXIT[stop]


class Dropped(Exception):
    """The connection to the agent was lost mid-turn; says how to resume."""


class Busy(Exception):
    """--no-wait: the session is busy."""


def _resume_hint(args: argparse.Namespace, session_id: str) -> str:
    where = f"--url {redact_url(split_token(args.url)[0])} " if args.url else ""
    return (
        f"the connection to the agent was lost; the session goes on: "
        f"crow chat {where}--session {session_id}"
    )


async def _prompt(session: Session, text: str, screen: Screen, *, no_wait: bool) -> Turn | None:
    """Send the prompt; on a busy session it waits in the queue (Ctrl-C withdraws it:
    None), or with ``no_wait`` raises Busy."""
    if no_wait:
        try:
            return await session.prompt(text, meta={INSERT: "reject"})
        except InvalidParams as exc:
            if isinstance(exc.data, dict) and exc.data.get("reason") == "busy":
                raise Busy from None
            raise
    if session.projection.state != "idle":
        screen.say("waiting in the session's queue: another turn runs")
    loop = asyncio.get_running_loop()
    withdraw = asyncio.Event()
    loop.add_signal_handler(signal.SIGINT, withdraw.set)
    try:
        return await session.prompt(text, withdraw=withdraw)
    except RequestCancelled:
        screen.erase()
        print("\ncrow: withdrawn from the session's queue", file=sys.stderr)
        return None
    finally:
        loop.remove_signal_handler(signal.SIGINT)


def _verified(verdict: dict[str, Any] | None, notes: list[str]) -> int:
    """The exit code of a verified turn: 0 only when the judge's final verdict passed."""
    if verdict is None:
        print("crow: the judge's follow-up turn was cancelled", file=sys.stderr)
        return EXIT["cancelled"]
    if verdict.get("verdict") == "pass":
        return 0
    explained = unknown_line(verdict)
    if verdict.get("verdict") == "unknown" and not any(explained in note for note in notes):
        print(f"crow: {explained}", file=sys.stderr)
    return EXIT_NOT_VERIFIED


def _attach_output(
    client: ClientSide,
    session: Session,
    screen: Screen,
    *,
    verdicts: Verdicts,
    json_lines: bool,
    paint: Paint,
    prompt: str,
    began: asyncio.Event,
) -> tuple[TextRenderer, list[str]]:
    """Render the session's updates; returns the renderer and the lines written to
    stderr about them (notes included).  On a terminal a tool call in flight is shown
    in place (the status line), and only its end as a line.  ``began`` is set once an
    update of the turn said what it waits for."""
    renderer = TextRenderer(session.projection, cast(TextIO, ReplyStream(screen)), verdicts)
    shown: list[str] = []
    # On a busy session the prompt is queued: what runs first is another client's
    # turn, not shown; ours begins with our prompt's user_message.
    ours = session.projection.state == "idle"

    def on_update(session_id: str, update: Any) -> None:
        nonlocal ours
        if session_id != session.id:
            return
        if not ours:
            kind = getattr(update, "session_update", None)
            message = session.projection.messages.get(getattr(update, "message_id", ""))
            if kind != "user_message" or message is None or message.text != prompt:
                return  # another client's turn, before ours
            ours = True
        if json_lines:
            screen.write(json.dumps({"sessionId": session_id, "update": update.to_wire()}) + "\n")
        else:
            renderer.update(update)
        said = status(session.projection, update)
        if said is not None:
            began.set()  # the turn says what it waits for: "working" would hide it
        screen.say(said or screen.status)
        tool = tool_line(session.projection, update)
        if tool is not None and screen.in_place:
            line, over = tool
            if not over:
                screen.show_tool(update.tool_call_id, line.split(" ", 1)[-1])
                return
            screen.show_tool(update.tool_call_id, None)
        note = activity(session.projection, update, verdicts)
        if note:
            screen.line(paint.mark(note))
            shown.append(note)

    client.on_update(on_update)
    return renderer, shown


#: How long a command whose reader went away waits for the turn it cancels to end.
CANCEL_ON_GONE_S = 2.0


def _leave_when_the_reader_goes(session: Session) -> None:
    """stdout's reader gone (``crow run … | head -1``): cancel the turn, then leave at
    once with crow.pipes' status, saying nothing (see there)."""
    loop = asyncio.get_running_loop()
    leaving: list[asyncio.Task[None]] = []

    async def leave() -> None:
        with contextlib.suppress(Exception):
            async with asyncio.timeout(CANCEL_ON_GONE_S):
                if session.projection.state != "idle":
                    await session.cancel()
                    while session.projection.state != "idle":
                        await session.client.next_update(session.id)
        sys.stderr.flush()
        os._exit(pipes.EXIT_READER_GONE)

    def gone() -> None:
        if not leaving:  # once
            leaving.append(loop.create_task(leave()))

    pipes.on_gone(gone)


@contextlib.contextmanager
def _ctrl_c_leaves_at_once(screen: Screen) -> Iterator[None]:
    """Ctrl-C while the agent starts: leave now, status 130, no traceback.

    Cancelling the start-up instead (asyncio.run's own SIGINT handling) depends on
    every await on the way giving up in time; an agent that never answers
    ``initialize`` was once seen to keep crow run waiting.  Leaving at once closes
    the agent's stdin with the process, and an ACP agent ends on that."""
    loop = asyncio.get_running_loop()

    def leave() -> None:
        sys.stderr.write(ERASE if screen.shown else "\n")
        sys.stderr.flush()
        os._exit(EXIT_INTERRUPTED)

    loop.add_signal_handler(signal.SIGINT, leave)
    try:
        yield
    finally:
        loop.remove_signal_handler(signal.SIGINT)


async def _wait(session: Session, until: Coroutine[Any, Any, Any], screen: Screen) -> bool:
    """Wait for ``until`` (the turn's end, or the judge's verdict); Ctrl-C cancels the
    turn, a second one gives up, and so does the first while no turn runs (the
    judge is thinking: there is nothing to cancel).  True if given up."""
    loop = asyncio.get_running_loop()
    presses = 0
    gave_up = asyncio.Event()
    cancelling: list[asyncio.Task[None]] = []

    def on_interrupt() -> None:
        nonlocal presses
        presses += 1
        if presses == 1 and session.projection.state == "idle" and session.projection.turns == []:
            gave_up.set()
        elif presses == 1:
            screen.erase()
            print("\ncrow: cancelling (Ctrl-C again to quit)", file=sys.stderr, flush=True)
            screen.say("cancelling")
            cancelling.append(loop.create_task(session.cancel()))
        else:
            gave_up.set()

    loop.add_signal_handler(signal.SIGINT, on_interrupt)
    try:
        waiting = asyncio.create_task(until)
        quitting = asyncio.create_task(gave_up.wait())
        done, _ = await asyncio.wait({waiting, quitting}, return_when=asyncio.FIRST_COMPLETED)
        for task in (waiting, quitting):
            task.cancel()
        if waiting in done:
            waiting.result()
        return quitting in done
    finally:
        loop.remove_signal_handler(signal.SIGINT)


async def _until_done(session: Session, turn: Any, asker: PermissionAsker) -> None:
    cancelled_for_permission = False
    while not turn.done:
        if asker.refused and not cancelled_for_permission:
            cancelled_for_permission = True  # nothing more can happen without the flag
            await session.cancel()
            continue  # the turn may have ended while the cancel was sent: no update will come
        await session.client.next_update(session.id)
