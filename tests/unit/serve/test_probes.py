"""``/readyz`` says "not ready" when the store does not answer or no model is set (issue #34).

The probes app is driven as ASGI with httpx2's transport; the agent is a stand-in
with the two things the probe reads (its config's chain, its store)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import httpx2
import pytest

from crow.serve import probes
from crow.serve.probes import ProbesApp
from crow.store.records import StoreUnavailable


class Store:
    def __init__(self, answer: Any) -> None:
        self.answer = answer

    async def get_session(self, session_id: str) -> None:
        if self.answer == "hang":
            await asyncio.sleep(3600)
        if isinstance(self.answer, Exception):
            raise self.answer


async def inner(scope: Any, receive: Any, send: Any) -> None:
    raise AssertionError("a probe reached the ACP app")


def app(store: Store, chain: tuple[str, ...] = ("main",)) -> ProbesApp:
    agent = SimpleNamespace(config=SimpleNamespace(chain=chain), store=store)
    return ProbesApp(
        inner,
        agent,
        check_place=lambda scope: None,
        check_token=lambda scope: None,
        metrics_public=False,
    )


async def readyz(probes_app: ProbesApp) -> httpx2.Response:
    transport = httpx2.ASGITransport(app=probes_app)
    async with httpx2.AsyncClient(transport=transport, base_url="http://crow") as client:
        return await client.get("/readyz")


@pytest.mark.parametrize(
    ("store", "chain", "status"),
    [
        (Store(None), ("main",), 200),
        (Store(StoreUnavailable("database is locked")), ("main",), 503),
        (Store(OSError("connection refused")), ("main",), 503),
        (Store(None), (), 503),
    ],
)
async def test_readyz(store, chain, status):
    answer = await readyz(app(store, chain))
    assert answer.status_code == status
    assert answer.json() == {"status": "ok" if status == 200 else "not ready"}


async def test_a_store_that_does_not_answer_is_not_ready(monkeypatch):
    monkeypatch.setattr(probes, "READY_TIMEOUT_S", 0.05)
    answer = await readyz(app(Store("hang")))
    assert answer.status_code == 503
