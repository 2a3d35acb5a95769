"""A resume never lands between a turn's ``user_message`` and its ``running``.

Were it to, the resumed client would replay the prompt and then be told the
session is ``idle`` (the state before the prompt): a judge took that for the
end of the turn and judged a reply that had not been written yet.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from crow.agent.session import LiveSession
from crow.ids import now
from crow.store.aio import AsyncStore
from crow.store.db import SqliteStore

USER = {"sessionUpdate": "user_message", "messageId": "msg_1", "content": []}
RUNNING = {"sessionUpdate": "state_update", "state": "running"}


class Recorder:
    """A watcher that keeps what it was sent: ("replay" | "live" | "resumed", update)."""

    follower = False
    backed_up = False

    def __init__(self) -> None:
        self.seen: list[tuple[str, dict[str, Any]]] = []

    def deliver(self, session_id: str, seq: Any, update: dict[str, Any], body: bytes) -> None:
        self.seen.append(("live", update))

    def replay(self, session_id: str, seq: int, body: bytes) -> None:
        self.seen.append(("replay", orjson.loads(body)))

    async def resumed(self, session_id: str, state: dict[str, Any]) -> None:
        self.seen.append(("resumed", state))

    async def drained(self) -> None:
        pass


async def test_a_resume_sees_the_prompt_and_running_or_neither(tmp_path):
    store = AsyncStore(SqliteStore(tmp_path / "store.db"))
    record = await store.create_session(session_id="sess_1", cwd="/tmp", now=now())
    session = LiveSession(record=record, store=store, model="main")
    watcher = Recorder()
    emitting = asyncio.create_task(session.emit_together(USER, RUNNING))
    await asyncio.sleep(0)  # the emit holds the log now; the resume waits for it
    await session.attach(watcher, replay_after=0)
    await emitting
    kinds = [(how, update["sessionUpdate"]) for how, update in watcher.seen]
    assert kinds == [("replay", "user_message"), ("resumed", "state_update")]
    assert watcher.seen[-1][1]["state"] == "running"
    await store.aclose()


async def test_updates_emitted_together_are_logged_in_one_transaction(tmp_path, monkeypatch):
    """A burst (the deltas of one network read) costs one commit, not one per update,
    and goes out whole, in order."""
    batches: list[int] = []
    append_updates = SqliteStore.append_updates

    def counted(self: SqliteStore, batch: list[Any], transcript: Any = None) -> list[int]:
        batches.append(len(batch))
        return append_updates(self, batch, transcript)

    monkeypatch.setattr(SqliteStore, "append_updates", counted)
    store = AsyncStore(SqliteStore(tmp_path / "store.db"))
    record = await store.create_session(session_id="sess_1", cwd="/tmp", now=now())
    session = LiveSession(record=record, store=store, model="main")
    watcher = Recorder()
    await session.attach(watcher, replay_after=None)
    chunks = [
        {"sessionUpdate": "agent_message_chunk", "messageId": "m", "content": {"text": t}}
        for t in ("a", "b", "c")
    ]
    assert await session.emit_together(*chunks) == [1, 2, 3]
    assert batches == [3]
    assert [u for how, u in watcher.seen if how == "live"] == chunks
    assert [orjson.loads(b) for _, b in await store.replay("sess_1")] == chunks
    await store.aclose()
