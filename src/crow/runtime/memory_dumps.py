"""The memory dumps of ``CROW_DEBUG_MEMORY`` (``memory_debug``), debug only: SIGUSR1 logs
the top allocation sites, the live objects by type and the RSS, each with its change
since the previous dump; SIGUSR2 collects, trims the C heap and logs the RSS before
and after.  Imported only when the environment asks for them (tracemalloc, ~3 ms).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import tracemalloc
from collections import Counter

from .quiet import malloc_trim, rss_mib

__all__ = ["install_memory_dumps"]

log = logging.getLogger("crow.agent")

#: Lines per section of a memory dump.
DUMP_TOP = 25


def install_memory_dumps(frames: int) -> None:
    """Trace allocations with ``frames`` frames each (0: none), and dump or trim on
    SIGUSR1 and SIGUSR2."""
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
        self.snapshot: tracemalloc.Snapshot | None = None
        self.types: Counter[str] = Counter()
        self.rss = 0.0  # MiB
        self.count = 0

    def dump(self) -> None:
        gc.collect()
        types = Counter(_type_name(o) for o in gc.get_objects())
        rss = rss_mib()
        self.count += 1
        lines = [
            f"memory dump {self.count}: RSS {rss:.1f} MiB "
            f"({rss - self.rss:+.1f} since the last dump), traced "
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
        self.types, self.rss = types, rss
        log.warning("\n".join(lines))

    def _allocation_sites(self) -> list[str]:
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
        before = rss_mib()
        collected = gc.collect()
        after_gc = rss_mib()
        if (trim := malloc_trim()) is None:
            log.warning("malloc_trim is not available here")
        else:
            trim(0)
        log.warning(
            "gc.collect() freed %d objects: RSS %.1f -> %.1f MiB; malloc_trim(0): -> %.1f MiB",
            collected,
            before,
            after_gc,
            rss_mib(),
        )


def _type_name(obj: object) -> str:
    kind = type(obj)
    return f"{kind.__module__}.{kind.__qualname__}"
