"""The event loop ``crow serve`` runs on: uvloop, where it is installed.

A loaded server spends most of its loop's time in the loop itself: socket
writes (one per WebSocket message), reads, callbacks, task steps.  uvloop does
that work in C (libuv): ``bench/http_bench.py`` over WebSocket served 15-25 %
more prompts per second on it, with that much less CPU per prompt.

``CROW_EVENT_LOOP=asyncio`` keeps the standard loop (to rule uvloop out when
chasing a bug); so does a platform uvloop does not build for (Windows).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Coroutine
from typing import Any

__all__ = ["EVENT_LOOP_ENV", "run"]

log = logging.getLogger("crow.agent")

EVENT_LOOP_ENV = "CROW_EVENT_LOOP"
LOOPS = ("uvloop", "asyncio")


def run(main: Coroutine[Any, Any, None]) -> None:
    """``asyncio.run(main)``, on uvloop unless told otherwise or unavailable."""
    chosen = os.environ.get(EVENT_LOOP_ENV, "uvloop")
    if chosen not in LOOPS:
        log.warning("%s=%r is neither uvloop nor asyncio: using uvloop", EVENT_LOOP_ENV, chosen)
    if chosen != "asyncio":
        try:
            import uvloop  # optional, and not imported when asyncio is asked for
        except ImportError:
            log.info("uvloop is not installed: serving on asyncio's own loop")
        else:
            log.info("serving on uvloop")
            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                runner.run(main)
            return
    asyncio.run(main)
