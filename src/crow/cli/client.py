"""``crow run``, ``crow chat`` and ``crow sessions``: their options and help.

The commands themselves are the line client (``crow.client``). ``crow --help`` and
``crow serve`` build the whole parser; importing the client (prompt_toolkit, the
ACP models) for that would slow the agent's start-up, so each command imports its
client module when it runs.
"""

from __future__ import annotations

import argparse
import os

__all__ = [
    "CHAT_HELP",
    "RUN_HELP",
    "SESSIONS_HELP",
    "add_chat_arguments",
    "add_run_arguments",
    "add_sessions_arguments",
    "chat",
    "run",
    "sessions",
]

RUN_HELP = """crow run "prompt": one prompt, the reply on stdout, the outcome in the exit code.

    0 end_turn   1 error   2 usage   3 refusal   4 max_tokens   5 cancelled
    6 a permission was needed (pass --yes or --no)   7 protocol or connection failure
    8 max_turn_requests   9 --verify: the judge's final verdict is fail or unknown
    10 --session names no session   11 --no-wait: the session is busy with another turn

stdout carries the agent's reply (or, with --json, every session/update
as one JSON line); tool activity, thoughts and Crow's notes go to stderr as
short lines; on a terminal a status line on stderr says what a quiet turn
waits for (the agent starting, the tool servers, the model, a retry, a tool).
With --verify, crow serve's judge checks the turn once it ends (its model,
rubric and check command from [judge] in config.toml; --check names one) and
its verdict is shown on stderr; on "fail" the judge may ask the agent to fix it
(up to [judge] max_rounds), and crow run waits for the final verdict.
On a session busy with another client's turn (--url, --session) the prompt
waits in the session's queue (Ctrl-C withdraws it); --no-wait refuses at once.
Ctrl-C cancels the turn, or ends a permission question and the turn; a second
Ctrl-C leaves at once.  If the connection is lost, crow run says how to go on
with the session (crow chat --session ID)."""
CHAT_HELP = """crow chat: a line REPL on the client role, for people at a terminal.

    Enter                    send the prompt; while a turn runs it is queued
                             (held by the agent, sent in order as turns end)
    Alt-Enter, Esc Enter     a new line; while a turn runs, steer: the prompt goes
                             into the running turn (so does /steer TEXT)
    a line ending in "\\"    continues on the next line
    Tab                      complete the slash commands (/help lists them)
    Up, Down                 the input history ($CROW_HOME/history)
    Ctrl-C                   cancel the running turn (whoever started it); your
                             queued prompts come back to the history (Up)
    Ctrl-C again             leave while the cancel is under way
    Ctrl-C (empty prompt)    leave; on a line with text it clears the line
    Ctrl-D, /exit, /quit     leave
    /queue                   list the held prompts; /queue drop [N] withdraws yours

The chat follows its session: turns other clients drive show too, their prompts
marked "them>" (the judge's "judge>").  The reply streams as it arrives; tool
calls, thoughts and Crow's notes are short lines, a tool call in flight updates
in place, and a status line above the prompt says what the agent is doing and
how many prompts are queued.  A turn that ends other than with end_turn says
so in one line, such as [cancelled], in a replay too.  With --session ID the
session's history is replayed first.  With --url, a lost connection is retried
with backoff and the session resumed from where it was (what you typed is kept
and sent).  Prompts can come from a pipe (a line each); permission questions
are then refused."""
SESSIONS_HELP = """crow sessions: list, show (the replayed conversation as text), delete.

crow sessions [list] [--cwd DIR] [--limit N] [--all] [--json]
crow sessions show ID
crow sessions delete ID

Newest first, in local time; judge sessions (a judge's reasoning about another
session) only with --all.  ID may be any unique start of a session's id.  Exit
codes: 0 done, 2 usage (an ambiguous ID), 7 the agent or store cannot be
reached, 10 no such session (as crow run and crow chat --session)."""


def _server_options(parser: argparse.ArgumentParser) -> None:
    """A running server to attach to, and its token."""
    parser.add_argument("--url", help="attach to a running server (http://HOST:PORT/acp, ws://...)")
    parser.add_argument(
        "--token",
        default=os.environ.get("CROW_TOKEN"),
        help="the server's bearer token (default: $CROW_TOKEN, else the URL's ?token=, "
        "else the one a local crow serve --http wrote to $CROW_HOME/run/)",
    )


def _agent_options(parser: argparse.ArgumentParser, *, session_help: str) -> None:
    """Which agent to talk to (spawned or attached), its model, and which session."""
    parser.add_argument("--command", help="another ACP v2 agent to run (default: crow serve)")
    _server_options(parser)
    parser.add_argument("--model", help="the model (a configured name, or a model id)")
    parser.add_argument(
        "--base-url", help="an OpenAI-compatible endpoint for it, e.g. http://host:8000/v1"
    )
    parser.add_argument("--cwd", help="the session's directory (default: the current one)")
    parser.add_argument("--session", help=session_help)
    parser.add_argument(
        "--verify",
        action="store_true",
        help="have crow serve's judge verify each turn and show its verdict ([judge])",
    )
    parser.add_argument(
        "--check",
        help="with --verify: a command run in the session's directory after each turn; "
        "if it fails, the turn fails",
    )
    parser.add_argument("--no-color", action="store_true", help="no colours (so does NO_COLOR=1)")


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("prompt", help='the prompt, or "-" to read it from stdin')
    _agent_options(parser, session_help="continue this session instead of starting one")
    parser.add_argument(
        "--json", action="store_true", help="write every session/update as a JSON line on stdout"
    )
    parser.add_argument(
        "--no-wait",
        action="store_true",
        help="on a session busy with another turn, exit 11 at once instead of queueing",
    )
    answers = parser.add_mutually_exclusive_group()
    answers.add_argument("--yes", action="store_true", help="allow what the agent asks to do")
    answers.add_argument("--no", action="store_true", help="refuse what the agent asks to do")


def add_chat_arguments(parser: argparse.ArgumentParser) -> None:
    _agent_options(parser, session_help="resume this session, replaying its history first")


def add_sessions_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", nargs="?", default="list", choices=["list", "show", "delete"])
    parser.add_argument("session", nargs="?", help="the session id (show, delete)")
    parser.add_argument("--cwd", help="list only the sessions of this directory")
    parser.add_argument(
        "--limit", type=int, help="list the newest N (default: 30; 0: all)", metavar="N"
    )
    parser.add_argument("--all", action="store_true", help="list judge sessions too")
    parser.add_argument("--json", action="store_true", help="list: one JSON object per line")
    parser.add_argument("--command", help="another ACP v2 agent to ask (default: crow serve)")
    _server_options(parser)


# Each imports its client module when it runs (start-up: see above).


def run(args: argparse.Namespace) -> int:
    from ..client import run as command

    return command.main(args)


def chat(args: argparse.Namespace) -> int:
    from ..client import chat as command

    return command.main(args)


def sessions(args: argparse.Namespace) -> int:
    if args.action == "list" and not (args.url or args.command):
        from ..client.session_list import list_local  # the store itself: fast

        return list_local(args)
    from ..client import sessions as command

    return command.main(args)
