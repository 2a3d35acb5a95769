"""A server whose clients are gone must exit, whatever is still pending.

An editor waits for the agent's exit, and a process that lingers keeps its
sockets and leases.  Shutdown waits for running turns, the tools and the store,
each within a bound.  Two guards stand behind those bounds:

- ``report_if_slow``: a shutdown still going after ``REPORT_AFTER_S`` logs every
  pending task with where it waits (a task's own stack, which a thread dump
  cannot show: the loop's thread just waits in ``select``).
- ``serve_then_leave``: once the server has shut down, the tasks left are
  cancelled and get ``LEFTOVER_WAIT_S``; if some still run, they are reported and
  the process leaves without them.  ``asyncio.run`` would wait for them forever:
  an MCP client cancelled while its in-process server was starting was seen
  stuck in the MCP SDK's shutdown, and ``crow serve`` never exited.
"""

from __future__ import annotations

import asyncio
import io
import logging
from collections.abc import Callable, Coroutine
from typing import Any, NoReturn

__all__ = ["LEFTOVER_WAIT_S", "REPORT_AFTER_S", "report_if_slow", "serve_then_leave"]

log = logging.getLogger("crow.agent")

#: Seconds of shutdown (past any grace for running turns) before the report.
REPORT_AFTER_S = 5.0
#: Seconds the tasks left after shutdown get to end once cancelled.
LEFTOVER_WAIT_S = 2.0
#: Frames shown per task.
FRAMES = 8


def report_if_slow(after_s: float = REPORT_AFTER_S) -> asyncio.TimerHandle:
    """Arm the report; the loop's end, or cancelling the handle, disarms it."""
    return asyncio.get_running_loop().call_later(after_s, _report, f"after {after_s:.0f} s")


async def serve_then_leave(
    main: Coroutine[Any, Any, None], leave: Callable[[int], NoReturn]
) -> None:
    """Run ``main`` (a server, shut down when it returns), then end the tasks it
    left; ``leave(0)`` when some will not end (see the module doc)."""
    await main
    current = asyncio.current_task()
    leftovers = [t for t in asyncio.all_tasks() if t is not current and not t.done()]
    for task in leftovers:
        task.cancel()
    if not leftovers:
        return
    _, stuck = await asyncio.wait(leftovers, timeout=LEFTOVER_WAIT_S)
    if stuck:
        _report(f"and {LEFTOVER_WAIT_S:.0f} s after being cancelled; leaving without them")
        leave(0)


def _report(when: str) -> None:
    current = asyncio.current_task()
    pending = [t for t in asyncio.all_tasks() if t is not current and not t.done()]
    lines = [f"shutdown still waits {when}, on {len(pending)} tasks:"]
    for task in pending:
        where = io.StringIO()
        task.print_stack(limit=FRAMES, file=where)
        lines.append(f"- {task.get_name()}: {where.getvalue().strip()}")
    log.warning("%s", "\n".join(lines))
