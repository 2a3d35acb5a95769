"""Giving memory back once the agent goes quiet.

A busy session holds its transcript, its model requests and its clients'
buffers; when its last client leaves it is unloaded and all of that is freed.
Freed, but not given back: CPython keeps an arena of small objects while one
object in it lives, cycles wait for the collector, and glibc keeps freed heap
pages.  A long-lived ``crow serve`` then sits tens of MiB above what it uses
after every busy hour.  So once no session is live for a moment, the agent
runs the collector and ``malloc_trim``: what was freed goes back to the system,
and a leak is what stays.

The collection blocks the loop for tens of milliseconds, which is why it waits
for quiet, and runs at most once per ``every_s``.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import logging
import os
import time
from collections.abc import Callable

__all__ = ["MemoryRelease", "malloc_trim", "release_memory", "rss_mib"]

log = logging.getLogger("crow.agent")

#: How long the agent stays without a live session before it gives memory back.
QUIET_S = 2.0
#: At most one release in this many seconds (a script of short runs stays cheap).
EVERY_S = 30.0


@functools.cache
def malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim`` (from the process's own symbols), or None on another
    C library.  Looked up at the first release, not at import: crow serve starts
    without it."""
    import ctypes  # ~5 ms: at the first release, not at crow serve's start

    try:
        return getattr(ctypes.CDLL(None), "malloc_trim", None)
    except (OSError, TypeError):  # no handle on the process itself (Windows)
        return None


def rss_mib() -> float:
    """The process's resident memory in MiB (NaN where there is no /proc)."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):  # not Linux
        return float("nan")


def release_memory() -> None:
    """Collect every generation, then hand the C heap's free pages back."""
    before = rss_mib()
    freed = gc.collect()
    if (trim := malloc_trim()) is not None:
        trim(0)
    log.info(
        "gave memory back: %d objects collected, RSS %.1f -> %.1f MiB", freed, before, rss_mib()
    )


class MemoryRelease:
    """Calls ``release`` once ``is_quiet()`` has held for ``quiet_s``.

    ``quiet()`` says the agent may have gone quiet (its last session has just
    unloaded); the timer it starts checks again when it fires, so a client that
    came back meanwhile only costs a check.
    """

    def __init__(
        self,
        is_quiet: Callable[[], bool],
        *,
        release: Callable[[], None] = release_memory,
        quiet_s: float = QUIET_S,
        every_s: float = EVERY_S,
    ) -> None:
        self.is_quiet = is_quiet
        self.release = release
        self.quiet_s = quiet_s
        self.every_s = every_s
        self.last = -float("inf")
        self._timer: asyncio.TimerHandle | None = None

    def quiet(self) -> None:
        if self._timer is not None:
            return  # one is coming: it checks again when it fires
        delay = max(self.quiet_s, self.last + self.every_s - time.monotonic())
        self._timer = asyncio.get_running_loop().call_later(delay, self._fire)

    def _fire(self) -> None:
        self._timer = None
        if self.is_quiet():
            self.last = time.monotonic()
            self.release()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
