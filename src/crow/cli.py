"""The ``crow`` command: wires the layers together, nothing else.

crow serve [--model NAME] [--base-url URL]   ACP v2 agent on stdio
crow serve --http HOST:PORT [--no-token]     ... over HTTP + WebSocket, with a token
crow init [--force]                          write a commented config.toml
crow memory ACTION ...                       the memory store (add, search, import, ...)

Start-up matters (an editor spawns ``crow serve`` and waits for ``initialize``;
every session spawns ``crow mcp`` servers), so this module imports only what
parsing the command line needs: each command imports its own layers, and
``--version`` reads the package metadata only when asked (importing
``importlib.metadata`` and the lookup cost 10-30 ms).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import logging
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from .client import args as client_args
from .config import ConfigError, Paths, load_config
from .memory import commands as memory_commands  # light: the store loads when run

# Light modules: what they run loads when they are run.
from .orchestra import chain_command, proxy_command
from .orchestra import command as judge_command
from .store import commands as store_commands

EXIT_USAGE = 2
EXIT_ADDRESS_IN_USE = 3  # crow serve --http: the port is taken
EXIT_INTERRUPTED = 130  # Ctrl-C, as a shell reports it


class _VersionAction(argparse.Action):
    """``--version``: like argparse's own, but the metadata is read only when asked."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help="show Crow's version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        from importlib.metadata import version

        print(f"crow {version('crow-cli')}")  # stdout, as argparse's version action
        parser.exit()


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
    from .runtime.imports import importing

    if importing():  # an import thread must not meet the interpreter's finalization
        _tell_the_reaper()
        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)
    sys.exit(code)


def _tell_the_reaper() -> None:
    """Before ``os._exit`` (which skips the atexit hook doing it): the children this
    process adopted are told to its reaper, so they die with it (crow.children)."""
    if "crow.runtime.children" in sys.modules:
        sys.modules["crow.runtime.children"].adopt_orphans()


