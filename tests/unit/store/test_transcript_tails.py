"""What a process knows of the transcripts it writes (crow.store.tails): a model call
is answered from it without a read only while nobody else can have written, and
another server's entries are always read; and the leases taken with the appends
queued beside them, each with its outcome, in order.  On SQLite and on PostgreSQL."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from typing import Any

import pytest

from crow.agent.session import LiveSession
from crow.store.aio import AsyncStore
from crow.store.db import open_store
from crow.store.tails import KEPT_SESSIONS, TranscriptTails

LEASE: dict[str, Any] = {"owner": "h:1:1", "pid": 1, "expires": 1e12}
OTHER: dict[str, Any] = {"owner": "h:2:2", "pid": 2, "expires": 1e12}


def said(entries) -> list[str]:
    return [e.message["content"] for e in entries]


def message(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


class Reads:
    """Counts the transcript reads a store sends its database."""

    def __init__(self, store) -> None:
        self.store, self.db, self.count = store, store.db, 0
        store.db = self

    def execute(self, sql: str, params: Any = (), /) -> Any:
        self.count += sql == self.store.sql.transcript_after
        return self.db.execute(sql, params)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.db, name)


@pytest.fixture(params=["sqlite", "postgresql"])
def location(request, tmp_path) -> Any:
    if request.param == "postgresql":
        return request.getfixturevalue("postgres_url")
    return tmp_path / "crow.db"


@pytest.fixture
def two(location):
    """Two servers' stores on one database, a session in it."""
    here, there = open_store(location), open_store(location)
    here.create_session(session_id="s", cwd="/p", now="t")
    yield here, there
    here.close()
    there.close()


def test_what_a_turn_writes_is_answered_without_a_read_across_turns(two):
    here, _ = two
    assert here.take_turn("s", **LEASE) == 0
    here.append_updates([("s", b"{}", "running", None, None)], [("s", message("q1"), "message")])
    assert said(here.transcript("s")) == ["q1"]  # a session's first read: whole
    here.append_updates([("s", b"{}", None, None, None)], [("s", message("a1"), "message")])
    here.append_update("s", b"{}", state="idle", stop_reason="end_turn", now="t1")
    reads = Reads(here)
    assert here.take_turn("s", **LEASE) == 2  # nobody wrote since: what is known holds
    here.append_message("s", message("q2"))
    assert said(here.transcript_after("s", 1)) == ["a1", "q2"]
    assert here.transcript_after("s", 3) == []
    assert reads.count == 0
    assert said(here.transcript_after("s", 1)) == ["a1", "q2"]  # from before what was answered
    assert reads.count == 1


def test_another_servers_turn_is_read_at_the_next_lease_here(two):
    """No write of ours comes first (a /compact turn reads before it writes): the
    lease's last seq tells."""
    here, there = two
    here.take_turn("s", **LEASE)
    here.append_message("s", message("q1"))
    here.append_update("s", b"{}", state="idle", stop_reason="end_turn", now="t1")
    there.take_turn("s", **OTHER)
    there.append_message("s", message("q2"))
    there.append_update("s", b"{}", state="idle", stop_reason="end_turn", now="t2")
    assert here.take_turn("s", **LEASE) == 2
    assert said(here.transcript_after("s", 0)) == ["q1", "q2"]


def test_an_entry_added_elsewhere_during_the_lease_is_read_after_the_next_write(two):
    """A writer that holds no lease (a judge's verdict): the gap before our next
    entry tells."""
    here, there = two
    here.take_turn("s", **LEASE)
    here.append_message("s", message("q1"))
    assert said(here.transcript_after("s", 0)) == ["q1"]
    there.append_message("s", message("verdict"))
    here.append_message("s", message("q2"))
    assert said(here.transcript_after("s", 1)) == ["verdict", "q2"]


def test_nothing_is_answered_without_the_lease_or_after_a_failed_write(two):
    here, there = two
    here.append_message("s", message("q1"))  # no lease taken here: nothing kept
    assert here.tails.after("s", 0) is None
    assert there.take_turn("s", **OTHER) == 1
    assert here.take_turn("s", **LEASE) is None  # another server's turn
    assert here.tails.after("s", 1) is None
    there.release_turn("s", owner=OTHER["owner"])
    assert here.take_turn("s", **LEASE) == 1
    assert here.tails.after("s", 1) == []
    Failing(here)
    with pytest.raises(sqlite3.OperationalError, match="went"):
        here.append_updates([("s", b"{}", None, None, None)], [("s", message("q2"), "message")])
    assert here.tails.after("s", 1) is None  # whether it was kept is unknown: read


class Failing:
    """A database that goes as updates are logged."""

    def __init__(self, store) -> None:
        self.db, store.db = store.db, self

    def execute(self, sql: str, params: Any = (), /) -> Any:
        if "INSERT INTO updates" in sql:
            raise sqlite3.OperationalError("the database went")
        return self.db.execute(sql, params)

    def executemany(self, sql: str, rows: Any, /) -> Any:
        raise sqlite3.OperationalError("the database went")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.db, name)


