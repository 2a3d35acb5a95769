"""Memory debugging for a running agent (``CROW_DEBUG_MEMORY``), debug only.

``CROW_DEBUG_MEMORY=N`` (debug only: tracing slows the agent several fold)
traces allocations with N frames each (0: no tracing, the rest still works);
then SIGUSR1 logs the top allocation sites, the live objects by type and the
RSS, each with its change since the previous dump, and SIGUSR2 runs
``gc.collect()`` and glibc's ``malloc_trim`` and logs the RSS before and after
(memory the allocator kept but nothing uses comes back; a leak does not).

Tracing slows the agent several fold: never set it in production.  This module is the
switch; the dumps are ``memory_dumps``.
"""

from __future__ import annotations

import os
from collections.abc import Coroutine
from typing import Any

__all__ = ["run_with_debug_hooks"]

DEBUG_MEMORY_ENV = "CROW_DEBUG_MEMORY"


async def run_with_debug_hooks(main: Coroutine[Any, Any, None]) -> None:
    """Run ``main`` (a serve coroutine), with the memory dumps if the environment asks."""
    frames = os.environ.get(DEBUG_MEMORY_ENV, "")
    if frames:
        # Only when asked: every crow serve passes here, and the dumps need tracemalloc.
        from .memory_dumps import install_memory_dumps

        install_memory_dumps(int(frames) if frames.isdigit() else 1)
    await main
