"""Every v2 watcher of a session queues the same frame object for an update,
not a copy each (crow.agent.watchers.update_frame)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import orjson

from crow.agent.session import LiveSession
from crow.agent.watchers import V2Watcher, update_frame
from crow.ids import now
from crow.store.aio import AsyncStore
from crow.store.db import SqliteStore


class Side:
    """An AgentSide as far as a V2Watcher delivering updates goes: its peer."""

    def __init__(self, sent: list[bytes]) -> None:
        self.peer = SimpleNamespace(send_frame=sent.append, backed_up=False)


def v2_watcher() -> tuple[V2Watcher, list[bytes]]:
    sent: list[bytes] = []
    side: Any = Side(sent)
    return V2Watcher(side), sent


async def test_the_watchers_of_a_session_share_each_updates_frame(tmp_path):
    store = AsyncStore(SqliteStore(tmp_path / "store.db"))
    record = await store.create_session(session_id="sess_1", cwd="/tmp", now=now())
    session = LiveSession(record=record, store=store, model="main")
    (first, to_first), (second, to_second) = v2_watcher(), v2_watcher()
    session.watchers.update({first, second})
    for text in ("one", "two"):
        await session.emit({"sessionUpdate": "agent_message_chunk", "text": text})
    assert to_first == to_second
    assert [a is b for a, b in zip(to_first, to_second, strict=True)] == [True, True]
    sent = [orjson.loads(frame)["params"] for frame in to_first]
    assert [(p["update"]["text"], p["_meta"]["crow/seq"]) for p in sent] == [("one", 1), ("two", 2)]
    await store.aclose()


def test_a_frame_is_made_again_for_anything_else():
    body = b'{"sessionUpdate":"agent_message_chunk"}'
    frame = update_frame("s", body, 1)
    assert update_frame("s", body, 1) is frame
    assert orjson.loads(update_frame("s", body, 2))["params"]["_meta"] == {"crow/seq": 2}
    assert orjson.loads(update_frame("t", body, 1))["params"]["sessionId"] == "t"
    assert "_meta" not in orjson.loads(update_frame("s", body, None))["params"]
    assert update_frame("s", bytes(body), 1) == frame  # an equal body: an equal frame
