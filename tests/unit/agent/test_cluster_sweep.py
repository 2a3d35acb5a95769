"""The sweep for dead servers' turns on a shared (PostgreSQL) store: the held prompts
of many sessions may find one dead server at once, and each asks for a sweep; they
share sweeps, so the store is not swept once per session."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import pytest

from crow.agent.cluster import Cluster
from crow.config.settings import ServerSettings
from crow.store.aio import AsyncStore
from crow.store.db import PostgresStore


@pytest.fixture
async def store(postgres_url: str) -> AsyncIterator[AsyncStore]:
    shared = AsyncStore(PostgresStore(postgres_url))
    try:
        yield shared
    finally:
        await shared.aclose()


def counting_sweeps(store: AsyncStore) -> list[int]:
    """One entry per look for interrupted turns (what a sweep begins with)."""
    looks: list[int] = []
    look = store.sync.interrupted_sessions

    def counted() -> Any:
        looks.append(1)
        return look()

    store.sync.interrupted_sessions = counted  # type: ignore[method-assign]
    return looks


async def test_sweeps_asked_for_at_once_are_shared(store):
    host = SimpleNamespace(
        store=store,
        live={},
        wake=lambda *_, **__: False,
        config=SimpleNamespace(server=ServerSettings()),
    )
    cluster = Cluster(host, "thishost:2:2")  # type: ignore[arg-type]
    looks = counting_sweeps(store)
    await asyncio.gather(*(cluster._sweep() for _ in range(10)))
    # The first sweeps; the nine that asked while it ran share one more after it.
    assert len(looks) == 2
    await cluster._sweep()  # asked for after both: a sweep of its own
    assert len(looks) == 3
