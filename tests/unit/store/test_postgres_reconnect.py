"""The PostgreSQL store after its connection is lost: a terminated backend, a server
that restarts.  The next call reconnects; a transaction cut short keeps nothing."""

from __future__ import annotations

import asyncio
import select
import threading
from typing import Any

import psycopg
import pytest

from crow.store import postgres as store_db
from crow.store.aio import AsyncStore
from crow.store.db import PostgresStore, StoreUnavailable, database_errors


def terminate_backends(url: str) -> int:
    """pg_terminate_backend on every connection to ``url``'s database but this one."""
    with psycopg.connect(url, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()
    return len(rows)


@pytest.fixture
def store(postgres_url: str) -> Any:
    opened = PostgresStore(postgres_url)
    yield opened
    opened.close()


def test_a_terminated_backend_is_replaced_before_the_next_call(store, postgres_url):
    store.create_session(session_id="s", cwd="/p", now="t0")
    assert terminate_backends(postgres_url) == 1
    # The backend exits a moment after the signal: wait for its goodbye to arrive.
    readable, _, _ = select.select([store.db.conn.pgconn.socket], [], [], 10)
    assert readable
    # The server said goodbye on the idle connection: seen without a round trip.
    assert store.append_update("s", b'{"a":1}') == 1
    assert store.get_session("s") is not None


def test_a_connection_dropped_silently_is_checked_after_a_quiet_spell(
    store, postgres_url, monkeypatch
):
    """No goodbye reached us (a failover, a dropped route): the check after
    CHECK_AFTER_S of quiet finds it dead, and a new connection takes the call."""
    store.create_session(session_id="s", cwd="/p", now="t0")
    monkeypatch.setattr(store.db, "_hung_up", lambda: False)  # its goodbye is not seen
    monkeypatch.setattr(store_db, "CHECK_AFTER_S", 0.0)
    terminate_backends(postgres_url)
    assert store.append_update("s", b'{"a":1}') == 1


def test_a_call_cut_short_fails_and_the_next_one_reconnects(store, postgres_url, monkeypatch):
    store.create_session(session_id="s", cwd="/p", now="t0")
    monkeypatch.setattr(store.db, "_hung_up", lambda: False)
    terminate_backends(postgres_url)
    with pytest.raises(database_errors()):
        store.append_update("s", b'{"lost":1}')  # not retried: it may have been done
    assert store.append_update("s", b'{"a":1}') == 1
    assert [body for _, body in store.updates("s")] == [b'{"a":1}']


def die_after_the_lock(store: PostgresStore, url: str, monkeypatch: Any) -> None:
    """The backend of ``store`` dies once the next batch's lock statement has gone
    out (once: the batches after it are left alone)."""
    execute = store.db.execute
    died = False

    def lock_then_die(sql: str, params: Any = ()) -> Any:
        nonlocal died
        cursor = execute(sql, params)
        if sql == store_db._LOCK_SESSIONS and not died:
            died = True
            terminate_backends(url)
        return cursor

    monkeypatch.setattr(store.db, "execute", lock_then_die)


def test_a_transaction_whose_connection_goes_keeps_nothing(store, postgres_url, monkeypatch):
    """The backend dies between the statements of a batch: none of it is kept, the
    rest of it is never run on a new connection, and the store goes on."""
    store.create_session(session_id="s", cwd="/p", now="t0")
    die_after_the_lock(store, postgres_url, monkeypatch)
    batch = [("s", b'{"a":1}', None, None, None), ("s", b'{"b":2}', "idle", "end_turn", "t1")]
    with pytest.raises(database_errors()):
        store.append_updates(batch, transcript=[("s", {"role": "user", "content": "x"}, "message")])
    monkeypatch.undo()
    assert list(store.updates("s")) == []
    assert store.transcript("s") == []
    assert store.get_session("s").state == "idle" and store.get_session("s").updated_at == "t0"
    assert store.append_updates(batch) == [1, 2]


async def test_batches_queued_behind_one_cut_short_are_written_whole_once(
    postgres_url, monkeypatch
):
    """Through AsyncStore: the connection dies in a batch while more appends queue
    behind it.  Each update of that batch fails (none kept: not its transcript entry,
    not its state); the appends behind it reconnect and are logged once each, in the
    order they were made, numbered after what was kept."""
    store = AsyncStore(PostgresStore(postgres_url))
    try:
        await store.create_session(session_id="s", cwd="/p", now="t0")
        assert await store.append_update("s", b'{"first":1}') == 1
        die_after_the_lock(store.sync, postgres_url, monkeypatch)
        entered, go_on = threading.Event(), threading.Event()
        execute = store.sync.db.execute

        def held_back(sql: str, params: Any = ()) -> Any:
            if sql == store_db._LOCK_SESSIONS and not entered.is_set():
                entered.set()  # the first batch is on the thread: the rest queue behind
                go_on.wait(10)
            return execute(sql, params)

        monkeypatch.setattr(store.sync.db, "execute", held_back)
        message = ("s", {"role": "assistant", "content": "lost"}, "message")
        batch = [("s", b'{"lost":1}', None, None, None), ("s", b'{"lost":2}', "idle", "x", "t1")]
        lost = store.append_updates(batch, [message])
        await asyncio.to_thread(entered.wait, 10)
        kept = [store.append_update("s", b'{"kept":%d}' % i) for i in range(3)]
        kept += store.append_updates([("s", b'{"kept":3}', "idle", "end_turn", "t2")])
        go_on.set()
        for future in lost:
            with pytest.raises(StoreUnavailable):
                await future
        assert [await future for future in kept] == [2, 3, 4, 5]
        monkeypatch.undo()
        bodies = [body for _, body in await store.updates("s")]
        assert bodies == [b'{"first":1}', *(b'{"kept":%d}' % i for i in range(4))]
        assert await store.transcript("s") == []
        record = await store.get_session("s")
        assert record is not None and (record.stop_reason, record.updated_at) == ("end_turn", "t2")
    finally:
        await store.aclose()


async def test_the_agents_store_says_unavailable_then_carries_on(postgres_url, monkeypatch):
    """Through AsyncStore, as crow serve uses it: one StoreUnavailable, then service."""
    store = AsyncStore(PostgresStore(postgres_url))
    try:
        await store.create_session(session_id="s", cwd="/p", now="t0")
        monkeypatch.setattr(store.sync.db, "_hung_up", lambda: False)
        terminate_backends(postgres_url)
        with pytest.raises(StoreUnavailable):
            await store.append_update("s", b'{"lost":1}')
        assert await store.append_update("s", b'{"a":1}') == 1
    finally:
        await store.aclose()
