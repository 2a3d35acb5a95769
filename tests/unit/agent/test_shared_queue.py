"""Held prompts on a shared (PostgreSQL) store: a session read to hold none is not
read again until a change to its held prompts is heard, and only while the server
hears every change; whatever another server holds is then seen."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from crow.agent.shared_queue import SharedQueue
from crow.store.aio import AsyncStore
from crow.store.db import PostgresStore
from crow.store.listen import Heard

OTHER = "otherhost:1:1"  # a server on another host: its rows live until they expire


class Counted:
    """The store's held-prompt reads, counted; ``during`` runs in the next one, after
    its answer came (before the caller has it)."""

    def __init__(self, store: AsyncStore) -> None:
        self.reads = 0
        self.during: Any = None
        self._read = store.held_prompts
        store.held_prompts = self.held_prompts  # type: ignore[method-assign]

    async def held_prompts(self, session_id: str, now: float) -> Any:
        self.reads += 1
        rows = await self._read(session_id, now)
        if self.during is not None:
            during, self.during = self.during, None
            await during()
        return rows


@pytest.fixture
async def servers(postgres_url: str) -> AsyncIterator[tuple[AsyncStore, PostgresStore]]:
    here, there = AsyncStore(PostgresStore(postgres_url)), PostgresStore(postgres_url)
    there.create_session(session_id="s", cwd="/p", now="t0")
    try:
        yield here, there
    finally:
        await here.aclose()
        there.close()


async def following(here: AsyncStore, queue: SharedQueue) -> asyncio.Task[None]:
    """``here`` follows the store, the queue told what it hears; once it listens."""
    heard = Heard(
        update=lambda *_: None,
        reconnect=lambda: None,
        cancel=lambda _: None,
        question=lambda _: None,
        held=queue.heard,
        listening=queue.listening,
    )
    task = asyncio.create_task(here.follow_updates(heard))
    for _ in range(400):
        if queue._listening:
            return task
        await asyncio.sleep(0.025)
    raise AssertionError("never listened")


async def heard_of(queue: SharedQueue, news: int) -> None:
    for _ in range(400):
        if queue._news > news:
            return
        await asyncio.sleep(0.025)
    raise AssertionError("the change was never heard")


def hold(there: PostgresStore, held_id: str) -> None:
    there.hold_prompt(held_id, "s", owner=OTHER, sender="c", preview="p", expires=1e12)


async def test_a_session_holding_none_is_read_once_until_a_change_is_heard(servers):
    here, there = servers
    queue = SharedQueue(here, "thishost:2:2")
    counted = Counted(here)
    listener = await following(here, queue)
    try:
        assert await queue.rows("s") == [] and await queue.rows("s") == []
        assert counted.reads == 1  # the second answer came without a read
        news = queue._news
        hold(there, "h1")
        await heard_of(queue, news)
        assert [row.id for row in await queue.rows("s")] == ["h1"]
        assert [row.id for row in await queue.rows("s")] == ["h1"]  # rows: read each time
        assert counted.reads == 3
        news = queue._news
        there.drop_held("h1", "s")
        await heard_of(queue, news)
        assert await queue.rows("s") == [] and await queue.rows("s") == []
        assert counted.reads == 4
    finally:
        listener.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await listener
    assert not queue._listening
    hold(there, "h2")  # nobody listens now: nothing is taken on trust
    assert [row.id for row in await queue.rows("s")] == ["h2"]


async def test_nothing_is_kept_while_not_listening_or_when_news_comes_during_a_read(servers):
    here, there = servers
    queue = SharedQueue(here, "thishost:2:2")
    counted = Counted(here)
    assert await queue.rows("s") == [] and await queue.rows("s") == []
    assert counted.reads == 2  # not listening yet: every answer is read
    listener = await following(here, queue)
    try:

        async def held_meanwhile() -> None:
            hold(there, "h1")
            queue.heard("s")  # its announcement, heard while the read is under way

        counted.during = held_meanwhile
        assert await queue.rows("s") == []  # read before the prompt was held
        assert [row.id for row in await queue.rows("s")] == ["h1"]
    finally:
        listener.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await listener
