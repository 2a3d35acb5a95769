"""Where a ``crow`` command's log lines go: plain warnings for a person, or the
server's stderr and $CROW_HOME/logs (credentials masked) for ``crow serve``."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

__all__ = ["QUIET_LOGGERS", "quiet_logging", "setup_logging"]

#: Libraries that log every HTTP request at INFO.
QUIET_LOGGERS = ("httpx", "httpx2", "httpcore", "httpcore2")


def quiet_logging() -> None:
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


def setup_logging(
    logs: Path, level: str, *, json_lines: bool = False, max_mib: float = 10.0, backups: int = 5
) -> None:
    """Logs go to stderr and to the home's logs/ folder; stdout is the wire.

    Both handlers mask credentials (``crow.redact``); the folders are 0700 and
    crow.log 0600 (``crow.private``), whatever the umask.  ``json_lines``: one
    JSON object per line on both ([server] log_format).  crow.log rotates past
    ``max_mib`` (0: never), keeping ``backups`` old files."""
    # Only crow serve logs to files: the other commands start without these.
    from ..observe.logs import JsonFormatter, PrivateRotatingFileHandler
    from ..private import private_dir
    from ..redact import RedactingFilter

    root = logging.getLogger()
    root.setLevel(logging.INFO)
    for chatty in QUIET_LOGGERS:  # a line per model request: noise, and ~2% of a busy loop
        logging.getLogger(chatty).setLevel(logging.WARNING)
    stderr = logging.StreamHandler(sys.stderr)
    stderr.setLevel(level.upper())
    stderr.setFormatter(
        JsonFormatter()
        if json_lines
        else logging.Formatter("crow: %(levelname)s %(name)s: %(message)s")
    )
    stderr.addFilter(RedactingFilter())
    root.addHandler(stderr)
    try:
        private_dir(logs.parent)  # the home
        file = PrivateRotatingFileHandler(
            private_dir(logs) / "crow.log",
            maxBytes=int(max_mib * 1024 * 1024),
            backupCount=backups,
        )
    except OSError as exc:
        print(f"crow: cannot write logs to {logs}: {exc}", file=sys.stderr)
        return
    file.setFormatter(
        JsonFormatter()
        if json_lines
        else logging.Formatter("%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s")
    )
    file.addFilter(RedactingFilter())
    root.addHandler(file)
