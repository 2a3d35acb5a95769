"""A report of what a slow shutdown still waits for.

A server whose clients are gone must exit: an editor waits for it, and a process
that lingers keeps its children, sockets and leases.  Shutdown waits for running
turns, the tools and the store, each within a bound; if it is still going after
``REPORT_AFTER_S`` anyway, this logs every task still pending with where it
waits, so the stuck one can be found (a task's own stack, which a thread dump
cannot show: the loop's thread just waits in ``select``).
"""

from __future__ import annotations

import asyncio
import io
import logging

__all__ = ["REPORT_AFTER_S", "report_if_slow"]

log = logging.getLogger("crow.agent")

#: Seconds of shutdown (past any grace for running turns) before the report.
REPORT_AFTER_S = 5.0
#: Frames shown per task.
FRAMES = 8


def report_if_slow(after_s: float = REPORT_AFTER_S) -> asyncio.TimerHandle:
    """Arm the report; the loop's end, or cancelling the handle, disarms it."""
    return asyncio.get_running_loop().call_later(after_s, _report, after_s)


def _report(after_s: float) -> None:
    current = asyncio.current_task()
    pending = [t for t in asyncio.all_tasks() if t is not current and not t.done()]
    lines = [f"shutdown still waits after {after_s:.0f} s, on {len(pending)} tasks:"]
    for task in pending:
        where = io.StringIO()
        task.print_stack(limit=FRAMES, file=where)
        lines.append(f"- {task.get_name()}: {where.getvalue().strip()}")
    log.warning("%s", "\n".join(lines))
