"""crow permissions: the permission answers saved with "always".

    crow permissions [list] [--json]     every saved answer: the tool, allow or deny
    crow permissions forget TOOL...      forget these: each tool asks again
    crow permissions forget --all        forget every one

An "always" answer to a permission question is kept in
$CROW_HOME/permissions.toml (0600); what a tool without one does is set per kind
by config.toml's [permissions].  A running crow serve reads the file as it
starts: restart it for a change to count there.  Exit codes: 0 done, 1 no such
saved answer, 2 bad usage (or a permissions.toml that does not load).
"""

from __future__ import annotations

import argparse
import json
import sys

__all__ = ["add_arguments", "main"]

EXIT_OK, EXIT_NOT_FOUND, EXIT_USAGE = 0, 1, 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", nargs="?", default="list", choices=["list", "forget"])
    parser.add_argument("tools", nargs="*", metavar="TOOL", help="forget: the tools' answers")
    parser.add_argument("--all", action="store_true", help="forget: every saved answer")
    parser.add_argument("--json", action="store_true", help="list: one JSON object per line")


def main(args: argparse.Namespace) -> int:
    # The config loads when the command runs, not when the CLI builds its parsers.
    from crow.config import ConfigError, Paths, forget_permissions, remembered_permissions

    paths = Paths.from_env()
    try:
        if args.action == "list":
            return _list(remembered_permissions(paths), args.json)
        if bool(args.tools) == args.all:
            print("crow permissions: forget needs TOOL... or --all (not both)", file=sys.stderr)
            return EXIT_USAGE
        gone = forget_permissions(paths, None if args.all else args.tools)
    except ConfigError as exc:
        print(f"crow: {exc}", file=sys.stderr)
        return EXIT_USAGE
    for tool in gone:
        print(f"forgot {tool}")
    missing = [tool for tool in args.tools if tool not in gone]
    for tool in missing:
        print(f"crow permissions: no saved answer for {tool}", file=sys.stderr)
    if args.all and not gone:
        print("no saved answers", file=sys.stderr)
    return EXIT_NOT_FOUND if missing else EXIT_OK


def _list(remembered: dict[str, str], as_json: bool) -> int:
    if as_json:
        for tool, decision in sorted(remembered.items()):
            print(json.dumps({"tool": tool, "decision": decision}))
        return EXIT_OK
    if not remembered:
        print(
            'no saved answers (an "always" answer to a permission question is kept)',
            file=sys.stderr,
        )
        return EXIT_OK
    width = max(len("TOOL"), *map(len, remembered))
    print(f"{'TOOL':<{width}}  ANSWER")
    for tool, decision in sorted(remembered.items()):
        print(f"{tool:<{width}}  {decision}")
    return EXIT_OK