def build_parser() -> argparse.ArgumentParser:
    """The whole command line (``crow completion`` writes its scripts from it)."""
    parser = argparse.ArgumentParser(
        prog="crow", description="Crow: a persistent AI coding agent speaking ACP v2."
    )
    parser.add_argument("--version", action=_VersionAction)
    commands = parser.add_subparsers(dest="subcommand", metavar="COMMAND")

    serve = commands.add_parser(
        "serve",
        help="serve ACP v2 on stdio (for editors and clients)",
        description="The agent: ACP (v2, and v1 for older clients) on stdin/stdout for an "
        "editor or any ACP client that starts it, or with --http one long-lived server for "
        "many clients over streamable HTTP and WebSocket.  Logs go to stderr and "
        "$CROW_HOME/logs; stdout is the wire.  People at a terminal want crow chat.",
    )
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

    models = commands.add_parser(
        "models", help="the models Crow can use, where each comes from, whether it answers"
    )
    models.add_argument(
        "--check",
        nargs="?",
        const="",
        metavar="NAME",
        help="make a one-token call to NAME (default: every model) and report its time or error",
    )
    models.add_argument("--model", help="as crow serve --model")
    models.add_argument("--base-url", help="as crow serve --base-url")
    models.add_argument("--json", action="store_true", help="one JSON object per model")

    init = commands.add_parser(
        "init",
        help="write a config.toml for the models this machine has, the rest commented",
        description="Looks for ollama (localhost:11434, or OLLAMA_HOST) and its models, "
        "an OpenAI-compatible --base-url, and the embedded model of the local extra, and "
        "writes a config.toml that uses them (the embedded model last, as the fallback), "
        "with every other setting commented.",
    )
    init.add_argument("--force", action="store_true", help="overwrite an existing config.toml")
    init.add_argument(
        "--model",
        help="the model to answer first: one ollama or --base-url has, or smollm2-135m (the "
        "embedded model); default: $CROW_MODEL, else the first one found",
    )
    init.add_argument(
        "--base-url",
        help="an OpenAI-compatible server to write (default: $OPENAI_BASE_URL, else ollama "
        "where OLLAMA_HOST says)",
    )

    # Commands with a help text of their own (kept raw: it has tables), and their options.
    documented = [
        (
            "run",
            "send one prompt; the reply on stdout, the outcome in the exit code",
            client_args.RUN_HELP,
            client_args.add_run_arguments,
        ),
        (
            "chat",
            "talk with the agent at a prompt, the replies streaming as they come",
            client_args.CHAT_HELP,
            client_args.add_chat_arguments,
        ),
        (
            "sessions",
            "list, show or delete sessions",
            client_args.SESSIONS_HELP,
            client_args.add_sessions_arguments,
        ),
        (
            "memory",
            "add, search, list, forget, export, import or reindex memories",
            memory_commands.__doc__,
            memory_commands.add_arguments,
        ),
        (
            "judge",
            "watch a session and post a verdict on each turn",
            judge_command.__doc__,
            judge_command.add_arguments,
        ),
        (
            "conductor",
            "run a proxy chain (proxies in front of an agent) as one agent",
            chain_command.__doc__,
            chain_command.add_arguments,
        ),
        (
            "store",
            "migrate the session store, or copy sessions to another (PostgreSQL)",
            store_commands.__doc__,
            store_commands.add_arguments,
        ),
        (
            "proxy",
            "run one of Crow's proxies (judge, memory, record) inside a proxy chain",
            proxy_command.__doc__,
            proxy_command.add_arguments,
        ),
    ]
    for name, summary, description, add_arguments in documented:
        add_arguments(
            commands.add_parser(
                name,
                help=summary,
                description=description,
                formatter_class=argparse.RawDescriptionHelpFormatter,
            )
        )

    mcp = commands.add_parser("mcp", help="run a built-in MCP server on stdio (for any MCP host)")
    mcp.add_argument("server", choices=["fs", "terminal", "web", "memory"])
    mcp.add_argument("args", nargs=argparse.REMAINDER, help="the server's own options (--help)")

    from .tools import remembered  # light: the argument definitions

    remembered.add_arguments(
        commands.add_parser(
            "permissions",
            help='list or forget the permission answers saved with "always"',
            description=remembered.__doc__,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
    )
    completion = commands.add_parser(
        "completion",
        help="print a shell completion script (bash, zsh, fish)",
        description="Print the completion script of crow for SHELL, made from crow's own "
        'command line.  bash: eval "$(crow completion bash)" in ~/.bashrc; zsh: crow '
        "completion zsh > a file named _crow on $fpath; fish: crow completion fish > "
        "~/.config/fish/completions/crow.fish",
    )
    completion.add_argument("shell", choices=["bash", "zsh", "fish"])
    return parser


#: Commands whose stdout is the wire (ACP or MCP): never guarded, never a first-run note.
WIRE_COMMANDS = frozenset({"serve", "mcp", "conductor", "proxy"})


def main(argv: list[str] | None = None) -> int:
    from . import pipes
    from .cli_checks import check_args, parse

    parser = build_parser()
    pipes.guard(_exit_now)  # a reader that goes away ends the command quietly (crow.pipes) ...
    args = parse(parser, argv)
    if args.subcommand in WIRE_COMMANDS:
        pipes.unguard()  # ... but where stdout is the wire, the transport says what happens
    else:
        _quiet_logging()
    try:
        if (code := check_args(parser, args)) is not None:
            return code
        code = _dispatch(parser, args)
        sys.stdout.flush()  # a reader that went away is found here at the latest
        return code
    except KeyboardInterrupt:  # Ctrl-C before (or outside) a command's own handling
        print("\ncrow: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _dispatch(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if args.subcommand == "judge":
        return judge_command.main(args)
    if args.subcommand == "conductor":
        return chain_command.main(args)
    if args.subcommand == "proxy":
        return proxy_command.main(args)
    if args.subcommand == "store":
        return store_commands.main(args)
    if args.subcommand == "memory":
        return memory_commands.main(args)
    if args.subcommand == "sessions" and args.action == "list" and not (args.url or args.command):
        from .client.session_list import list_local  # the store itself: fast

        return list_local(args)
    if args.subcommand in ("run", "chat", "sessions"):
        module = importlib.import_module(f"crow.client.{args.subcommand}")
        result: int = module.main(args)
        return result
    if args.subcommand == "mcp":
        return _mcp(args.server, args.args)
    if args.subcommand == "serve":
        return _serve(args)
    if args.subcommand == "init":
        return _init(args)
    if args.subcommand == "models":
        from .models import listing

        return asyncio.run(listing.main(args))
    if args.subcommand == "permissions":
        from .tools.remembered import main as permissions

        return permissions(args)
    if args.subcommand == "completion":
        from .completion import script

        print(script(build_parser(), args.shell), end="")
        return 0
    parser.print_help()
    return 0


def _serve(args: argparse.Namespace) -> int:
    paths = Paths.from_env()
    _setup_logging(paths.logs, args.log_level)
    try:
        config = load_config(paths, model=args.model, base_url=args.base_url)
    except ConfigError as exc:
        print(f"crow: {exc}", file=sys.stderr)
        return EXIT_USAGE
    from .redact import register_config_secrets

    register_config_secrets(config)  # their values are masked in every log line
    from .runtime.gc_tuning import tune_for_serving

    tune_for_serving()
    if args.http:
        return _serve_http(config, args)
    if sys.stdin.isatty():  # a person, not an editor: say what this is (stderr)
        print(
            "crow: speaking ACP on stdin/stdout, for editors and ACP clients; "
            "to talk with Crow yourself, run crow chat (Ctrl-D leaves this)",
            file=sys.stderr,
        )
    from .runtime.memory_debug import run_with_debug_hooks
    from .serve.stdio import serve_stdio  # not needed for --help

    _run_server(run_with_debug_hooks(serve_stdio(config, setup=_add_judge)))
    _exit_now(0)


def _run_server(serving: Any) -> None:
    """Run a server to its end; a store that cannot be opened (a PostgreSQL server
    down, psycopg missing) is one line on stderr and exit 1, not a traceback."""
    from .runtime.event_loop import run
    from .runtime.slow_exit import serve_then_leave
    from .serve.http import AddressInUse, ServeError
    from .store.db import StoreError

    leaving = serve_then_leave(serving, _exit_now)
    try:
        run(leaving)
    except KeyboardInterrupt:  # Ctrl-C at a terminal: leave now (before the coroutines
        _exit_now(0)  # that never started are collected, each with a warning)
    except StoreError as exc:
        print(f"crow: {exc}", file=sys.stderr)
        _exit_now(1)
    except ServeError as exc:
        print(f"crow: {exc}", file=sys.stderr)
        _exit_now(EXIT_ADDRESS_IN_USE if isinstance(exc, AddressInUse) else EXIT_USAGE)


def _add_judge(agent: Any) -> None:
    """crow serve's own judge: it verifies the sessions clients ask it to."""
    from .orchestra.resident import ResidentJudge
    from .serve.stdio import open_follower

    agent.judge = ResidentJudge(agent.config, agent.router, lambda: open_follower(agent))


def _exit_now(code: int) -> NoReturn:
    """Exit as soon as the server has shut down, skipping the interpreter's teardown:
    with the model and MCP SDKs loaded it takes ~0.8 s, and a client that closed
    our stdin waits for the exit (the v1 SDK kills the agent after 2 s)."""
    _tell_the_reaper()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _serve_http(config: Any, args: argparse.Namespace) -> int:
    from .acp.transports.http_server import HttpLimits
    from .runtime.memory_debug import run_with_debug_hooks
    from .serve.http import ServeError, security_for, serve_http

    host, _, port = args.http.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit():
        print(f"crow: --http needs HOST:PORT, got {args.http!r}", file=sys.stderr)
        return EXIT_USAGE
    try:
        security = security_for(
            host, config.server, new_token=args.new_token, no_token=args.no_token
        )
    except ServeError as exc:
        print(f"crow: {exc}", file=sys.stderr)
        return EXIT_USAGE
    limits = HttpLimits(
        idle_timeout_s=config.server.idle_timeout_s,
        init_timeout_s=config.server.init_timeout_s,
        max_buffered_bytes=int(config.server.max_buffered_mib * 1024 * 1024),
        max_output_stall_s=config.server.max_output_stall_s,
    )
    serving = serve_http(config, host, int(port), security, limits=limits, setup=_add_judge)
    _run_server(run_with_debug_hooks(serving))
    _exit_now(0)


def _mcp(server: str, argv: list[str]) -> int:
    """``crow mcp fs --root DIR``: the same servers Crow runs in every session."""
    module = importlib.import_module(f"crow.servers.{server}")
    result: int = module.main(argv)
    return result


def _init(args: argparse.Namespace) -> int:
    """Write a config.toml for the models this machine has (crow.config_template)."""
    from .config_template import detect, write_default_config

    paths = Paths.from_env()
    if paths.config_file.exists() and not args.force:
        print(f"crow: {paths.config_file} exists; pass --force to overwrite it", file=sys.stderr)
        return 1
    base_url = args.base_url or os.environ.get("OPENAI_BASE_URL")
    found = detect(base_url)
    written, said = write_default_config(
        paths, force=True, model=args.model or os.environ.get("CROW_MODEL"), found=found
    )
    for line in said:
        print(f"crow: {line}", file=sys.stderr)
    print(f"wrote {written}")
    return 0


#: Libraries that log every HTTP request at INFO.
QUIET_LOGGERS = ("httpx", "httpx2", "httpcore", "httpcore2")


def _quiet_logging() -> None:
    """A command for a person: warnings and errors on stderr as plain lines, and no
    library's INFO chatter (the MCP SDK's ``basicConfig(level=INFO)``, made a no-op
    by the handler already there, would show httpx's "HTTP Request:" lines)."""
    root = logging.getLogger()
    if not root.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        root.addHandler(handler)
    root.setLevel(logging.WARNING)
    for chatty in QUIET_LOGGERS:
        logging.getLogger(chatty).setLevel(logging.WARNING)


def _setup_logging(logs: Path, level: str) -> None:
    """Logs go to stderr and to the home's logs/ folder; stdout is the wire.

    Both handlers mask credentials (``crow.redact``); the folders are 0700 and
    crow.log 0600 (``crow.private``), whatever the umask."""
    from .private import private_dir, private_file
    from .redact import RedactingFilter

    root = logging.getLogger()
    root.setLevel(logging.INFO)
    for chatty in QUIET_LOGGERS:  # a line per model request: noise, and ~2% of a busy loop
        logging.getLogger(chatty).setLevel(logging.WARNING)
    stderr = logging.StreamHandler(sys.stderr)
    stderr.setLevel(level.upper())
    stderr.setFormatter(logging.Formatter("crow: %(levelname)s %(name)s: %(message)s"))
    stderr.addFilter(RedactingFilter())
    root.addHandler(stderr)
    try:
        private_dir(logs.parent)  # the home
        file = logging.FileHandler(private_file(private_dir(logs) / "crow.log"))
    except OSError as exc:
        print(f"crow: cannot write logs to {logs}: {exc}", file=sys.stderr)
        return
    file.setFormatter(
        logging.Formatter("%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s")
    )
    file.addFilter(RedactingFilter())
    root.addHandler(file)
