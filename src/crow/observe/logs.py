"""crow serve's log lines as JSON, and a log file that rotates and stays private.

``JsonFormatter`` writes one object per line (``time``, ``level``, ``logger``,
``message``, ``pid``, and ``exception`` when there is one), for log shippers
that read stderr or the file.  It sits after ``crow.redact``'s filter, which
has already masked the message and traceback.  Written by hand: a dozen lines
over the standard library, where a JSON-logging package would be one more
dependency for the same dozen lines.

``PrivateRotatingFileHandler`` is the standard size-based rotation whose new
files are made 0600 like the first one (the standard handler makes them with
the umask's mode, and a log line may hold what a user typed).  Several servers
sharing one home each rotate the file they write: a server whose file another
rotated away keeps writing to the renamed file until its own next rotation, so
no line is lost, but one may land in ``crow.log.1``.
"""

from __future__ import annotations

import json
import logging
import logging.handlers
import time
from pathlib import Path
from typing import Any

from crow.private import private_file

__all__ = ["JsonFormatter", "PrivateRotatingFileHandler"]


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": _iso(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "pid": record.process,
        }
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            line["exception"] = record.exc_text
        if record.stack_info:
            line["stack"] = record.stack_info
        return json.dumps(line, ensure_ascii=False)


def _iso(created: float) -> str:
    seconds = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created))
    return f"{seconds}.{int(created % 1 * 1000):03d}Z"


class PrivateRotatingFileHandler(logging.handlers.RotatingFileHandler):
    def _open(self) -> Any:
        private_file(Path(self.baseFilename))
        return super()._open()
