"""crow judge: watch a worker session and post a verdict after each turn.

    crow judge --session ID --url URL        a session of a running crow serve --http
    crow judge --session ID --command CMD    ... of an agent this command starts
    options: --model NAME (the judge's; default: the chain's first), --rubric TEXT,
             --check CMD (its exit code is evidence: a failing check fails the turn),
             --max-rounds N (on fail, prompt the worker with the reasons; judge again),
             --once (judge the next prompt, then exit: 0 pass, 1 fail, 3 unknown),
             --pending (first judge the session's last turn if no verdict follows it:
             a judge stopped mid-verdict, started again, finishes its work)

Each verdict is printed on stdout and posted into the worker session, where every
attached client sees it (an agent message with _meta["crow/verdict"]).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import TYPE_CHECKING, Any

from .common import (
    EXIT_CONNECTION,
    EXIT_NO_SESSION,
    EXIT_USAGE,
    config_or_refuse,
    run_until_terminated,
)

if TYPE_CHECKING:
    from crow.config import Config

__all__ = ["add_arguments", "main"]

EXIT_VERDICT = {"pass": 0, "fail": 1, "unknown": 3}
NOT_IN_V1 = (
    "this agent speaks ACP v1, which has no form for following a session's turns or "
    "posting a verdict; judge it with crow proxy judge in front of it instead"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--session", required=True, help="the worker session's id")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "--url", help="a crow serve --http URL (its token from ?token= or $CROW_HOME/run)"
    )
    where.add_argument("--command", help="an ACP v2 agent to start and attach to")
    parser.add_argument("--token", help="the server's bearer token")
    parser.add_argument("--model", help="the judge's model (default: the first of the chain)")
    parser.add_argument("--rubric", help="what to judge by (default: did it do what was asked)")
    parser.add_argument(
        "--check", help="a command whose exit code is evidence, run in the session's cwd"
    )
    parser.add_argument(
        "--max-rounds",
        type=int,
        default=1,
        help="verdicts per prompt: on fail the worker is asked to fix it (default: 1)",
    )
    parser.add_argument(
        "--once", action="store_true", help="judge the next prompt's turns, then exit"
    )
    parser.add_argument(
        "--pending",
        action="store_true",
        help="first judge the last turn if it has no verdict (read by replay)",
    )


def main(args: argparse.Namespace) -> int:
    config = config_or_refuse()
    if args.max_rounds < 1:
        print("crow judge: --max-rounds must be at least 1", file=sys.stderr)
        return EXIT_USAGE
    model = args.model or config.chain[0]
    if model not in config.models:
        print(
            f"crow judge: no model {model} (these are: {', '.join(config.models)})", file=sys.stderr
        )
        return EXIT_USAGE
    # Ctrl-C: crow.cli.app says so, 130; SIGTERM (a supervisor) closes the connection, 143.
    return run_until_terminated(_judge(args, config, model))


async def _judge(args: argparse.Namespace, config: Config, model: str) -> int:
    # The client, the model router and the judge: loaded when the command runs.
    from crow.acp import AcpError, InvalidParams, SessionNotFound
    from crow.client.connect import AgentUnavailable, connect
    from crow.client.session_ids import AmbiguousSession, resolve
    from crow.models.router import ModelRouter
    from crow.runtime.imports import import_off_loop

    from ..orchestra.judge import DEFAULT_RUBRIC, verify

    router = ModelRouter(config)
    try:
        async with connect(args.command, url=args.url, token=args.token) as client:
            if client.v1 is not None:
                print(f"crow judge: {NOT_IN_V1}", file=sys.stderr)
                return EXIT_USAGE
            args.session = await resolve(client, args.session)  # a unique prefix will do

            def attached() -> None:
                print(f"crow judge: watching session {args.session}", file=sys.stderr, flush=True)
                # The model client's import now, not when the first turn ends.
                warming.append(asyncio.create_task(import_off_loop("crow.models.transport")))

            warming: list[asyncio.Task[Any]] = []
            judged = verify(
                client,
                router,
                model,
                args.session,
                rubric=args.rubric or DEFAULT_RUBRIC,
                check=args.check,
                max_rounds=args.max_rounds,
                replay_after=0 if args.pending else None,
                attached=attached,
                register=True,
            )
            async for done in judged:
                print(done.verdict.line(), flush=True)
                if args.once and not done.followed_up:
                    return EXIT_VERDICT[done.verdict.verdict]
    except AgentUnavailable as exc:
        print(f"crow judge: {exc}", file=sys.stderr)
        return EXIT_CONNECTION
    except (LookupError, AmbiguousSession) as exc:
        print(f"crow judge: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except SessionNotFound:
        print(f"crow judge: no session {args.session} (crow sessions lists them)", file=sys.stderr)
        return EXIT_NO_SESSION
    except (AcpError, ConnectionError) as exc:  # refused (another judge), or the server went
        print(f"crow judge: {getattr(exc, 'message', None) or exc}", file=sys.stderr)
        return EXIT_USAGE if isinstance(exc, InvalidParams) else EXIT_CONNECTION
    finally:
        await router.aclose()
    return 0
