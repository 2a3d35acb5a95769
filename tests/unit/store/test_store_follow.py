"""Following a shared store through the agent's face of it (SessionStore.follow_updates):
a server hears what another logs, cancels, asks and holds; a store no other server
shares says it has nothing to follow."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import psycopg
import pytest

from crow.store.aio import AsyncStore
from crow.store.db import PostgresStore, SqliteStore, StoreError
from crow.store.listen import Heard


async def listening(url: str) -> None:
    """Wait until a connection has run its last LISTEN (follow_updates is ready)."""
    with psycopg.connect(url, autocommit=True) as admin:
        for _ in range(200):
            row = admin.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND query = 'LISTEN crow_held'"
            ).fetchone()
            if row is not None and row[0]:
                return
            await asyncio.sleep(0.05)
    raise AssertionError("follow_updates never listened")


async def test_a_server_hears_what_another_does_on_a_shared_store(postgres_url):
    here, there = AsyncStore(PostgresStore(postgres_url)), PostgresStore(postgres_url)
    heard: asyncio.Queue[tuple[str, object]] = asyncio.Queue()

    def said(kind: str) -> Callable[..., None]:
        return lambda *what: heard.put_nowait((kind, what))

    kinds = ("update", "reconnect", "cancel", "question", "held")
    following = asyncio.create_task(here.follow_updates(Heard(*(said(k) for k in kinds))))
    try:
        assert here.shared
        await listening(postgres_url)
        there.create_session(session_id="s", cwd="/p", now="t0")
        there.append_update("s", b'{"a":1}')
        there.announce_cancel("s")
        there.file_question("q1", "s", "{}")
        there.hold_prompt("h1", "s", owner="o", sender="c", preview="p", expires=1e12)
        got = [await asyncio.wait_for(heard.get(), 10) for _ in range(4)]
        assert got == [
            ("update", ("s", 1)),
            ("cancel", ("s",)),
            ("question", ("q1",)),
            ("held", ("s",)),
        ]
    finally:
        following.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await following
        there.close()
        await here.aclose()


async def test_a_transaction_announces_each_session_once_at_its_last_seq(postgres_url):
    """Three updates to one session and one to another, with a transcript entry, in
    one transaction: two announcements, each at its session's last seq (a follower
    reads the log from what it sent, so the updates between are not lost)."""
    here, there = AsyncStore(PostgresStore(postgres_url)), PostgresStore(postgres_url)
    heard: asyncio.Queue[tuple[str, object]] = asyncio.Queue()

    def said(kind: str) -> Callable[..., None]:
        return lambda *what: heard.put_nowait((kind, what))

    kinds = ("update", "reconnect", "cancel", "question", "held")
    following = asyncio.create_task(here.follow_updates(Heard(*(said(k) for k in kinds))))
    try:
        await listening(postgres_url)
        for session_id in ("s", "t"):
            there.create_session(session_id=session_id, cwd="/p", now="t0")
        there.append_update("s", b'{"first":1}')
        batch = [("s", b'{"n":%d}' % n, None, None, None) for n in range(3)]
        batch.insert(1, ("t", b'{"n":0}', "running", None, None))
        reply = [("s", {"role": "assistant", "content": "hi"}, "message")]
        assert there.append_updates(batch, reply) == [2, 1, 3, 4]
        there.announce_cancel("s")  # the end of what to hear
        got = []
        while (kind_what := await asyncio.wait_for(heard.get(), 10))[0] != "cancel":
            got.append(kind_what)
        assert got[0] == ("update", ("s", 1))
        assert sorted(got[1:]) == [("update", ("s", 4)), ("update", ("t", 1))]
        assert [seq for seq, _ in there.updates_list("s")] == [1, 2, 3, 4]
        assert there.get_session("t").state == "running"  # type: ignore[union-attr]
        assert [e.message for e in there.transcript("s")] == [reply[0][1]]
    finally:
        following.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await following
        there.close()
        await here.aclose()


async def test_a_store_no_other_server_shares_has_nothing_to_follow(tmp_path):
    store = AsyncStore(SqliteStore(tmp_path / "a.db"))
    try:
        assert not store.shared
        with pytest.raises(StoreError, match="only a shared"):
            await store.follow_updates(Heard(*[lambda *_: None] * 5))
    finally:
        await store.aclose()
