"""Memory debugging for a running agent (``CROW_DEBUG_MEMORY``), debug only.

``CROW_DEBUG_MEMORY=N`` (debug only: tracing slows the agent several fold)
traces allocations with N frames each (0: no tracing, the rest still works);
then SIGUSR1 logs the top allocation sites, the live objects by type and the
RSS, each with its change since the previous dump, and SIGUSR2 runs
``gc.collect()`` and glibc's ``malloc_trim`` and logs the RSS before and after
(memory the allocator kept but nothing uses comes back; a leak does not).

Tracing slows the agent several fold: never set it in production.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections import Counter
from collections.abc import Coroutine
from typing import Any

__all__ = ["run_with_debug_hooks"]

log = logging.getLogger("crow.agent")

DEBUG_MEMORY_ENV = "CROW_DEBUG_MEMORY"
#: Lines per section of a memory dump.
DUMP_TOP = 25


async def run_with_debug_hooks(main: Coroutine[Any, Any, None]) -> None:
    """Run ``main`` (a serve coroutine), with the memory dumps if the environment asks."""
    frames = os.environ.get(DEBUG_MEMORY_ENV, "")
    if frames:
        _install_memory_dumps(int(frames) if frames.isdigit() else 1)
    await main


def _install_memory_dumps(frames: int) -> None:
    import signal
    import tracemalloc

    if frames > 0:
        tracemalloc.start(frames)
    dumper = _MemoryDumper()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGUSR1, dumper.dump)
    loop.add_signal_handler(signal.SIGUSR2, dumper.trim)
    log.warning(
        "memory debugging on (%d frames): SIGUSR1 dumps, SIGUSR2 collects and trims; pid %d",
        frames,
        os.getpid(),
    )


class _MemoryDumper:
    """Each dump is compared with the previous one: dump, run the load, dump again."""

    def __init__(self) -> None:
        self.snapshot: Any = None
        self.types: Counter[str] = Counter()
        self.rss_kib = 0
        self.count = 0

    def dump(self) -> None:
        import gc
        import tracemalloc

        gc.collect()
        types = Counter(_type_name(o) for o in gc.get_objects())
        rss = _rss_kib()
        self.count += 1
        lines = [
            f"memory dump {self.count}: RSS {rss / 1024:.1f} MiB "
            f"({(rss - self.rss_kib) / 1024:+.1f} since the last dump), traced "
            f"{tracemalloc.get_traced_memory()[0] / 1048576:.1f} MiB, "
            f"{sum(types.values())} gc-tracked objects"
        ]
        if tracemalloc.is_tracing():
            lines += self._allocation_sites()
        lines.append("live objects by type (count, change):")
        lines += [f"  {n:>8} {n - self.types[t]:+8}  {t}" for t, n in types.most_common(DUMP_TOP)]
        grown = Counter({t: n - self.types[t] for t, n in types.items()}).most_common(DUMP_TOP)
        lines.append("types that grew most:")
        lines += [f"  {d:+8}  {t}" for t, d in grown if d > 0]
        self.types, self.rss_kib = types, rss
        log.warning("\n".join(lines))

    def _allocation_sites(self) -> list[str]:
        import tracemalloc

        snapshot = tracemalloc.take_snapshot().filter_traces(
            [tracemalloc.Filter(False, tracemalloc.__file__)]
        )
        lines = ["top allocation sites (size, count):"]
        lines += [f"  {stat}" for stat in snapshot.statistics("lineno")[:DUMP_TOP]]
        if self.snapshot is not None:
            lines.append("growth since the last dump (with the callers, if traced):")
            for diff in snapshot.compare_to(self.snapshot, "traceback")[:DUMP_TOP]:
                lines.append(f"  {diff.size_diff / 1024:+.1f} KiB, {diff.count_diff:+d} blocks")
                lines += [f"    {line}" for line in diff.traceback.format(most_recent_first=True)]
        self.snapshot = snapshot
        return lines

    def trim(self) -> None:
        import ctypes
        import gc

        before = _rss_kib()
        collected = gc.collect()
        after_gc = _rss_kib()
        try:
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        except (OSError, AttributeError):  # not glibc
            log.warning("malloc_trim is not available here")
        log.warning(
            "gc.collect() freed %d objects: RSS %.1f -> %.1f MiB; malloc_trim(0): -> %.1f MiB",
            collected,
            before / 1024,
            after_gc / 1024,
            _rss_kib() / 1024,
        )


def _type_name(obj: object) -> str:
    kind = type(obj)
    return f"{kind.__module__}.{kind.__qualname__}"


def _rss_kib() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0
