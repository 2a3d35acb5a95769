"""The async peer over an in-memory transport pair (ACP-V2.md §2, §2.5)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pydantic import BaseModel

from crow.acp import AgentSide, Connection, Peer, schema
from crow.acp.errors import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    REQUEST_CANCELLED,
    UNSUPPORTED_PROTOCOL_VERSION,
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


# ---- the raw wire: frames in, replies out (issue 10) ------------------------------------
class HalfOpen:
    """A transport the test drives frame by frame; end of input leaves output open,
    as a closed stdin leaves stdout writable."""

    def __init__(self) -> None:
        self.inbox: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.out: asyncio.Queue[bytes] = asyncio.Queue()

    def feed(self, *messages: Any, eof: bool = False) -> None:
        """Messages in one write: all are readable before the peer runs again."""
        for message in messages:
            self.inbox.put_nowait(json.dumps(message).encode())
        if eof:
            self.inbox.put_nowait(None)

    async def read_frame(self) -> bytes | None:
        return await self.inbox.get()

    async def write_frames(self, frames: list[bytes]) -> None:
        for frame in frames:
            self.out.put_nowait(frame)

    async def aclose(self) -> None:
        self.inbox.put_nowait(None)

    async def reply(self) -> Any:
        return json.loads(await self.out.get())

    async def replies_until(self, rid: Any) -> list[Any]:
        seen = []
        while not seen or seen[-1].get("id") != rid:
            seen.append(await self.reply())
        return seen


def req(rid: Any, method: str, params: Any = None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        message["params"] = params
    return message


def cancel(rid: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": rid}}


@contextlib.asynccontextmanager
async def raw_peer(
    handlers: Handlers, **options: Any
) -> AsyncIterator[tuple[HalfOpen, Peer, asyncio.Task[None]]]:
    wire = HalfOpen()
    peer = Peer(wire, on_request=handlers.on_request, on_notification=handlers.on_notification)
    for name, value in options.items():
        setattr(peer, name, value)
    task = asyncio.create_task(peer.run())
    try:
        async with asyncio.timeout(5):
            yield wire, peer, task
    finally:
        wire.inbox.put_nowait(None)
        await asyncio.wait([task], timeout=5)


async def test_a_cancel_in_the_same_write_is_answered_once_and_frees_the_id():
    """The handler task is cancelled before its first step: still one -32800."""
    handlers = Handlers()
    ran = []

    async def work(params):
        ran.append(params)
        return "done"

    handlers.requests["work"] = work
    async with raw_peer(handlers) as (wire, _peer, _):
        wire.feed(req(0, "work", {}), cancel(0))
        first = await wire.reply()
        assert first["id"] == 0 and first["error"]["code"] == REQUEST_CANCELLED
        assert ran == []
        wire.feed(req(0, "work", {"again": True}), req("end", "work"))
        assert await wire.replies_until("end") == [
            {"jsonrpc": "2.0", "id": 0, "result": "done"},
            {"jsonrpc": "2.0", "id": "end", "result": "done"},
        ]


async def test_many_cancels_racing_their_requests_get_one_answer_each():
    handlers = Handlers()

    async def work(params):
        for _ in range(params["yields"]):
            await asyncio.sleep(0)
        return "done"

    handlers.requests["work"] = work
    async with raw_peer(handlers) as (wire, _peer, _):
        for n in range(200):
            wire.feed(req(n, "work", {"yields": n % 4}))
            if n % 3:
                wire.feed(cancel(n))
        wire.feed(req("end", "work", {"yields": 10}))
        seen = await wire.replies_until("end")
        assert wire.out.empty()
    by_id = Counter(r["id"] for r in seen)
    assert by_id == Counter([*range(200), "end"])
    for reply in seen:
        assert reply.get("result") == "done" or reply["error"]["code"] == REQUEST_CANCELLED


async def test_a_request_in_flight_at_end_of_input_finishes_within_the_grace():
    handlers = Handlers()

    async def slow(params):
        await asyncio.sleep(0.05)
        return "finished"

    handlers.requests["slow"] = slow
    async with raw_peer(handlers) as (wire, _peer, task):
        wire.feed(req(1, "slow"), eof=True)
        assert await wire.reply() == {"jsonrpc": "2.0", "id": 1, "result": "finished"}
        await task


async def test_a_request_still_running_past_the_grace_is_answered_cancelled():
    handlers = Handlers()
    cancelled = asyncio.Event()

    async def forever(params):
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    handlers.requests["forever"] = forever
    async with raw_peer(handlers, eof_grace_s=0.1) as (wire, _peer, task):
        wire.feed(req(1, "forever"), eof=True)
        reply = await wire.reply()
        assert reply["id"] == 1 and reply["error"]["code"] == REQUEST_CANCELLED
        assert "closed" in reply["error"]["message"]
        assert cancelled.is_set()
        await task


async def test_a_result_json_cannot_carry_becomes_32603_for_its_id():
    handlers = Handlers()
    value: Any = "bottom"
    for _ in range(5000):
        value = [value]

    async def odd(params):
        return {"x": object()} if params["kind"] == "object" else {"deep": value}

    handlers.requests["odd"] = odd
    async with raw_peer(handlers) as (wire, _peer, _):
        wire.feed(req(1, "odd", {"kind": "object"}), req(2, "odd", {"kind": "deep"}))
        for rid in (1, 2):
            reply = await wire.reply()
            assert reply["id"] == rid and reply["error"]["code"] == INTERNAL_ERROR


async def test_a_batch_entry_cancelled_in_the_same_write_is_answered_in_the_array():
    handlers = Handlers()

    async def work(params):
        return "done"

    handlers.requests["work"] = work
    wire = HalfOpen()
    peer = Peer(
        wire,
        on_request=handlers.on_request,
        on_notification=handlers.on_notification,
        connection=Connection(accept_batches=True),
    )
    task = asyncio.create_task(peer.run())
    async with asyncio.timeout(5):
        wire.inbox.put_nowait(json.dumps([req(1, "work"), req(2, "work")]).encode())
        wire.feed(cancel(2), eof=True)
        replies = await wire.reply()
        await task
    by_id = {r["id"]: r for r in replies}
    assert by_id[1]["result"] == "done"
    assert by_id[2]["error"]["code"] == REQUEST_CANCELLED


# ---- the agent side on the raw wire ------------------------------------------------------
INIT = {"protocolVersion": 2, "info": {"name": "raw", "version": "1"}}


@contextlib.asynccontextmanager
async def raw_agent() -> AsyncIterator[tuple[HalfOpen, list[Any]]]:
    wire = HalfOpen()
    side = AgentSide(wire, info=schema.Implementation(name="raw-agent", version="1"))
    cancels: list[Any] = []

    async def new(params: schema.NewSessionRequest) -> schema.NewSessionResponse:
        return schema.NewSessionResponse(session_id="s1")

    async def on_cancel(params: schema.CancelSessionNotification) -> None:
        cancels.append(params.session_id)

    side.handle("session/new", new)
    side.handle("session/cancel", on_cancel)
    task = asyncio.create_task(side.serve())
    try:
        async with asyncio.timeout(5):
            yield wire, cancels
    finally:
        wire.inbox.put_nowait(None)
        await asyncio.wait([task], timeout=5)


async def test_requests_written_behind_initialize_are_answered_after_it_in_order():
    async with raw_agent() as (wire, _):
        wire.feed(
            req(1, "initialize", INIT),
            req(2, "session/new", {"cwd": "/tmp"}),
            {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": "s1"}},
            req(3, "session/new", {"cwd": "/tmp"}),
        )
        replies = await wire.replies_until(3)
    assert [r["id"] for r in replies] == [1, 2, 3]
    assert replies[0]["result"]["protocolVersion"] == 2
    assert replies[1]["result"] == replies[2]["result"] == {"sessionId": "s1"}


async def test_requests_behind_a_failed_initialize_are_refused_in_order():
    async with raw_agent() as (wire, _):
        wire.feed(
            req(1, "initialize", {"protocolVersion": 1}),
            req(2, "session/new", {"cwd": "/tmp"}),
            req(3, "initialize", INIT),
            req(4, "session/new", {"cwd": "/tmp"}),
        )
        replies = await wire.replies_until(4)
    assert [r["id"] for r in replies] == [1, 2, 3, 4]
    assert [r.get("error", {}).get("code") for r in replies] == [
        UNSUPPORTED_PROTOCOL_VERSION,
        INVALID_REQUEST,
        None,
        None,
    ]


async def test_a_notification_method_sent_as_a_request_runs_and_is_answered():
    async with raw_agent() as (wire, cancels):
        wire.feed(
            req(1, "initialize", INIT),
            req(2, "session/cancel", {"sessionId": "s1"}),
            req(3, "session/cancel", {"sessionId": 7}),
        )
        replies = await wire.replies_until(3)
    assert replies[1] == {"jsonrpc": "2.0", "id": 2, "result": {}}
    assert replies[2]["error"]["code"] == INVALID_PARAMS
    assert cancels == ["s1"]


async def test_a_request_behind_initialize_at_end_of_input_is_answered():
    async with raw_agent() as (wire, _):
        wire.feed(req(1, "initialize", INIT), req(2, "session/new", {"cwd": "/t"}), eof=True)
        replies = await wire.replies_until(2)
    assert [r["id"] for r in replies] == [1, 2] and all("result" in r for r in replies)


async def test_a_handler_asking_the_peer_after_end_of_input_fails_fast():
    """Nothing can answer once input ended: its request raises instead of hanging."""
    handlers = Handlers()
    peer_box: list[Peer] = []

    async def ask(params):
        try:
            await peer_box[0].request("session/request_permission", {})
        except ConnectionClosed:
            return "closed"
        return "answered?"

    handlers.requests["ask"] = ask
    async with raw_peer(handlers) as (wire, peer, task):
        peer_box.append(peer)
        wire.feed(req(1, "ask"), eof=True)
        assert await wire.reply() == {"jsonrpc": "2.0", "id": 1, "result": "closed"}
        await task
