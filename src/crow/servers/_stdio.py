"""Running a built-in server on stdio for another MCP host (``crow mcp NAME``)."""

from __future__ import annotations

import logging
import sys
from typing import Any

__all__ = ["run_stdio"]


def run_stdio(server: Any, *, log_level: str | int = logging.WARNING) -> int:
    """Serve MCP on stdin/stdout until the host leaves; returns the exit status.

    Stdout carries the protocol: logs go to stderr.  Configuring the root logger
    first makes the SDK's own ``basicConfig`` a no-op (it would log every request
    at INFO).
    """
    logging.basicConfig(
        stream=sys.stderr, level=log_level, format="%(name)s %(levelname)s: %(message)s"
    )
    try:
        server.run("stdio")
    except KeyboardInterrupt:
        return 130
    return 0
