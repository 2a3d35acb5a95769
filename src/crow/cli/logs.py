"""Where a ``crow`` command's log lines go: plain warnings for a person, or the
server's stderr and $CROW_HOME/logs (credentials masked) for ``crow serve``."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

__all__ = ["QUIET_LOGGERS", "apply_log_settings", "quiet_logging", "setup_logging"]

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


#: The handlers setup_logging added: the config's [server] keys reshape them.
_SERVER_HANDLERS: list[logging.Handler] = []


def setup_logging(logs: Path, level: str) -> None:
    """Logs go to stderr and to the home's logs/ folder; stdout is the wire.

    Both handlers mask credentials (``crow.redact``); the folders are 0700 and
    crow.log 0600 (``crow.private``), whatever the umask.  Set up before the
    config is read (what reading it warns of is logged like the rest), then
    reshaped by ``apply_log_settings``."""
    # Only crow serve logs to files: the other commands start without these.
    from ..observe.logs import PrivateRotatingFileHandler
    from ..private import private_dir
    from ..redact import RedactingFilter

    root = logging.getLogger()
    root.setLevel(logging.INFO)
    for chatty in QUIET_LOGGERS:  # a line per model request: noise, and ~2% of a busy loop
        logging.getLogger(chatty).setLevel(logging.WARNING)
    stderr = logging.StreamHandler(sys.stderr)
    stderr.setLevel(level.upper())
    stderr.setFormatter(logging.Formatter("crow: %(levelname)s %(name)s: %(message)s"))
    stderr.addFilter(RedactingFilter())
    root.addHandler(stderr)
    _SERVER_HANDLERS.append(stderr)
    try:
        private_dir(logs.parent)  # the home
        file = PrivateRotatingFileHandler(private_dir(logs) / "crow.log")
    except OSError as exc:
        print(f"crow: cannot write logs to {logs}: {exc}", file=sys.stderr)
        return
    file.setFormatter(
        logging.Formatter("%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s")
    )
    file.addFilter(RedactingFilter())
    root.addHandler(file)
    _SERVER_HANDLERS.append(file)


def apply_log_settings(*, json_lines: bool, max_mib: float, backups: int) -> None:
    """``[server]``'s log keys: one JSON object per line on both handlers
    (``log_format``); crow.log rotated past ``max_mib`` (0: never), keeping
    ``backups`` old files."""
    from ..observe.logs import JsonFormatter, PrivateRotatingFileHandler

    for handler in _SERVER_HANDLERS:
        if json_lines:
            handler.setFormatter(JsonFormatter())
        if isinstance(handler, PrivateRotatingFileHandler):
            handler.maxBytes, handler.backupCount = int(max_mib * 1024 * 1024), backups
