"""Permission questions on a shared (PostgreSQL) store: a server never puts its own
question to its clients a second time, however late the notice of its filing comes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import pytest

from crow.acp import schema
from crow.agent.shared_questions import SharedQuestions
from crow.store.aio import AsyncStore
from crow.store.db import PostgresStore

PARAMS = schema.RequestPermissionRequest.model_validate(
    {
        "sessionId": "s",
        "title": "Allow probe: touch?",
        "toolCall": {"toolCallId": "call_1", "title": "touch one.txt"},
        "options": [{"optionId": "allow", "name": "Allow", "kind": "allow_once"}],
    }
)


@pytest.fixture
async def store(postgres_url: str) -> AsyncIterator[AsyncStore]:
    shared = AsyncStore(PostgresStore(postgres_url))
    shared.sync.create_session(session_id="s", cwd="/p", now="t0")
    try:
        yield shared
    finally:
        await shared.aclose()


async def test_a_late_notice_of_our_own_question_asks_nobody_again(store):
    # The turn's own clients answered (the remote asking is withdrawn) before the
    # notice of the question's filing was read, and its close is not committed yet:
    # the question still looks open in the store.  It was put to this server's
    # clients a second time (two session/request_permission for one tool call).
    session = SimpleNamespace(id="s", questions=set(), watchers=[])
    shared = SharedQuestions(store, {"s": session}, wake=lambda _: False)  # type: ignore[dict-item]
    closing = asyncio.Event()
    close = store.close_question

    async def slow_close(question_id: str) -> None:
        await closing.wait()
        await close(question_id)

    store.close_question = slow_close  # type: ignore[method-assign]
    asking = asyncio.create_task(shared.asker("s").request_permission(PARAMS))
    for _ in range(200):
        filed: list[Any] = await store.open_questions("s")
        if filed:
            break
        await asyncio.sleep(0.01)
    [question_id] = filed
    asking.cancel()  # answered here: the other servers' askings are withdrawn
    await asyncio.sleep(0.05)  # (the withdrawal now waits for its close)
    shared.heard(question_id)  # the notice of the filing, late
    await asyncio.gather(*shared._tasks)
    assert shared.asking == {}
    closing.set()
    with pytest.raises(asyncio.CancelledError):
        await asking
    shared.heard(question_id)  # the notice of its close
    await asyncio.gather(*shared._tasks)
    assert shared.asking == {} and shared.filed == {}
