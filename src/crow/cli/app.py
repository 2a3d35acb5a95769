"""The ``crow`` command: the table of subcommands, the parser made from it, and the
run from the command line to the exit code.  It wires the layers together, nothing else.

crow serve [--model NAME] [--base-url URL]   ACP v2 agent on stdio
crow serve --http HOST:PORT [--no-token]     ... over HTTP + WebSocket, with a token
crow init [--force]                          write a commented config.toml
crow memory ACTION ...                       the memory store (add, search, import, ...)

Each subcommand is a module of this package with ``add_arguments`` and ``main``;
``COMMANDS`` lists them in the order ``crow --help`` shows them.

Start-up matters (an editor spawns ``crow serve`` and waits for ``initialize``;
every session spawns ``crow mcp`` servers), so the subcommand modules import only
what parsing the command line needs: each command imports its own layers when it
runs, and ``--version`` reads the package metadata only when asked (importing
``importlib.metadata`` and the lookup cost 10-30 ms).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from .. import pipes
from ..runtime.imports import importing
from ..tools import remembered
from . import (
    client,
    completion,
    conductor,
    init,
    judge,
    mcp,
    memory,
    models,
    proxy,
    serve,
    store,
)
from .checks import check_args, parse
from .common import EXIT_INTERRUPTED, Refused, exit_now, tell_the_reaper
from .logs import quiet_logging

__all__ = ["COMMANDS", "WIRE_COMMANDS", "build_parser", "main", "run"]


class Command(NamedTuple):
    """One subcommand: its name, its line in ``crow --help``, its options, its run."""

    name: str
    summary: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    main: Callable[[argparse.Namespace], int]
    description: str | None = None  # crow NAME --help's text
    raw: bool = False  # the description is shown as written (it has tables)


def _completion(args: argparse.Namespace) -> int:
    """``crow completion SHELL``: the script is made from the whole parser."""
    print(completion.script(build_parser(), args.shell), end="")
    return 0


COMMANDS = (
    Command(
        "serve",
        "serve ACP v2 on stdio (for editors and clients)",
        serve.add_arguments,
        serve.main,
        serve.DESCRIPTION,
    ),
    Command(
        "models",
        "the models Crow can use, where each comes from, whether it answers",
        models.add_arguments,
        models.main,
    ),
    Command(
        "init",
        "write a config.toml for the models this machine has, the rest commented",
        init.add_arguments,
        init.main,
        init.DESCRIPTION,
    ),
    Command(
        "run",
        "send one prompt; the reply on stdout, the outcome in the exit code",
        client.add_run_arguments,
        client.run,
        client.RUN_HELP,
        raw=True,
    ),
    Command(
        "chat",
        "talk with the agent at a prompt, the replies streaming as they come",
        client.add_chat_arguments,
        client.chat,
        client.CHAT_HELP,
        raw=True,
    ),
    Command(
        "sessions",
        "list, show or delete sessions",
        client.add_sessions_arguments,
        client.sessions,
        client.SESSIONS_HELP,
        raw=True,
    ),
    Command(
        "memory",
        "add, search, list, forget, export, import or reindex memories",
        memory.add_arguments,
        memory.main,
        memory.__doc__,
        raw=True,
    ),
    Command(
        "judge",
        "watch a session and post a verdict on each turn",
        judge.add_arguments,
        judge.main,
        judge.__doc__,
        raw=True,
    ),
    Command(
        "conductor",
        "run a proxy chain (proxies in front of an agent) as one agent",
        conductor.add_arguments,
        conductor.main,
        conductor.__doc__,
        raw=True,
    ),
    Command(
        "store",
        "migrate the session store, or copy sessions to another (PostgreSQL)",
        store.add_arguments,
        store.main,
        store.__doc__,
        raw=True,
    ),
    Command(
        "proxy",
        "run one of Crow's proxies (judge, memory, record) inside a proxy chain",
        proxy.add_arguments,
        proxy.main,
        proxy.__doc__,
        raw=True,
    ),
    Command(
        "mcp",
        "run a built-in MCP server on stdio (for any MCP host)",
        mcp.add_arguments,
        mcp.main,
    ),
    Command(
        "permissions",
        'list or forget the permission answers saved with "always"',
        remembered.add_arguments,
        remembered.main,
        remembered.__doc__,
        raw=True,
    ),
    Command(
        "completion",
        "print a shell completion script (bash, zsh, fish)",
        completion.add_arguments,
        _completion,
        completion.DESCRIPTION,
    ),
)
#: Commands whose stdout is the wire (ACP or MCP): never guarded, never a first-run note.
WIRE_COMMANDS = frozenset({"serve", "mcp", "conductor", "proxy"})


class _VersionAction(argparse.Action):
    """``--version``: like argparse's own, but the metadata is read only when asked."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help="show Crow's version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        from importlib.metadata import version  # 10-30 ms: only for --version

        print(f"crow {version('crow-cli')}")  # stdout, as argparse's version action
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    """The whole command line (``crow completion`` writes its scripts from it)."""
    parser = argparse.ArgumentParser(
        prog="crow", description="Crow: a persistent AI coding agent speaking ACP v2."
    )
    parser.add_argument("--version", action=_VersionAction)
    subparsers = parser.add_subparsers(dest="subcommand", metavar="COMMAND")
    for command in COMMANDS:
        formatter = argparse.RawDescriptionHelpFormatter if command.raw else argparse.HelpFormatter
        command.add_arguments(
            subparsers.add_parser(
                command.name,
                help=command.summary,
                description=command.description,
                formatter_class=formatter,
            )
        )
    return parser


def run() -> None:
    """The ``crow`` command: ``main``, then the exit."""
    try:
        code = main()
    except SystemExit as leaving:  # argparse's exits, and crow.pipes' (the reader left)
        code = leaving.code if isinstance(leaving.code, int) else 1 if leaving.code else 0
        if leaving.code is not None and not isinstance(leaving.code, int):
            print(leaving.code, file=sys.stderr)
    except KeyboardInterrupt:  # Ctrl-C while the command line was still being read
        print("\ncrow: interrupted", file=sys.stderr)
        code = EXIT_INTERRUPTED
    # Ctrl-C from here on (the interpreter joining a worker thread, say) leaves at once,
    # quietly: the command is done.
    signal.signal(signal.SIGINT, lambda *_: os._exit(EXIT_INTERRUPTED))
    if importing():  # an import thread must not meet the interpreter's finalization
        tell_the_reaper()
        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)
    sys.exit(code)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    pipes.guard(exit_now)  # a reader that goes away ends the command quietly (crow.pipes) ...
    args = parse(parser, argv)
    if args.subcommand in WIRE_COMMANDS:
        pipes.unguard()  # ... but where stdout is the wire, the transport says what happens
    else:
        quiet_logging()
    try:
        if (code := check_args(parser, args)) is not None:
            return code
        code = _dispatch(parser, args)
        sys.stdout.flush()  # a reader that went away is found here at the latest
        return code
    except Refused as refused:
        print(refused.line, file=sys.stderr)
        return refused.code
    except KeyboardInterrupt:  # Ctrl-C before (or outside) a command's own handling
        print("\ncrow: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _dispatch(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    for command in COMMANDS:
        if command.name == args.subcommand:
            return command.main(args)
    parser.print_help()
    return 0