def test_the_lease_sees_the_transcript_written_while_it_waited_for_the_row(postgres_url):
    """PostgreSQL: a lease that waits for another server's append transaction reads
    the last seq in a statement of its own, after that transaction's commit (one
    statement's snapshot would predate it)."""
    import psycopg

    here = open_store(postgres_url)
    here.create_session(session_id="s", cwd="/p", now="t")
    here.take_turn("s", **LEASE)
    here.append_update("s", b"{}", state="idle", stop_reason="end_turn", now="t1")
    with psycopg.connect(postgres_url) as other:  # a transaction, as another server's append
        other.execute("SELECT 1 FROM sessions WHERE id = 's' FOR UPDATE")
        other.execute(
            "INSERT INTO transcript (session_id, seq, kind, body) VALUES ('s', 1, 'message', '{}')"
        )
        taken: list[int | None] = []
        waiting = threading.Thread(target=lambda: taken.append(here.take_turn("s", **LEASE)))
        waiting.start()
        time.sleep(0.3)  # the lease waits for the row
        assert taken == []
        other.commit()
        waiting.join(5)
    assert taken == [1]
    here.close()


def test_tails_answer_only_what_they_know_all_of():
    tails = TranscriptTails()
    tails.wrote([("s", 1, "message", '{"content": "q1"}')])  # never leased: nothing kept
    assert tails.after("s", 0) is None
    tails.leased("s", 1)
    tails.wrote([("s", 2, "message", '{"content": "a1"}')])
    assert tails.after("s", 0) is None  # entry 1 is not among them
    assert said(tails.after("s", 1)) == ["a1"]
    tails.unleased("s")
    tails.wrote([("s", 3, "summary", '{"content": "sum"}')])  # between turns: known, not kept
    tails.leased("s", 3)
    assert tails.after("s", 2) is None
    assert tails.after("s", 3) == []
    tails.wrote([("s", 5, "message", "{}")])  # 4 came from elsewhere
    tails.leased("s", 5)
    assert tails.after("s", 5) == []  # forgotten, then known again from the lease on


def test_tails_keep_the_latest_sessions_leased():
    tails = TranscriptTails()
    for n in range(KEPT_SESSIONS + 1):
        tails.leased(f"s{n}", 0)
    assert tails.after("s0", 0) is None
    assert tails.after(f"s{KEPT_SESSIONS}", 0) == []


async def test_a_live_session_reads_another_servers_turn_and_its_own_writes_in_order(location):
    """Through ``AsyncStore``: a read answered on the loop still comes after every
    write to the session made before it (one still on the store's thread included)."""
    store, there = AsyncStore(open_store(location)), open_store(location)
    record = await store.create_session(session_id="s", cwd="/p", now="t")
    session = LiveSession(record=record, store=store, model="main")
    assert await store.acquire_turn("s", **LEASE)
    await session.emit_together({"sessionUpdate": "x"}, transcript=[message("q1")])
    assert said(await session.transcript()) == ["q1"]
    writing = store.append_updates(
        [("s", b"{}", None, None, None)], [("s", message("a1"), "message")]
    )
    assert said(await session.transcript()) == ["q1", "a1"]  # not before its write
    await asyncio.gather(*writing)
    await store.append_update("s", b"{}", state="idle", stop_reason="end_turn", now="t1")

    there.take_turn("s", **OTHER)
    there.append_message("s", message("q2"))
    there.append_update("s", b"{}", state="idle", stop_reason="end_turn", now="t2")
    assert await store.acquire_turn("s", **LEASE)
    assert said(await session.transcript()) == ["q1", "a1", "q2"]
    there.close()
    await store.aclose()


# ---- leases taken with the appends queued beside them ---------------------------------
def test_appends_and_leases_queued_together_each_have_their_outcome(two):
    here, there = two
    here.create_session(session_id="t", cwd="/p", now="t")
    there.take_turn("t", **OTHER)  # another server's turn
    appended, taken = here.append_and_take(
        [("s", b"{}", "idle", "end_turn", "t1")],
        [("s", message("a1"), "message")],
        [("s", LEASE), ("t", LEASE)],
    )
    assert appended == [1] and taken == [True, False]
    assert (here.get_session("s").owner, here.get_session("t").owner) == ("h:1:1", "h:2:2")
    assert here.tails.after("s", 1) == []  # leased at the transcript's last seq, 1
    Failing(here)
    appended, taken = here.append_and_take([("s", b"{}", None, None, None)], None, [("s", LEASE)])
    assert isinstance(appended, sqlite3.OperationalError) and taken == [True]


async def test_a_lease_is_taken_after_the_appends_asked_before_it_and_before_those_after(
    location,
):
    store = AsyncStore(open_store(location))
    await store.create_session(session_id="s", cwd="/p", now="t")
    await store.create_session(session_id="t", cwd="/p", now="t")
    busy = store.submit(time.sleep, 0.2)  # the thread is busy: what follows is queued
    ended = store.append_update("s", b"{}", state="idle", stop_reason="end_turn", now="t1")
    leased = store.acquire_turn("s", **LEASE)
    again = store.acquire_turn("t", **LEASE)
    ended_after = store.append_update("s", b"{}", state="idle", stop_reason="end_turn", now="t2")
    await asyncio.gather(busy, ended, leased, again, ended_after)
    assert (leased.result(), again.result()) == (True, True)
    assert (await store.get_session("s")).owner is None  # the last idle came last
    assert (await store.get_session("t")).owner == "h:1:1"
    await store.aclose()
