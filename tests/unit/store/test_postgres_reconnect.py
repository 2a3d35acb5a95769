"""The PostgreSQL store after its connection is lost: a terminated backend, a server
that restarts.  The next call reconnects; a transaction cut short keeps nothing."""

from __future__ import annotations

import select
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


def test_a_transaction_whose_connection_goes_keeps_nothing(store, postgres_url, monkeypatch):
    """The backend dies between the statements of a batch: none of it is kept, the
    rest of it is never run on a new connection, and the store goes on."""
    store.create_session(session_id="s", cwd="/p", now="t0")
    locked = store._lock_session

    def lock_then_die(session_id: str) -> None:
        locked(session_id)
        terminate_backends(postgres_url)

    monkeypatch.setattr(store, "_lock_session", lock_then_die)
    batch = [("s", b'{"a":1}', None, None, None), ("s", b'{"b":2}', "idle", "end_turn", "t1")]
    with pytest.raises(database_errors()):
        store.append_updates(batch, transcript=[("s", {"role": "user", "content": "x"}, "message")])
    monkeypatch.setattr(store, "_lock_session", locked)
    assert list(store.updates("s")) == []
    assert store.transcript("s") == []
    assert store.get_session("s").state == "idle" and store.get_session("s").updated_at == "t0"
    assert store.append_updates(batch) == [1, 2]


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
