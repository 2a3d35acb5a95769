"""A slow shutdown says what it still waits for (crow.agent.slow_exit)."""

from __future__ import annotations

import asyncio
import logging

from crow.agent.slow_exit import report_if_slow


async def test_a_slow_shutdown_logs_each_pending_task_and_where_it_waits(caplog):
    async def waits_on_the_store_forever() -> None:
        await asyncio.Event().wait()

    stuck = asyncio.create_task(waits_on_the_store_forever(), name="stuck-writer")
    caplog.set_level(logging.WARNING, logger="crow.agent")
    report_if_slow(0.05)
    await asyncio.sleep(0.2)
    stuck.cancel()
    [record] = [r for r in caplog.records if "shutdown still waits" in r.getMessage()]
    assert "stuck-writer" in record.getMessage()
    assert "waits_on_the_store_forever" in record.getMessage()
