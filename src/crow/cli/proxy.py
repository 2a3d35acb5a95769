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

if TYPE_CHECKING:
    from crow.config import Config

__all__ = ["add_arguments", "main"]

EXIT_USAGE = 2


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
    from crow.config import ConfigError, load_config

    logging.basicConfig(
        level=args.log_level.upper(),
        stream=sys.stderr,
        format=f"crow proxy {args.proxy}: %(message)s",
    )
    try:
        config = load_config()
    except ConfigError as exc:
        print(f"crow proxy: {exc}", file=sys.stderr)
        return EXIT_USAGE
    run = {"judge": _judge, "memory": _memory, "record": _record}[args.proxy]
    try:
        return asyncio.run(run(args, config))
    except KeyboardInterrupt:
        return 130
    except LookupError as exc:
        print(f"crow proxy: {exc}", file=sys.stderr)
        return EXIT_USAGE


async def _judge(args: argparse.Namespace, config: Config) -> int:
    from crow.acp import open_stdio
    from crow.acp.proxy import ProxySide
    from crow.models.router import ModelRouter

    from ..orchestra.judge import DEFAULT_RUBRIC, TurnView, Verdict, ask
    from ..orchestra.judge_proxy import JudgeProxy, with_check

    settings = config.judge
    model = args.model or settings.model or config.chain[0]
    if model not in config.models:
        raise LookupError(f"no model {model} (these are: {', '.join(config.models)})")
    rubric = args.rubric or settings.rubric or DEFAULT_RUBRIC
    max_rounds = args.max_rounds or settings.max_rounds
    if max_rounds < 1:
        raise LookupError("--max-rounds must be at least 1")
    router = ModelRouter(config)

    async def judge(turn: TurnView, cwd: str, check: str | None) -> Verdict:
        return await ask(router, model, turn, rubric)

    proxy = ProxySide(await open_stdio())
    JudgeProxy(
        proxy,
        with_check(judge, settings.check_timeout_s),
        judge_model=model,
        check=args.check or settings.check,
        max_rounds=max_rounds,
    )
    try:
        await proxy.serve()
    finally:
        await router.aclose()
    return 0


async def _record(args: argparse.Namespace, config: Config) -> int:
    from crow.acp import open_stdio
    from crow.acp.proxy import ProxySide
    from crow.store.aio import AsyncStore
    from crow.store.db import StoreError, open_store

    from ..orchestra.record_proxy import RecordProxy

    try:
        store = AsyncStore(open_store(args.store or config.store_location))
    except StoreError as exc:
        raise LookupError(str(exc)) from None
    proxy = ProxySide(await open_stdio())
    recorder = RecordProxy(proxy, store)
    try:
        await proxy.serve()
    finally:
        await recorder.aclose()
    return 0


async def _memory(args: argparse.Namespace, config: Config) -> int:
    from typing import Any

    from crow.acp import open_stdio
    from crow.acp.proxy import ProxySide
    from crow.memory.scopes import OWN, READ_ALL, MemoryPlace
    from crow.memory.shared import shared_store
    from crow.servers.memory import build_server

    from ..orchestra.memory_proxy import MemoryProxy

    def make_server(cwd: str, session_id: str | None) -> Any:
        store = lambda: shared_store(config.paths.memory, config.memory)  # noqa: E731
        # What the agent reaches: its session's own scopes (no approvals: nobody here
        # asks the person before a write beyond them).
        reach = READ_ALL if config.memory.model_reads == "all" else OWN
        return build_server(store, MemoryPlace(cwd, session_id, reach))

    proxy = ProxySide(await open_stdio())
    memory = MemoryProxy(proxy, make_server)
    try:
        await proxy.serve()
    finally:
        await memory.aclose()
    return 0
