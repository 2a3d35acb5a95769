"""A server whose clients are gone must exit, whatever is still pending.

An editor waits for the agent's exit, and a process that lingers keeps its
sockets and leases.  Shutdown waits for running turns, the tools and the store,
each within a bound.  Two guards stand behind those bounds:

- ``report_if_slow``: a shutdown still going after ``REPORT_AFTER_S`` logs every
  pending task with where it waits, down to the innermost await (which a thread dump
  cannot show: the loop's thread just waits in ``select``).
- ``serve_then_leave``: once the server has shut down, the tasks left are
  cancelled and get ``LEFTOVER_WAIT_S``; if some still run, they are reported and
  the process leaves without them.  ``asyncio.run`` would wait for them forever:
  the clients of the four built-in MCP servers were once seen stuck in the MCP
  SDK's shutdown, and ``crow serve`` never exited.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any, NoReturn

__all__ = ["LEFTOVER_WAIT_S", "REPORT_AFTER_S", "report_if_slow", "serve_then_leave"]

log = logging.getLogger("crow.agent")

#: Seconds of shutdown (past any grace for running turns) before the report.
REPORT_AFTER_S = 5.0
#: Seconds the tasks left after shutdown get to end once cancelled.
LEFTOVER_WAIT_S = 2.0
#: Awaits followed down per task.
MAX_DEPTH = 40


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
        lines.append(f"- {task.get_name()}, awaiting:")
        lines += [f"    {where}" for where in _awaiting(task.get_coro())]
    log.warning("%s", "\n".join(lines))


def _awaiting(coroutine: Any) -> list[str]:
    """Where ``coroutine`` waits, outermost first: each coroutine it awaits, down to
    the innermost (``Task.print_stack`` shows only the outermost frame of a
    suspended task, which says little when the wait is deep inside a library)."""
    chain: list[str] = []
    while coroutine is not None and len(chain) < MAX_DEPTH:
        frame = _frame_of(coroutine)
        if frame is None:
            break  # a future (or another C-level awaitable): no frame of its own
        code = frame.f_code
        chain.append(f"{code.co_filename}:{frame.f_lineno} in {code.co_name}")
        coroutine = next(
            (getattr(coroutine, a) for a in _AWAITED if getattr(coroutine, a, None) is not None),
            None,
        )
    return chain


def _frame_of(awaitable: Any) -> Any:
    return next((getattr(awaitable, a) for a in _FRAMES if getattr(awaitable, a, None)), None)


#: What a coroutine, a generator and an async generator call their frame, and what
#: each is waiting on.
_FRAMES = ("cr_frame", "gi_frame", "ag_frame")
_AWAITED = ("cr_await", "gi_yieldfrom", "ag_await")
