"""What the ``crow`` command checks before a command runs, the same for every command.

- The command line: an unknown option is reported with the usage of the command
  it was given to (``crow run --frobnicate`` shows ``crow run``'s), and a ``--url``
  without a scheme is a usage error that shows the URL to give instead.
- The first run: the home does not exist yet; one short note on stderr says where
  Crow keeps things and how to move them, and the home is made.
- The config: a config.toml that does not load is one line and exit 2 from every
  command that reads it (not, say, a ``crow serve`` that did not start);
  tables and keys Crow does not read are warned about by name, once per command
  (the ``crow serve`` a command starts inherits ``CONFIG_SAID`` and says nothing).
- The store: a PostgreSQL store that cannot be reached is one line naming it
  (password masked) and what to do, before an agent is started for nothing.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from ..config import ConfigError, Paths, load_config
from ..private import private_dir
from .common import EXIT_CONNECTION, EXIT_USAGE

__all__ = ["CONFIG_SAID", "check_args", "parse"]

#: Set in the environment once this process tree has shown the config's warnings.
CONFIG_SAID = "CROW_CONFIG_WARNED"
#: Commands that read config.toml (run, chat and sessions only for the agent they start).
CONFIG_COMMANDS = frozenset(
    {"serve", "run", "chat", "sessions", "models", "memory", "judge", "store", "proxy"}
)
#: Commands that start a local crow serve unless given --url or --command.
SPAWNING = frozenset({"run", "chat", "sessions"})
#: Commands a person runs that keep things in the home: the first one says where.
HOME_COMMANDS = frozenset(
    {"run", "chat", "sessions", "models", "memory", "judge", "init", "permissions", "store"}
)


def parse(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """``parser.parse_args``, but an unknown option shows its own command's usage."""
    args, extras = parser.parse_known_args(argv)
    if extras:
        command_parser(parser, args).error(f"unrecognized arguments: {' '.join(extras)}")
    return args


def command_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Any:
    """The parser of the (sub)command ``args`` were parsed by: ``crow memory search``'s."""
    while True:
        chosen = None
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                chosen = action.choices.get(getattr(args, action.dest, None) or "")
        if chosen is None:
            return parser
        parser = chosen


def check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int | None:
    """None when the command may run, else its exit code (what is wrong was said)."""
    url = getattr(args, "url", None)
    if url and "://" not in url:
        path = "" if "/" in url else "/acp"
        command_parser(parser, args).error(
            f"--url {url} has no scheme: give http://{url}{path} (or ws://, https://, wss://)"
        )
    if args.subcommand in HOME_COMMANDS:
        _first_run()
    if args.subcommand not in CONFIG_COMMANDS:
        return None
    if args.subcommand in SPAWNING and (url or getattr(args, "command", None)):
        return None  # the agent is someone else's: its config is its own business
    try:
        config = load_config()
    except ConfigError as exc:
        print(f"crow: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if not os.environ.get(CONFIG_SAID):
        for warning in config.warnings:
            print(f"crow: {warning}", file=sys.stderr)
        os.environ[CONFIG_SAID] = "1"
    if config.store_url and args.subcommand in SPAWNING:
        from ..store.db import StoreError, probe  # start-up: only a PostgreSQL store

        try:
            probe(config.store_url)
        except StoreError as exc:
            print(f"crow: {exc}", file=sys.stderr)
            return EXIT_CONNECTION
    return None


def _first_run() -> None:
    """The home does not exist: say once where Crow keeps things, and make it."""
    paths = Paths.from_env()
    if paths.home.exists():
        return
    try:
        private_dir(paths.home)
    except OSError as exc:
        print(f"crow: cannot make the Crow home {paths.home}: {exc}", file=sys.stderr)
        return
    print(
        f"crow: first run: Crow keeps its things in {paths.home} (CROW_HOME moves them all):\n"
        "crow:   config.toml (crow init writes one), crow.db: the sessions ([store] url in\n"
        "crow:   config.toml keeps them in PostgreSQL), logs/, memory/ (crow memory) and\n"
        "crow:   permissions.toml (crow permissions)",
        file=sys.stderr,
    )
