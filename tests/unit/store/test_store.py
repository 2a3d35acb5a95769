"""The session store, on SQLite and on PostgreSQL: migrations, the update log,
listing, the transcript, the lease.  Every test taking ``store`` runs on both."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest

from crow.store.db import PostgresStore, SqliteStore, StoreError, open_store
from crow.store.migrations import MIGRATIONS


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request, tmp_path):
    location = tmp_path / "crow.db"
    if request.param == "postgresql":
        location = request.getfixturevalue("postgres_url")
    s = open_store(location)
    assert s.dialect == request.param
    yield s
    s.close()


def test_a_new_store_is_migrated_to_the_latest_version(tmp_path):
    SqliteStore(tmp_path / "a.db").close()
    db = sqlite3.connect(tmp_path / "a.db")
    assert db.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"sessions", "updates", "transcript"} <= tables
    db.close()
    SqliteStore(tmp_path / "a.db").close()  # reopening migrates nothing and fails nothing


def test_a_store_from_a_newer_crow_is_refused(tmp_path):
    db = sqlite3.connect(tmp_path / "new.db")
    db.execute(f"PRAGMA user_version = {len(MIGRATIONS) + 1}")
    db.close()
    with pytest.raises(RuntimeError, match="newer than this Crow"):
        SqliteStore(tmp_path / "new.db")


def test_a_file_that_is_not_a_database_is_a_clear_error(tmp_path):
    (tmp_path / "junk.db").write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError, match="cannot open the session store"):
        SqliteStore(tmp_path / "junk.db")


def test_sessions_are_created_together_with_their_first_updates(store):
    """One transaction: each session comes back as stored, its log begun at seq 1."""
    made = store.create_sessions(
        [
            {"session_id": "a", "cwd": "/p", "now": "t0", "updates": [b'{"x":1}', b'{"y":2}']},
            {"session_id": "b", "cwd": "/q", "now": "t0", "config": {"model": "m"}},
        ]
    )
    assert [(r.id, r.cwd, r.state, r.config) for r in made] == [
        ("a", "/p", "idle", {}),
        ("b", "/q", "idle", {"model": "m"}),
    ]
    assert made[0] == store.get_session("a")
    assert list(store.updates("a")) == [(1, b'{"x":1}'), (2, b'{"y":2}')]
    assert store.append_update("a", b"{}") == 3 and store.last_seq("b") == 0


def test_a_failed_creation_keeps_none_of_its_batch(store):
    store.create_session(session_id="taken", cwd="/p", now="t0")
    with pytest.raises(Exception):  # noqa: B017 (sqlite3's or psycopg's IntegrityError)
        store.create_sessions(
            [
                {"session_id": "new", "cwd": "/p", "now": "t0", "updates": [b"{}"]},
                {"session_id": "taken", "cwd": "/p", "now": "t0"},
            ]
        )
    assert store.get_session("new") is None and store.last_seq("new") == 0


def test_updates_are_logged_in_order_with_the_state(store):
    store.create_session(session_id="s", cwd="/p", now="t0")
    assert store.append_update("s", b'{"a":1}') == 1
    assert store.append_update("s", b'{"b":2}', state="running") == 2
    assert store.get_session("s").state == "running"
    store.append_update("s", b'{"c":3}', state="idle", stop_reason="end_turn", now="t1")
    record = store.get_session("s")
    assert (record.state, record.stop_reason, record.updated_at) == ("idle", "end_turn", "t1")
    assert list(store.updates("s")) == [(1, b'{"a":1}'), (2, b'{"b":2}'), (3, b'{"c":3}')]
    assert list(store.updates("s", after=2)) == [(3, b'{"c":3}')]
    assert store.last_seq("s") == 3


def test_a_batch_gives_each_session_its_own_consecutive_seqs(store):
    for sid in ("a", "b"):
        store.create_session(session_id=sid, cwd="/p", now="t0")
    store.append_update("a", b'{"n":0}')
    batch = [
        ("a", b'{"n":1}', None, None, None),
        ("b", b'{"n":2}', "running", None, None),
        ("a", b'{"n":3}', "running", None, None),
        ("a", b'{"n":4}', "idle", "end_turn", "t1"),
    ]
    assert store.append_updates(batch) == [2, 1, 3, 4]
    assert list(store.updates("a")) == [
        (1, b'{"n":0}'),
        (2, b'{"n":1}'),
        (3, b'{"n":3}'),
        (4, b'{"n":4}'),
    ]
    assert list(store.updates("b")) == [(1, b'{"n":2}')]
    a, b = store.get_session("a"), store.get_session("b")
    assert (a.state, a.stop_reason, a.updated_at) == ("idle", "end_turn", "t1")
    assert (b.state, b.updated_at) == ("running", "t0")


def test_a_batch_leaves_each_session_as_its_updates_one_by_one_would(store):
    """Several sessions' state changes in one batch (PostgreSQL sets them in one
    statement): the last state and its stop reason, the lease released by an idle
    even when a later update of the batch sets another state, the last updated-at;
    a session the batch only logs to keeps its own; transcript entries of several
    sessions are numbered per session."""
    for sid in ("a", "b", "c", "d"):
        store.create_session(session_id=sid, cwd="/p", now="t0")
        assert store.acquire_turn(sid, owner="h:1:1", pid=1, expires=1e12)
    store.append_message("b", {"role": "user", "content": "before"})
    batch = [
        ("a", b"{}", "running", None, None),
        ("b", b"{}", None, None, "t1"),
        ("a", b"{}", "idle", "end_turn", "t2"),
        ("c", b"{}", "idle", "cancelled", "t3"),
        ("b", b"{}", "awaiting", None, None),
        ("c", b"{}", "running", None, None),
        ("d", b"{}", None, None, None),
        ("a", b"{}", None, None, "t4"),
    ]
    messages = [({"role": "assistant", "content": f"m{i}"}) for i in range(3)]
    transcript = [("b", messages[0], "message"), ("a", messages[1], "message")]
    transcript.append(("b", messages[2], "summary"))
    assert store.append_updates(batch, transcript) == [1, 1, 2, 1, 2, 2, 1, 3]
    a, b, c, d = (store.get_session(sid) for sid in "abcd")
    assert (a.state, a.stop_reason, a.updated_at, a.owner) == ("idle", "end_turn", "t4", None)
    assert (b.state, b.stop_reason, b.updated_at, b.owner) == ("awaiting", None, "t1", "h:1:1")
    assert (c.state, c.stop_reason, c.updated_at, c.owner) == ("running", None, "t3", None)
    assert (c.owner_pid, c.lease_expires) == (None, None)
    assert (d.state, d.updated_at, d.owner) == ("idle", "t0", "h:1:1")
    assert [(e.seq, e.kind, e.message) for e in store.transcript_after("b", 0)] == [
        (1, "message", {"role": "user", "content": "before"}),
        (2, "message", messages[0]),
        (3, "summary", messages[2]),
    ]
    assert [(e.seq, e.message) for e in store.transcript_after("a", 0)] == [(1, messages[1])]


def test_updates_and_transcript_entries_are_saved_together_or_not_at_all(store):
    store.create_session(session_id="s", cwd="/p", now="t0")
    reply = {"role": "assistant", "content": "hi"}
    seqs = store.append_updates(
        [("s", b'{"m":1}', None, None, None), ("s", b'{"u":1}', None, None, None)],
        [("s", reply, "message")],
    )
    assert seqs == [1, 2]
    assert [e.message for e in store.transcript("s")] == [reply]
    unwritable = {"role": "assistant", "content": {1, 2}}  # not JSON: the write fails
    with pytest.raises(TypeError):
        store.append_updates(
            [("s", b'{"m":2}', "idle", "end_turn", "t1")],
            [("s", reply, "message"), ("s", unwritable, "message")],
        )
    assert [e.message for e in store.transcript("s")] == [reply]  # the first one too
    assert store.last_seq("s") == 2 and store.get_session("s").state == "idle"
    assert store.get_session("s").updated_at == "t0"
    assert store.append_updates([("s", b"{}", None, None, None)], [("s", reply, "message")]) == [3]


def test_list_is_newest_first_with_cwd_filter_and_cursor(store):
    for i in range(7):
        store.create_session(session_id=f"s{i}", cwd="/a" if i % 2 else "/b", now=f"t{i}")
    page, cursor = store.list_sessions(limit=3)
    assert [r.id for r in page] == ["s6", "s5", "s4"]
    page2, cursor2 = store.list_sessions(limit=3, cursor=cursor)
    assert [r.id for r in page2] == ["s3", "s2", "s1"]
    page3, cursor3 = store.list_sessions(limit=3, cursor=cursor2)
    assert [r.id for r in page3] == ["s0"] and cursor3 is None
    only_a, _ = store.list_sessions(cwd="/a")
    assert [r.id for r in only_a] == ["s5", "s3", "s1"]
    with pytest.raises(StoreError):
        store.list_sessions(cursor="garbage!")


def test_deleted_sessions_are_hidden(store):
    store.create_session(session_id="s", cwd="/p", now="t")
    store.delete_session("s")
    assert store.get_session("s") is None
    assert store.get_session("s", include_deleted=True).deleted
    assert store.list_sessions() == ([], None)


def test_the_transcript_starts_at_the_latest_summary(store):
    store.create_session(session_id="s", cwd="/p", now="t")
    for text in ("q1", "a1", "q2"):
        store.append_message("s", {"role": "user", "content": text})
    assert [e.message["content"] for e in store.transcript("s")] == ["q1", "a1", "q2"]
    store.append_message("s", {"role": "user", "content": "summary"}, kind="summary")
    store.append_message("s", {"role": "user", "content": "q2"})
    entries = store.transcript("s")
    assert [(e.kind, e.message["content"]) for e in entries] == [
        ("summary", "summary"),
        ("message", "q2"),
    ]


def test_interrupted_sessions_are_the_ones_not_idle(store):
    store.create_session(session_id="a", cwd="/p", now="t")
    store.create_session(session_id="b", cwd="/p", now="t")
    store.append_update("b", b"{}", state="running")
    assert [r.id for r in store.interrupted_sessions()] == ["b"]


# ---- the turn lease -------------------------------------------------------------------
def test_one_owner_holds_a_sessions_lease_until_the_turn_goes_idle(store):
    store.create_session(session_id="s", cwd="/p", now="t")
    assert store.acquire_turn("s", owner="h:1:10", pid=1, expires=100.0)
    assert store.acquire_turn("s", owner="h:1:10", pid=1, expires=200.0)  # again: still ours
    assert not store.acquire_turn("s", owner="h:2:20", pid=2, expires=100.0)
    assert [r.id for r in store.interrupted_sessions()] == ["s"]  # leased: a turn is under way
    store.append_update("s", b"{}", state="running")
    store.append_update("s", b"{}", state="idle", stop_reason="end_turn", now="t1")
    record = store.get_session("s")
    assert (record.owner, record.owner_pid, record.lease_expires) == (None, None, None)
    assert store.acquire_turn("s", owner="h:2:20", pid=2, expires=100.0)


def test_a_dead_owner_can_be_replaced_and_leases_are_renewed_per_owner(store):
    store.create_session(session_id="s", cwd="/p", now="t")
    store.create_session(session_id="t", cwd="/p", now="t")
    store.acquire_turn("s", owner="h:1:10", pid=1, expires=100.0)
    store.acquire_turn("t", owner="h:1:10", pid=1, expires=100.0)
    assert store.renew_leases("h:1:10", 500.0) == 2
    assert store.get_session("t").lease_expires == 500.0
    assert store.acquire_turn("s", owner="h:2:20", pid=2, expires=1.0, replacing="h:1:10")
    store.release_turn("t", owner="h:2:20")  # not its lease: nothing happens
    assert store.get_session("t").owner == "h:1:10"
    store.release_turn("t", owner="h:1:10")
    assert store.get_session("t").owner is None


def test_a_replay_leaves_out_the_state_changes(store):
    store.create_session(session_id="s", cwd="/p", now="t")
    store.append_update("s", b'{"sessionUpdate":"user_message"}')
    store.append_update("s", b'{"sessionUpdate":"state_update","state":"running"}', state="running")
    store.append_update("s", b'{"sessionUpdate":"agent_message"}')
    store.append_update(
        "s", b'{"sessionUpdate":"state_update","state":"idle"}', state="idle", now="t1"
    )
    assert store.replay("s") == [
        (1, b'{"sessionUpdate":"user_message"}'),
        (3, b'{"sessionUpdate":"agent_message"}'),
    ]
    assert store.replay("s", after=1) == [(3, b'{"sessionUpdate":"agent_message"}')]


def test_a_migrated_v1_store_keeps_its_sessions(tmp_path):
    db = sqlite3.connect(tmp_path / "old.db", isolation_level=None)
    db.executescript(f"BEGIN; {MIGRATIONS[0]}; PRAGMA user_version = 1; COMMIT;")
    db.execute(
        "INSERT INTO sessions (id, cwd, created_at, updated_at, state, owner_pid)"
        " VALUES ('old', '/p', 't', 't', 'running', 42)"
    )
    db.close()
    store = SqliteStore(tmp_path / "old.db")
    record = store.get_session("old")
    assert (record.state, record.owner_pid, record.owner) == ("running", 42, None)
    store.close()


# ---- the async face -------------------------------------------------------------------
async def test_the_async_store_runs_calls_in_order_off_the_loop(tmp_path):
    import threading

    from crow.store.aio import AsyncStore, settled
    from crow.store.db import StoreUnavailable

    store = AsyncStore(SqliteStore(tmp_path / "a.db"))
    await store.create_session(session_id="s", cwd="/p", now="t")
    seqs = [store.append_update("s", f'{{"n":{i}}}'.encode()) for i in range(20)]
    assert [await f for f in seqs] == list(range(1, 21))
    thread = await store.submit(lambda: threading.current_thread().name)
    assert thread.startswith("crow-store")
    seq, cancelled = await settled(store.append_update("s", b"{}"))
    assert (seq, cancelled) == (21, False)
    with pytest.raises(StoreUnavailable, match="session store failed"):
        await store.submit(store.sync.db.execute, "SELECT * FROM no_such_table")
    await store.aclose()


async def test_messages_and_leases_are_written_on_the_loop_or_wait_on_the_thread(tmp_path):
    """Nothing queued: the write is done on the loop's connection by the time the call
    returns.  Another process holding the write lock: it waits for it on the thread,
    and a later append queues behind it (the order of the calls is kept)."""
    import asyncio

    from crow.store.aio import AsyncStore

    store = AsyncStore(SqliteStore(tmp_path / "a.db"))
    await store.create_session(session_id="s", cwd="/p", now="t")
    lease = store.acquire_turn("s", owner="me", pid=1, expires=100.0)
    assert lease.done() and lease.result() is True  # no hop to the thread
    other = sqlite3.connect(tmp_path / "a.db", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process writes
    message = asyncio.ensure_future(store.append_message("s", {"role": "user", "content": "a"}))
    await asyncio.sleep(0.2)
    assert not message.done()  # waiting for the lock, on the thread: the loop runs
    update = store.append_update("s", b"{}")
    other.execute("COMMIT")
    other.close()
    assert await message == 1 and await update == 1
    await store.release_turn("s", owner="me")
    assert (await store.get_session("s")).owner is None
    assert [e.message["content"] for e in await store.transcript("s")] == ["a"]
    await store.aclose()


async def test_sessions_opened_at_once_are_created_in_one_transaction(tmp_path):
    """Sessions asked for in one pass of the loop are written together, on the loop's
    connection; with another process holding the write lock, on the thread, once it
    is free (nothing written before)."""
    import asyncio

    from crow.store.aio import AsyncStore

    store = AsyncStore(SqliteStore(tmp_path / "a.db"))
    batches = []
    create_sessions = store._fast.create_sessions
    store._fast.create_sessions = lambda sessions: (
        batches.append(len(sessions)) or (create_sessions(sessions))
    )
    made = await asyncio.gather(
        *(
            store.create_session(session_id=f"s{i}", cwd="/p", now="t", updates=[b"{}"])
            for i in range(5)
        )
    )
    assert [r.id for r in made] == [f"s{i}" for i in range(5)] and batches == [5]
    assert [await store.last_seq(f"s{i}") for i in range(5)] == [1] * 5
    other = sqlite3.connect(tmp_path / "a.db", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process writes
    later = asyncio.gather(
        store.create_session(session_id="t1", cwd="/p", now="t"),
        store.create_session(session_id="t2", cwd="/p", now="t"),
    )
    await asyncio.sleep(0.2)
    assert not later.done() and batches == [5, 2]  # tried on the loop: busy, so nothing kept
    other.execute("COMMIT")
    other.close()
    assert [r.id for r in await later] == ["t1", "t2"]
    assert await store.get_session("t2") is not None
    await store.aclose()


async def test_a_call_made_after_a_session_was_asked_for_comes_after_it(tmp_path):
    """Sessions wait for the end of the loop pass to be created together, but a call
    made after one was asked for still sees it, and its creator is answered first
    (requests pipelined behind session/new are answered in order)."""
    import asyncio

    from crow.store.aio import AsyncStore

    store = AsyncStore(SqliteStore(tmp_path / "a.db"))
    order: list[Any] = []

    async def create() -> None:
        await store.create_session(session_id="s", cwd="/p", now="t")
        order.append("created")

    async def listing() -> None:
        records, _ = await store.list_sessions()
        order.append(("listed", [r.id for r in records]))

    async def update() -> None:
        await store.create_session(session_id="u", cwd="/p", now="t")
        await store.update_session("u", title="named")

    await asyncio.gather(create(), listing(), update())
    assert order[0] == "created" and "s" in order[1][1]
    assert (await store.get_session("u")).title == "named"
    await store.aclose()


async def test_updates_with_transcript_entries_wait_for_a_lock_on_the_thread(tmp_path):
    """Another process holding the write lock: updates written with the model's
    message go to the thread together, one transaction, in the order of the calls."""
    import asyncio

    from crow.store.aio import AsyncStore

    store = AsyncStore(SqliteStore(tmp_path / "a.db"))
    await store.create_session(session_id="s", cwd="/p", now="t")
    other = sqlite3.connect(tmp_path / "a.db", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    reply = {"role": "assistant", "content": "hi"}
    shown = store.append_updates(
        [("s", b'{"m":1}', None, None, None), ("s", b'{"u":1}', None, None, None)],
        [("s", reply, "message")],
    )
    idle = store.append_update("s", b"{}", state="idle", stop_reason="end_turn", now="t2")
    await asyncio.sleep(0.2)
    assert not any(f.done() for f in shown)  # waiting for the lock, on the thread
    other.execute("COMMIT")
    other.close()
    assert [await f for f in shown] == [1, 2] and await idle == 3
    assert [e.message for e in await store.transcript("s")] == [reply]
    assert (await store.get_session("s")).state == "idle"
    await store.aclose()


async def test_an_append_queued_on_the_thread_never_overtakes_a_later_call(tmp_path):
    """Appends queued while the thread is busy are written together, but one made
    after another call (here the lease) waits for that call: an ``idle`` that
    overtook the lease it releases would leave the session leased to its owner."""
    import threading

    from crow.store.aio import AsyncStore

    store = AsyncStore(SqliteStore(tmp_path / "a.db"))
    await store.create_session(session_id="s", cwd="/p", now="t")
    busy = threading.Event()
    blocked = store.submit(busy.wait, 5)  # the thread is slow (a lock, a slow disk)
    running = store.append_update("s", b"{}", state="running")
    lease = store.submit(store.sync.acquire_turn, "s", owner="me", pid=1, expires=100.0)
    idle = store.append_update("s", b"{}", state="idle", stop_reason="end_turn", now="t2")
    busy.set()
    assert await blocked and await lease and [await running, await idle] == [1, 2]
    record = await store.get_session("s")
    assert (record.state, record.owner) == ("idle", None)
    await store.aclose()


async def test_closing_waits_for_the_call_in_flight_and_refuses_later_ones(tmp_path):
    """The database is closed on the store's thread, after what is queued there (a
    connection closed from the loop could go while a call still uses it)."""
    import asyncio
    import threading
    import time

    from crow.store.aio import AsyncStore
    from crow.store.db import StoreUnavailable

    store = AsyncStore(SqliteStore(tmp_path / "a.db"))
    await store.create_session(session_id="s", cwd="/p", now="t")
    started = threading.Event()

    def slow_read() -> list[tuple[int, bytes]]:
        started.set()
        time.sleep(0.2)
        return store.sync.updates_list("s")

    in_flight = store.submit(slow_read)
    await asyncio.to_thread(started.wait, 5)
    await store.aclose()
    assert in_flight.done() and in_flight.result() == []
    with pytest.raises(StoreUnavailable, match="closed"):
        await store.get_session("s")
    with pytest.raises(StoreUnavailable, match="closed"):
        await store.append_update("s", b"{}")
    await store.aclose()  # once only


def test_the_transcript_keeps_a_lone_surrogate_that_orjson_refuses(store):
    store.create_session(session_id="s", cwd="/p", now="t")
    odd = {"role": "user", "content": "half a pair: \ud800"}
    store.append_message("s", odd)
    store.append_message("s", {"role": "assistant", "content": "fine"})
    assert [e.message for e in store.transcript("s")] == [
        odd,
        {"role": "assistant", "content": "fine"},
    ]


# ---- PostgreSQL ---------------------------------------------------------------------
def test_a_new_postgres_store_is_migrated_once(postgres_url):
    import psycopg

    PostgresStore(postgres_url).close()
    PostgresStore(postgres_url).close()  # reopening migrates nothing and fails nothing
    with psycopg.connect(postgres_url) as db:
        assert db.execute("SELECT version FROM crow_schema").fetchall() == [(len(MIGRATIONS),)]
        kind = db.execute(
            "SELECT data_type FROM information_schema.columns"
            " WHERE table_name = 'sessions' AND column_name = 'lease_expires'"
        ).fetchone()
        assert kind == ("double precision",)  # not REAL: unix seconds need the digits


def test_a_postgres_store_from_a_newer_crow_is_refused(postgres_url):
    import psycopg

    PostgresStore(postgres_url).close()
    with psycopg.connect(postgres_url, autocommit=True) as db:
        db.execute("UPDATE crow_schema SET version = %s", (len(MIGRATIONS) + 1,))
    with pytest.raises(RuntimeError, match="newer than this Crow"):
        PostgresStore(postgres_url)


def test_an_unreachable_server_is_one_line_naming_it_without_the_password():
    with pytest.raises(StoreError, match="cannot reach the PostgreSQL session store") as failure:
        PostgresStore("postgresql://crow:s3cret@127.0.0.1:1/nowhere")
    said = str(failure.value)
    assert "s3cret" not in said and "***" in said and "\n" not in said
    assert "at 127.0.0.1:1 " in said and "[store] url" in said


def test_servers_appending_to_one_session_get_consecutive_seqs(postgres_url):
    """Two connections (two servers) append to one session at once: every seq once."""
    import threading

    stores = [PostgresStore(postgres_url) for _ in range(2)]
    stores[0].create_session(session_id="s", cwd="/p", now="t")
    seqs: list[int] = []

    def append(store):
        for i in range(50):
            seqs.append(store.append_update("s", f'{{"n":{i}}}'.encode()))
            store.append_message("s", {"role": "user", "content": str(i)})

    threads = [threading.Thread(target=append, args=(s,)) for s in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(seqs) == list(range(1, 101))
    assert [e.seq for e in stores[0].transcript("s")] == list(range(1, 101))
    for store in stores:
        store.close()


async def test_the_async_store_on_postgres(postgres_url):
    from crow.store.aio import AsyncStore
    from crow.store.db import StoreUnavailable

    store = AsyncStore(PostgresStore(postgres_url))
    await store.create_session(session_id="s", cwd="/p", now="t")
    seqs = [store.append_update("s", f'{{"n":{i}}}'.encode()) for i in range(20)]
    assert [await f for f in seqs] == list(range(1, 21))
    assert [seq for seq, _ in await store.replay("s")] == list(range(1, 21))
    with pytest.raises(StoreUnavailable, match="session store failed"):
        await store.submit(store.sync.db.execute, "SELECT * FROM no_such_table")
    await store.aclose()


def test_the_first_answer_to_a_shared_question_wins(store):
    store.create_session(session_id="s", cwd="/p", now="t")
    store.file_question("q1", "s", '{"sessionId":"s"}')
    assert store.open_questions("s") == ["q1"]
    assert store.answer_question("q1", '{"outcome":"selected","optionId":"a"}')
    assert not store.answer_question("q1", '{"outcome":"selected","optionId":"b"}')
    assert store.question("q1") == (
        "s",
        '{"sessionId":"s"}',
        '{"outcome":"selected","optionId":"a"}',
        False,
    )
    store.file_question("q2", "s", "{}")
    store.close_question("q2")
    assert not store.answer_question("q2", "{}")  # withdrawn: too late
    assert store.open_questions("s") == []


def test_a_store_migrated_meanwhile_by_another_process_opens(tmp_path):
    """Two processes open a new store at once: both read version 0, one migrates first;
    the other's migration finds the work done instead of failing."""
    from crow.store.migrations import _migrate_from

    SqliteStore(tmp_path / "both.db").close()  # the first process's migration
    db = sqlite3.connect(tmp_path / "both.db", isolation_level=None)
    assert _migrate_from(db, 0) == len(MIGRATIONS)  # the second, with its stale read
    db.close()
