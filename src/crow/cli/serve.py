"""``crow serve``: the agent, on stdio for the editor or client that starts it, or
with ``--http`` one long-lived server for many clients.

Start-up matters here most (an editor spawns ``crow serve`` and waits for
``initialize``): the agent's layers are imported when the command runs, not when
the command line is parsed.

Ctrl-C at a terminal leaves in one way, with 130: before the server runs, at once
(``crow: interrupted``: nothing has started that needs stopping); once it runs, it
stops first (``--http`` as for SIGTERM: running turns get their grace; on stdio the
turn is cancelled), and the store is closed.  SIGTERM ends ``--http`` by the
signal once stopped, and stdio at once (the signal's default).
"""

from __future__ import annotations

import argparse
import signal
import sys
from typing import Any

from ..config import Paths
from . import leave_interrupted
from .common import EXIT_INTERRUPTED, EXIT_USAGE, Refused, config_or_refuse, exit_now
from .logs import apply_log_settings, setup_logging

__all__ = ["DESCRIPTION", "add_arguments", "main"]

EXIT_ADDRESS_IN_USE = 3  # crow serve --http: the port is taken
DESCRIPTION = (
    "The agent: ACP (v2, and v1 for older clients) on stdin/stdout for an "
    "editor or any ACP client that starts it, or with --http one long-lived server for "
    "many clients over streamable HTTP and WebSocket.  Logs go to stderr and "
    "$CROW_HOME/logs; stdout is the wire.  People at a terminal want crow chat."
)


def add_arguments(serve: argparse.ArgumentParser) -> None:
    serve.add_argument("--model", help="the model to use (a configured name, or a model id)")
    serve.add_argument("--base-url", help="an OpenAI-compatible endpoint, e.g. http://host:8000/v1")
    serve.add_argument("--log-level", default="WARNING", help="stderr log level (default WARNING)")
    serve.add_argument(
        "--http",
        metavar="HOST:PORT",
        help="serve streamable HTTP + WebSocket at /acp instead of stdio "
        "(port 0 picks a free port).  Every request needs a token: [server] token, "
        "else one generated now; the URL with ?token= is printed on stderr, and "
        "crow run/chat/sessions --url find it in $CROW_HOME/run/",
    )
    tokens = serve.add_mutually_exclusive_group()
    tokens.add_argument(
        "--new-token",
        action="store_true",
        help="--http: generate a fresh token even if config.toml sets [server] token",
    )
    tokens.add_argument(
        "--no-token",
        action="store_true",
        help="--http on loopback only: ask for no token (any local user or process can "
        "then run commands as you)",
    )


def main(args: argparse.Namespace) -> int:
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # (not ignored)
        signal.signal(signal.SIGINT, leave_interrupted)  # until the server runs
    paths = Paths.from_env()
    setup_logging(paths.logs, args.log_level)
    config = config_or_refuse(paths=paths, model=args.model, base_url=args.base_url)
    server = config.server
    apply_log_settings(
        json_lines=server.log_format == "json",
        max_mib=server.log_max_mib,
        backups=server.log_backups,
    )
    # The agent's layers, imported once the command line is read (start-up: see above).
    from ..config.secrets import register_config_secrets
    from ..runtime.gc_tuning import tune_for_serving

    register_config_secrets(config)  # their values are masked in every log line
    tune_for_serving()
    if args.http:
        return _serve_http(config, args)
    if sys.stdin.isatty():  # a person, not an editor: say what this is (stderr)
        print(
            "crow: speaking ACP on stdin/stdout, for editors and ACP clients; "
            "to talk with Crow yourself, run crow chat (Ctrl-D leaves this)",
            file=sys.stderr,
        )
    from ..runtime.memory_debug import run_with_debug_hooks  # the agent (start-up: see above)
    from ..serve.stdio import serve_stdio

    _run_server(run_with_debug_hooks(serve_stdio(config, setup=_add_judge)))
    exit_now(0)


def _serve_http(config: Any, args: argparse.Namespace) -> int:
    # The HTTP transport (uvicorn, starlette) only for --http.
    from ..acp.transports.http_server import HttpLimits
    from ..runtime.memory_debug import run_with_debug_hooks
    from ..serve.http import ServeError, security_for, serve_http

    host, _, port = args.http.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit():
        raise Refused(f"crow: --http needs HOST:PORT, got {args.http!r}")
    try:
        security = security_for(
            host, config.server, new_token=args.new_token, no_token=args.no_token
        )
    except ServeError as exc:
        raise Refused(f"crow: {exc}") from None
    limits = HttpLimits(
        idle_timeout_s=config.server.idle_timeout_s,
        init_timeout_s=config.server.init_timeout_s,
        max_buffered_bytes=int(config.server.max_buffered_mib * 1024 * 1024),
        max_output_stall_s=config.server.max_output_stall_s,
    )
    serving = serve_http(config, host, int(port), security, limits=limits, setup=_add_judge)
    _run_server(run_with_debug_hooks(serving))
    exit_now(0)


def _run_server(serving: Any) -> None:
    """Run a server to its end; a store that cannot be opened (a PostgreSQL server
    down, psycopg missing) is one line on stderr and exit 1, not a traceback."""
    # The serving layers: imported with the server they run (start-up: see above).
    from ..runtime.event_loop import run
    from ..runtime.slow_exit import serve_then_leave
    from ..serve.http import AddressInUse, ServeError
    from ..store.db import StoreError

    leaving = serve_then_leave(serving, exit_now)
    if signal.getsignal(signal.SIGINT) is leave_interrupted:
        signal.signal(signal.SIGINT, signal.default_int_handler)  # the loop's: a stop
    try:
        run(leaving)
    except KeyboardInterrupt:  # Ctrl-C, once the server stopped: leave now (before the
        exit_now(EXIT_INTERRUPTED)  # coroutines never started are collected with warnings)
    except StoreError as exc:
        print(f"crow: {exc}", file=sys.stderr)
        exit_now(1)
    except ServeError as exc:
        print(f"crow: {exc}", file=sys.stderr)
        exit_now(EXIT_ADDRESS_IN_USE if isinstance(exc, AddressInUse) else EXIT_USAGE)


def _add_judge(agent: Any) -> None:
    """crow serve's own judge: it verifies the sessions clients ask it to."""
    # Called as the server starts, with the agent's layers already loaded.
    from ..orchestra.resident import ResidentJudge
    from ..serve.stdio import open_follower

    agent.judge = ResidentJudge(agent.config, agent.router, lambda: open_follower(agent))
