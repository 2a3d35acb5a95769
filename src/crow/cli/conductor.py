"""crow conductor: run a proxy chain; its client sees one ACP agent.

    crow conductor agent [PROXY ...] AGENT     client → proxies → AGENT
    crow conductor proxy [PROXY ...]           this chain is itself a proxy of an
                                               outer conductor (nested chains)
    options: --trace FILE (every message on every hop, as JSON lines)
             --init-timeout SECONDS (60: the chain must answer initialize by then)

Each component is one argument: a shell-style command (leading VAR=value words set
its environment), or JSON {"command": "...", "args": [...], "env": {...}}.  They
start at the client's first initialize, the agent first.  Proxies speak the proxy
role of ACP (_proxy/initialize, _proxy/successor), as the Rust SDK's conductor
defines it; `crow proxy NAME` runs one of Crow's own.

Exit codes: 0 the client left; 1 a component exited and took the chain down, or
initialize went unanswered past --init-timeout (the client's open requests were
answered with the reason); 2 bad arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import sys
from typing import TYPE_CHECKING

from .common import EXIT_INTERRUPTED, EXIT_USAGE

if TYPE_CHECKING:
    from ..orchestra.conductor import Component

__all__ = ["add_arguments", "main"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    modes = parser.add_subparsers(dest="mode", metavar="MODE", required=True)
    for mode, summary, shape in (
        ("agent", "the last component is the agent", "+"),
        ("proxy", "the chain is a proxy of an outer conductor", "*"),
    ):
        sub = modes.add_parser(mode, help=summary, description=summary)
        sub.add_argument("components", nargs=shape, metavar="COMPONENT")
        sub.add_argument("--trace", metavar="FILE", help="write every hop's messages here")
        sub.add_argument(
            "--init-timeout",
            type=_seconds,
            default=60.0,
            metavar="SECONDS",
            help="fail the chain if initialize is not answered by then (default 60)",
        )
        sub.add_argument("--log-level", default="WARNING", help="stderr log level")


def main(args: argparse.Namespace) -> int:
    from ..orchestra.conductor import Component, ComponentError  # loads when it runs

    logging.basicConfig(
        level=args.log_level.upper(), stream=sys.stderr, format="crow conductor: %(message)s"
    )
    try:
        components = [Component.parse(spec) for spec in args.components]
    except ComponentError as exc:
        print(f"crow conductor: {exc}", file=sys.stderr)
        return EXIT_USAGE
    agent = components.pop() if args.mode == "agent" else None
    try:
        return asyncio.run(_conduct(components, agent, args.trace, args.init_timeout))
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except OSError as exc:
        print(f"crow conductor: {exc}", file=sys.stderr)
        return EXIT_USAGE


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


async def _conduct(
    proxies: list[Component], agent: Component | None, trace_path: str | None, init_timeout: float
) -> int:
    # The chain's parts load when it runs.
    from crow.acp.transports.stdio import open_stdio
    from crow.private import open_private_append

    from ..orchestra.conductor import Conductor, Trace

    with contextlib.ExitStack() as stack:
        # 0600: the trace holds every prompt, reply and tool output of the chain.
        trace_file = stack.enter_context(open_private_append(trace_path)) if trace_path else None
        trace = Trace(trace_file) if trace_file is not None else None
        conductor = Conductor(proxies, agent, trace=trace, init_timeout_s=init_timeout)
        return await conductor.run(await open_stdio())
