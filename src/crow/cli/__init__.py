"""crow.cli: the ``crow`` command (``crow.cli.app``), one module per subcommand.

``run`` is the command's first code (the ``crow`` script and ``python -m crow`` call
it), so it is here, importing nothing: Ctrl-C while Crow's modules load (about 0.1 s,
more on a busy machine) leaves as a Ctrl-C anywhere else does, in one line with 130,
not with the traceback of whatever import it interrupted.  Before this runs the
interpreter is still starting, and a Ctrl-C then is Python's own to report.
"""

from __future__ import annotations

import os
import signal
from typing import Any, NoReturn

__all__ = ["leave_interrupted", "main", "run"]

EXIT_INTERRUPTED = 130  # crow.cli.common's (which imports what loading takes)


def run() -> None:
    """The ``crow`` command (``crow.cli.app.run``), Crow's modules loaded first."""
    guarding = signal.getsignal(signal.SIGINT) is signal.default_int_handler  # (not ignored)
    if guarding:
        signal.signal(signal.SIGINT, leave_interrupted)
    from .app import run as command

    try:
        if guarding:
            signal.signal(signal.SIGINT, signal.default_int_handler)
        command()  # exits; Ctrl-C in it is its own to report, ...
    except KeyboardInterrupt:  # ... but for one just before it had begun to listen
        leave_interrupted()


def main(argv: list[str] | None = None) -> int:
    """``crow.cli.app.main``: the command line to an exit code, without exiting."""
    from .app import main as command_line

    return command_line(argv)


def leave_interrupted(*_: Any) -> NoReturn:
    """Ctrl-C before anything started that would need stopping (a SIGINT handler)."""
    os.write(2, b"\ncrow: interrupted\n")  # (a signal handler: no buffered stream)
    os._exit(EXIT_INTERRUPTED)
