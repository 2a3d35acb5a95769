"""What every ``crow`` subcommand shares: the exit codes, the config or a refusal,
and the fast exit after a server.

A command that cannot run raises ``Refused`` with the line to say; ``crow.cli.app``
says it on stderr and exits with its code, so no command repeats the pattern.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import TYPE_CHECKING, Any, NoReturn

from ..config import ConfigError, load_config

if TYPE_CHECKING:
    from collections.abc import Coroutine

    from ..config import Config

__all__ = [
    "EXIT_CONNECTION",
    "EXIT_INTERRUPTED",
    "EXIT_NO_SESSION",
    "EXIT_TERMINATED",
    "EXIT_USAGE",
    "Refused",
    "config_or_refuse",
    "exit_now",
    "run_until_terminated",
    "tell_the_reaper",
]

EXIT_USAGE = 2
EXIT_CONNECTION = 7  # the agent or the store cannot be reached
EXIT_NO_SESSION = 10  # as crow run, chat and sessions say it
EXIT_INTERRUPTED = 130  # Ctrl-C, as a shell reports it
EXIT_TERMINATED = 143  # SIGTERM, as a shell reports it


class Refused(Exception):
    """The command cannot run: ``line`` is said on stderr, and it exits ``code``."""

    def __init__(self, line: str, code: int = EXIT_USAGE) -> None:
        super().__init__(line)
        self.line = line
        self.code = code


def config_or_refuse(who: str = "crow", **overrides: Any) -> Config:
    """config.toml and the environment, or ``Refused`` saying why not (exit 2)."""
    try:
        return load_config(**overrides)
    except ConfigError as exc:
        raise Refused(f"{who}: {exc}") from None


def run_until_terminated(main: Coroutine[Any, Any, int]) -> int:
    """``asyncio.run(main)``, a SIGTERM ending it as a cancel does: what ``main``
    holds is closed on the way out (an HTTP connection is deleted on the server,
    where it would otherwise live on until it expires: a judge restarted at once
    was refused as a second judge for a minute), then exit 143, quietly."""
    import asyncio  # (this module loads with every command: asyncio only for these)
    import signal

    async def guarded() -> int:
        loop = asyncio.get_running_loop()
        running = asyncio.current_task()
        assert running is not None
        terminated = False

        def terminate() -> None:
            nonlocal terminated
            terminated = True
            running.cancel()

        loop.add_signal_handler(signal.SIGTERM, terminate)
        try:
            return await main
        except asyncio.CancelledError:
            if terminated:
                return EXIT_TERMINATED
            raise
        finally:
            loop.remove_signal_handler(signal.SIGTERM)

    return asyncio.run(guarded())


def tell_the_reaper() -> None:
    """Before ``os._exit`` (which skips the atexit hook doing it): the children this
    process adopted are told to its reaper, so they die with it (crow.runtime.children)."""
    if "crow.runtime.children" in sys.modules:
        sys.modules["crow.runtime.children"].adopt_orphans()


def exit_now(code: int) -> NoReturn:
    """Exit as soon as the server has shut down, skipping the interpreter's teardown:
    with the model and MCP SDKs loaded it takes ~0.8 s, and a client that closed
    our stdin waits for the exit (the v1 SDK kills the agent after 2 s)."""
    tell_the_reaper()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
