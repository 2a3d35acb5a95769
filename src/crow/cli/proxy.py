"""crow proxy: run one of Crow's own proxies (a component of a proxy chain).

    crow conductor agent "crow proxy judge" "AGENT ..."
    crow proxy judge [--model NAME] [--rubric TEXT] [--check CMD] [--max-rounds N]
        after each turn, the judge model's verdict on it goes to the client (an
        agent message with _meta["crow/verdict"], as crow serve's own judge posts)
    crow proxy memory
        every session gets Crow's memory tools (server "crow-memory"): as MCP over
        ACP when the agent takes {"type": "acp"} servers, else as a stdio server
    crow proxy record [--store FILE|URL]
        the agent's sessions go into Crow's session store (default: the one
        crow serve uses): crow sessions lists them, crow serve resumes them

A proxy speaks ACP on stdin/stdout to its conductor (the proxy role: it is
initialized with _proxy/initialize), so it runs inside a chain, never alone.
Logs go to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from typing import TYPE_CHECKING

from .common import EXIT_INTERRUPTED, EXIT_USAGE, Refused, config_or_refuse

if TYPE_CHECKING:
    from crow.config import Config

__all__ = ["add_arguments", "main"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    names = parser.add_subparsers(dest="proxy", metavar="NAME", required=True)
    judge = names.add_parser("judge", help="a verdict on each turn, for the client")
    judge.add_argument("--model", help="the judge's model (default: [judge] model, else the first)")
    judge.add_argument("--rubric", help="what to judge by (default: [judge] rubric or Crow's)")
    judge.add_argument(
        "--check", help="a command whose exit code is evidence (in the session's cwd)"
    )
    judge.add_argument(
        "--max-rounds", type=int, help="v2: on fail, prompt the agent again, up to N verdicts"
    )
    memory = names.add_parser("memory", help="give every session Crow's memory tools")
    record = names.add_parser("record", help="keep the agent's sessions in Crow's store")
    record.add_argument(
        "--store", help="the session store: a file or a postgresql:// URL (default: Crow's)"
    )
    for sub in (judge, memory, record):
        sub.add_argument("--log-level", default="WARNING", help="stderr log level")


def main(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=args.log_level.upper(),
        stream=sys.stderr,
        format=f"crow proxy {args.proxy}: %(message)s",
    )
    config = config_or_refuse("crow proxy")
    run = {"judge": _judge, "memory": _memory, "record": _record}[args.proxy]
    try:
        asyncio.run(run(args, config))
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except LookupError as exc:  # one the proxy met (a model the router lacks): one line
        print(f"crow proxy: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return 0


async def _judge(args: argparse.Namespace, config: Config) -> None:
    # The proxies load when one runs.
    from ..orchestra.judge import DEFAULT_RUBRIC
    from ..orchestra.proxies import serve_judge

    settings = config.judge
    model = args.model or settings.model or config.chain[0]
    if model not in config.models:
        raise Refused(f"crow proxy: no model {model} (these are: {', '.join(config.models)})")
    max_rounds = args.max_rounds or settings.max_rounds
    if max_rounds < 1:
        raise Refused("crow proxy: --max-rounds must be at least 1")
    await serve_judge(
        config,
        model=model,
        rubric=args.rubric or settings.rubric or DEFAULT_RUBRIC,
        check=args.check or settings.check,
        max_rounds=max_rounds,
    )


async def _record(args: argparse.Namespace, config: Config) -> None:
    # The proxy and the store load when the proxy runs.
    from ..orchestra.proxies import serve_record
    from ..store.aio import AsyncStore
    from ..store.db import StoreError, open_store

    try:
        store = AsyncStore(open_store(args.store or config.store_location))
    except StoreError as exc:
        raise Refused(f"crow proxy: {exc}") from None
    await serve_record(store)


async def _memory(args: argparse.Namespace, config: Config) -> None:
    from ..orchestra.proxies import serve_memory  # the proxies load when one runs

    await serve_memory(config)
