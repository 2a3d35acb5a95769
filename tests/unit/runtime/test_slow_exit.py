"""A slow shutdown says what it still waits for (crow.runtime.slow_exit)."""

from __future__ import annotations

import asyncio
import logging

from crow.runtime.slow_exit import report_if_slow


async def test_a_slow_shutdown_logs_each_pending_task_and_where_it_waits(caplog):
    """Down to the innermost await: where a library waits, not only our call to it."""

    async def deep_inside_a_library() -> None:
        await asyncio.Event().wait()

    async def waits_on_the_store_forever() -> None:
        await deep_inside_a_library()

    stuck = asyncio.create_task(waits_on_the_store_forever(), name="stuck-writer")
    caplog.set_level(logging.WARNING, logger="crow.agent")
    report_if_slow(0.05)
    await asyncio.sleep(0.2)
    stuck.cancel()
    [record] = [r for r in caplog.records if "shutdown still waits" in r.getMessage()]
    message = record.getMessage()
    assert "stuck-writer" in message and "waits_on_the_store_forever" in message
    assert "deep_inside_a_library" in message and "in wait" in message  # Event.wait


class Left(Exception):
    """What the test's ``leave`` raises in place of ending the process."""


def leave(code: int):  # type: ignore[no-untyped-def]
    raise Left(code)


async def stubborn() -> None:
    """A task that will not end when cancelled (as an MCP client stuck in its SDK)."""
    while True:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            continue


def run_server(server) -> tuple[bool, list[asyncio.Task]]:  # type: ignore[no-untyped-def]
    """``serve_then_leave(server)`` on a loop of its own (as ``crow serve`` runs it):
    whether it left, and the tasks still pending then (closed by hand here, where
    ``asyncio.run`` would wait for them forever)."""
    from crow.runtime.slow_exit import serve_then_leave

    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(serve_then_leave(server(), leave))
        left = False
    except Left:
        left = True
    pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for task in pending:
        task.get_coro().close()
    loop.close()
    return left, pending


def test_a_server_that_leaves_a_stubborn_task_behind_still_exits(caplog, monkeypatch):
    import crow.runtime.slow_exit as slow_exit

    monkeypatch.setattr(slow_exit, "LEFTOVER_WAIT_S", 0.1)
    caplog.set_level(logging.WARNING, logger="crow.agent")
    started: list[asyncio.Task] = []

    async def server() -> None:
        started.append(asyncio.create_task(stubborn(), name="stuck-mcp-client"))
        started.append(asyncio.create_task(asyncio.sleep(3600), name="polite"))
        await asyncio.sleep(0)  # both are under way when the server returns

    left, pending = run_server(server)
    assert left and [t.get_name() for t in pending] == ["stuck-mcp-client"]
    assert started[1].cancelled()
    [record] = [r for r in caplog.records if "leaving without them" in r.getMessage()]
    assert "stuck-mcp-client" in record.getMessage() and "polite" not in record.getMessage()


def test_a_server_whose_tasks_end_when_cancelled_just_returns():
    started: list[asyncio.Task] = []

    async def server() -> None:
        started.append(asyncio.create_task(asyncio.sleep(3600), name="polite"))

    assert run_server(server) == (False, [])
    assert started[0].cancelled()
