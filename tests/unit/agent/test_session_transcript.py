"""A live session's transcript: read whole once, then only what was added, and
always what the store holds (another process may append between two turns)."""

from __future__ import annotations

from crow.agent.session import LiveSession
from crow.ids import now
from crow.store.aio import AsyncStore
from crow.store.db import SqliteStore


def said(entries) -> list[str]:
    return [e.message["content"] for e in entries]


async def test_the_transcript_follows_the_store_through_other_writers_and_summaries(tmp_path):
    store = AsyncStore(SqliteStore(tmp_path / "store.db"))
    record = await store.create_session(session_id="s", cwd="/tmp", now=now())
    session = LiveSession(record=record, store=store, model="main")
    assert await session.transcript() == []
    await store.append_message("s", {"role": "user", "content": "one"})
    assert said(await session.transcript()) == ["one"]

    other = SqliteStore(tmp_path / "store.db")  # another crow serve on the same home
    other.append_message("s", {"role": "assistant", "content": "two"})
    await store.append_message("s", {"role": "user", "content": "three"})
    assert said(await session.transcript()) == ["one", "two", "three"]

    other.append_message("s", {"role": "user", "content": "summary"}, kind="summary")
    other.append_message("s", {"role": "user", "content": "four"})
    seen = await session.transcript()
    assert said(seen) == ["summary", "four"]
    assert [e.kind for e in seen] == ["summary", "message"]
    assert seen == store.sync.transcript("s")  # as a whole read gives it

    seen.clear()  # a caller's list is its own
    assert said(await session.transcript()) == ["summary", "four"]
    other.close()
    await store.aclose()


async def test_a_session_loaded_after_a_summary_starts_from_it(tmp_path):
    store = AsyncStore(SqliteStore(tmp_path / "store.db"))
    record = await store.create_session(session_id="s", cwd="/tmp", now=now())
    for content, kind in (("old", "message"), ("summary", "summary"), ("new", "message")):
        await store.append_message("s", {"role": "user", "content": content}, kind=kind)
    session = LiveSession(record=record, store=store, model="main")
    assert said(await session.transcript()) == ["summary", "new"]
    await store.append_message("s", {"role": "user", "content": "newer"})
    assert said(await session.transcript()) == ["summary", "new", "newer"]
    await store.aclose()
