"""The async peer over an in-memory transport pair (ACP-V2.md §2, §2.5)."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pydantic import BaseModel

from crow.acp import Peer
from crow.acp.errors import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    ConnectionClosed,
    InternalError,
    InvalidParams,
    MethodNotFound,
    RequestCancelled,
    SessionNotFound,
)
from crow.acp.transports.memory import memory_pair


class Handlers:
    def __init__(self) -> None:
        self.requests: dict[str, Any] = {}
        self.notes: list[tuple[str, dict[str, Any] | None]] = []
        self.note_delay = False

    async def on_request(self, method: str, params: dict[str, Any] | None) -> Any:
        handler = self.requests.get(method)
        if handler is None:
            raise MethodNotFound.for_method(method)
        return await handler(params)

    async def on_notification(self, method: str, params: dict[str, Any] | None) -> None:
        if self.note_delay:
            await asyncio.sleep(random.random() / 1000)
        self.notes.append((method, params))


@contextlib.asynccontextmanager
async def pair() -> AsyncIterator[tuple[Peer, Handlers, Peer, Handlers]]:
    left_t, right_t = memory_pair()
    lh, rh = Handlers(), Handlers()
    left = Peer(left_t, on_request=lh.on_request, on_notification=lh.on_notification)
    right = Peer(right_t, on_request=rh.on_request, on_notification=rh.on_notification)
    tasks = [asyncio.create_task(left.run()), asyncio.create_task(right.run())]
    try:
        async with asyncio.timeout(5):
            yield left, lh, right, rh
    finally:
        await left.aclose()
        await asyncio.wait(tasks, timeout=5)


async def test_request_and_result():
    async with pair() as (left, _, _right, rh):

        async def echo(params):
            return {"got": params}

        rh.requests["echo"] = echo
        assert await left.request("echo", {"a": 1}) == {"got": {"a": 1}}


async def test_errors_come_back_as_their_own_class():
    async with pair() as (left, _, _right, rh):

        async def missing(params):
            raise SessionNotFound("s9")

        rh.requests["missing"] = missing
        with pytest.raises(SessionNotFound) as info:
            await left.request("missing", {})
        assert info.value.session_id == "s9" and info.value.data == {"sessionId": "s9"}
        with pytest.raises(MethodNotFound):
            await left.request("nope")


async def test_a_crashing_handler_is_answered_32603_and_the_connection_lives(caplog):
    async with pair() as (left, _, _right, rh):

        async def boom(params):
            raise RuntimeError("kaboom")

        async def fine(params):
            return "ok"

        rh.requests.update(boom=boom, fine=fine)
        with pytest.raises(InternalError) as info:
            await left.request("boom")
        assert info.value.code == INTERNAL_ERROR and "kaboom" not in info.value.message
        assert await left.request("fine") == "ok"
    assert "kaboom" in caplog.text


async def test_validation_errors_are_32602_with_detail():
    class Params(BaseModel):
        cwd: str

    async with pair() as (left, _, _right, rh):

        async def strict(params):
            Params.model_validate(params)

        rh.requests["strict"] = strict
        with pytest.raises(InvalidParams) as info:
            await left.request("strict", {"cwd": 5})
        assert info.value.code == INVALID_PARAMS
        assert info.value.data[0]["loc"] == ["cwd"]
        assert "cwd" in info.value.message


async def test_a_slow_handler_does_not_stall_other_requests():
    async with pair() as (left, _, _right, rh):
        release = asyncio.Event()

        async def slow(params):
            await release.wait()
            return "slow"

        async def fast(params):
            return "fast"

        rh.requests.update(slow=slow, fast=fast)
        pending = asyncio.create_task(left.request("slow"))
        assert await left.request("fast") == "fast"
        assert not pending.done()
        release.set()
        assert await pending == "slow"


async def test_notifications_of_a_session_keep_their_order():
    async with pair() as (left, _, _right, rh):
        rh.note_delay = True
        for i in range(200):
            await left.notify("session/update", {"sessionId": f"s{i % 3}", "n": i})

        async def sync(params):
            return None

        rh.requests["sync"] = sync
        while len(rh.notes) < 200:
            await asyncio.sleep(0.01)
        for lane in ("s0", "s1", "s2"):
            ns = [p["n"] for _, p in rh.notes if p["sessionId"] == lane]
            assert ns == sorted(ns) and len(ns) in (66, 67)


async def test_outbound_messages_leave_in_the_order_sent():
    async with pair() as (left, _, _right, rh):
        for i in range(500):
            await left.notify("tick", {"n": i})
        while len(rh.notes) < 500:
            await asyncio.sleep(0.01)
        assert [p["n"] for _, p in rh.notes] == list(range(500))


async def test_cancel_request_aborts_the_handler_and_is_answered_32800():
    async with pair() as (left, _, _right, rh):
        started, cleaned_up = asyncio.Event(), asyncio.Event()

        async def forever(params):
            started.set()
            try:
                await asyncio.Event().wait()
            finally:
                cleaned_up.set()

        rh.requests["forever"] = forever
        call = asyncio.create_task(left.request("forever"))  # the first id is 0
        await started.wait()
        await left.notify("$/cancel_request", {"requestId": 0})
        with pytest.raises(RequestCancelled):
            await call
        assert cleaned_up.is_set()


async def test_cancelling_the_caller_withdraws_the_request():
    async with pair() as (left, _, _right, rh):
        started, cancelled = asyncio.Event(), asyncio.Event()

        async def forever(params):
            started.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                cancelled.set()
                raise

        rh.requests["forever"] = forever
        call = asyncio.create_task(left.request("forever"))
        await started.wait()
        call.cancel()
        await cancelled.wait()  # the peer's handler was cancelled by $/cancel_request


async def test_pending_requests_fail_when_the_connection_closes():
    async with pair() as (left, _, right, rh):
        started = asyncio.Event()

        async def forever(params):
            started.set()
            await asyncio.Event().wait()

        rh.requests["forever"] = forever
        call = asyncio.create_task(left.request("forever"))
        await started.wait()
        await right.aclose()
        with pytest.raises(ConnectionClosed):
            await call
        with pytest.raises(ConnectionClosed):
            await left.request("again")
