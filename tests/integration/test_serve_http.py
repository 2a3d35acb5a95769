"""``crow serve --http``: the HTTP + SSE and WebSocket transports, many clients, security."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import time
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
from crow_testing.fakemodel import Text, ToolCalls
from crow_testing.serve_support import HttpServer, client_for, replayable, write_config
from test_serve_tools import probe_config

from crow.acp import ClientSide, schema


@pytest.fixture
def server(crow_home, scripted_model) -> Iterator[HttpServer]:
    write_config(crow_home, scripted_model.base_url, extra=probe_config())
    running = HttpServer()
    yield running
    running.stop()


def post(url: str, body: Any, **headers: str) -> httpx2.Response:
    return httpx2.post(
        url,
        content=json.dumps(body),
        headers={"Content-Type": "application/json", **headers},
        timeout=10,
    )


INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": 2, "info": {"name": "t", "version": "1"}},
}


def test_a_server_asks_its_model_server_before_clients_initialize(crow_home, scripted_model):
    """Discovery runs as the server starts: an initialize after it offers what the
    model's server says it takes (here images), not what config defaults to."""
    write_config(crow_home, scripted_model.base_url)
    scripted_model.show = {"capabilities": ["completion", "tools", "vision"]}
    running = HttpServer()
    try:
        deadline = time.monotonic() + 10
        while "POST /api/show" not in scripted_model.asked and time.monotonic() < deadline:
            time.sleep(0.05)
        assert scripted_model.asked[-1:] == ["POST /api/show"]  # before any client came
        for _ in range(50):  # its answer is on its way into the router
            prompt = post(running.url, INIT).json()["result"]["capabilities"]["session"]["prompt"]
            if "image" in prompt:
                break
            time.sleep(0.05)
        assert "image" in prompt
    finally:
        running.stop()


# ---- the HTTP surface (§11) --------------------------------------------------------
def test_initialize_opens_a_connection_and_other_posts_are_accepted(server):
    opened = post(server.url, INIT)
    assert opened.status_code == 200 and opened.json()["result"]["protocolVersion"] == 2
    connection = opened.headers["acp-connection-id"]
    listed = post(
        server.url,
        {"jsonrpc": "2.0", "id": 2, "method": "session/list", "params": {}},
        **{"Acp-Connection-Id": connection},
    )
    assert listed.status_code == 202 and listed.content == b""
    with httpx2.stream(
        "GET",
        server.url,
        headers={"Accept": "text/event-stream", "Acp-Connection-Id": connection},
        timeout=10,
    ) as stream:
        assert stream.status_code == 200
        for line in stream.iter_lines():
            if line.startswith("data:"):
                assert json.loads(line[5:])["id"] == 2
                break
    gone = httpx2.request("DELETE", server.url, headers={"Acp-Connection-Id": connection})
    assert gone.status_code == 202
    after = post(
        server.url,
        {"jsonrpc": "2.0", "id": 3, "method": "session/list"},
        **{"Acp-Connection-Id": connection},
    )
    assert after.status_code == 404


@pytest.mark.parametrize(
    ("method", "body", "headers", "status"),
    [
        ("POST", INIT, {"Content-Type": "text/plain"}, 415),
        ("POST", {"jsonrpc": "2.0", "id": 1, "method": "session/list"}, {}, 400),
        (
            "POST",
            {"jsonrpc": "2.0", "id": 1, "method": "session/list"},
            {"Acp-Connection-Id": "nope"},
            404,
        ),
        ("POST", [INIT], {}, 400),
        ("GET", None, {"Acp-Connection-Id": "nope"}, 406),
        ("GET", None, {"Accept": "text/event-stream"}, 400),
        ("GET", None, {"Accept": "text/event-stream", "Acp-Connection-Id": "nope"}, 404),
        ("PUT", None, {}, 405),
    ],
)
def test_bad_requests_get_their_status_codes(server, method, body, headers, status):
    content = json.dumps(body).encode() if body is not None else None
    if method == "POST":
        headers = {"Content-Type": "application/json", **headers}
    response = httpx2.request(method, server.url, content=content, headers=headers, timeout=10)
    assert response.status_code == status


def test_a_second_reader_of_one_stream_is_refused(server):
    connection = post(server.url, INIT).headers["acp-connection-id"]
    headers = {"Accept": "text/event-stream", "Acp-Connection-Id": connection}
    with httpx2.stream("GET", server.url, headers=headers, timeout=10) as first:
        assert first.status_code == 200
        assert httpx2.get(server.url, headers=headers, timeout=10).status_code == 409


@pytest.mark.parametrize("scheme", ["http", "ws"])
async def test_a_full_turn_over_each_transport(server, scripted_model, scheme):
    scripted_model.script(Text(text="Hello over the network", chunks=3))
    client = await client_for(server.url if scheme == "http" else server.ws_url)
    async with asyncio.timeout(20):
        session = await client.new_session("/tmp")
        turn = await session.run("hi")
        assert turn.stop_reason == "end_turn"
        assert session.projection.text() == "Hello over the network"
        resumed = await client.resume_session(session.id, "/tmp")
        assert resumed.projection.text() == "Hello over the network"
        await resumed.close()
    await client.aclose()


def wire(client: ClientSide, session_id: str) -> list[dict[str, Any]]:
    return [u for sid, u in client.seen if sid == session_id]  # type: ignore[attr-defined]


def is_state(update: dict[str, Any]) -> bool:
    return update.get("sessionUpdate") == "state_update"


def recording(client: ClientSide) -> ClientSide:
    client.seen = []  # type: ignore[attr-defined]
    client.on_update(lambda sid, u: client.seen.append((sid, u.to_wire())))  # type: ignore
    return client


async def test_two_clients_see_the_same_updates_in_the_same_order(server, scripted_model):
    scripted_model.script(
        Text(text="one two three four five six seven eight", chunks=8, delay_s=0.1)
    )
    first = recording(await client_for(server.url))
    second = recording(await client_for(server.ws_url))
    async with asyncio.timeout(30):
        session = await first.new_session("/tmp")
        turn = await session.prompt("count")
        while "one" not in session.projection.text():
            await first.next_update(session.id)
        watcher = await second.resume_session(session.id, "/tmp", replay=True)
        await session.wait(turn)
        while watcher.projection.state != "idle" or not watcher.projection.stop_reason:
            await second.next_update(session.id)
    seen_first, seen_second = wire(first, session.id), wire(second, session.id)
    # The second client got the replay (content, no state), then one current state,
    # then the same live updates as the first.
    snapshot = next(i for i, u in enumerate(seen_second) if is_state(u))
    live = seen_second[snapshot + 1 :]
    assert live and live[-1].get("stopReason") == "end_turn"  # it watched the turn end live
    before = seen_first[: len(seen_first) - len(live)]
    assert seen_first[len(before) :] == live
    assert seen_second[:snapshot] == replayable(before)
    assert seen_second[snapshot]["state"] == [u for u in before if is_state(u)][-1]["state"]
    assert watcher.projection.text() == session.projection.text()
    await first.aclose()
    await second.aclose()


async def test_a_client_that_reconnects_misses_nothing_and_gets_nothing_twice(
    server, scripted_model
):
    scripted_model.script(Text(text="a b c d e f g h i j", chunks=10, delay_s=0.1))
    first = await client_for(server.ws_url)
    seqs: list[int] = []
    received: list[dict[str, Any]] = []
    original = first.peer._on_notification  # type: ignore[attr-defined]

    async def keep_seq(method: str, params: Any) -> None:
        if method == "session/update":
            seqs.append(params["_meta"]["crow/seq"])
            received.append(params["update"])
        await original(method, params)

    first.peer._on_notification = keep_seq  # type: ignore[attr-defined]
    async with asyncio.timeout(30):
        session = await first.new_session("/tmp")
        await session.prompt("letters")
        while len([u for u in received if u["sessionUpdate"] == "agent_message_chunk"]) < 3:
            await first.next_update(session.id)
        await first.aclose()  # the connection drops mid-turn
        last = seqs[-1]
        await asyncio.sleep(0.3)  # more updates are sent while nobody listens
        second = recording(await client_for(server.url))
        await second.call(
            "session/resume",
            schema.ResumeSessionRequest.model_validate(
                {
                    "sessionId": session.id,
                    "cwd": "/tmp",
                    "replayFrom": {"type": "_crow/after", "seq": last},
                }
            ),
        )
        projection = second.projection(session.id)
        while not projection.stop_reason:
            await second.next_update(session.id)
    missed = [
        u
        for _, u in second.seen
        if not (  # type: ignore[attr-defined]
            u.get("sessionUpdate") == "state_update" and u.get("state") == "running"
        )
    ]
    whole = received + missed
    chunks = "".join(
        u["content"]["text"] for u in whole if u["sessionUpdate"] == "agent_message_chunk"
    )
    assert chunks == "a b c d e f g h i j"
    assert whole[-1]["stopReason"] == "end_turn"
    await second.aclose()


async def test_a_permission_answered_by_one_client_resolves_it_for_both(server, scripted_model):
    scripted_model.script(
        ToolCalls(calls=[("probe__touch", {"path": "shared.txt"})]), Text(text="written")
    )
    asked_first, asked_second = asyncio.Event(), asyncio.Event()
    withdrawn = asyncio.Event()

    async def approve(request: Any) -> Any:
        asked_first.set()
        await asked_second.wait()
        return schema.RequestPermissionResponse(
            outcome=schema.SelectedPermissionOutcome(option_id="allow_once")
        )

    async def never(request: Any) -> Any:
        asked_second.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            withdrawn.set()
            raise

    first = await client_for(server.url, on_permission=approve)
    second = await client_for(server.ws_url, on_permission=never)
    async with asyncio.timeout(30):
        session = await first.new_session("/tmp")
        await second.resume_session(session.id, "/tmp")
        turn = await session.prompt("write it")
        await asked_first.wait()
        await session.wait(turn)
        await withdrawn.wait()  # the other client's question was withdrawn
    assert turn.stop_reason == "end_turn"
    statuses = [c.status for c in session.projection.tool_calls.values()]
    assert statuses == ["completed"]
    await first.aclose()
    await second.aclose()


async def test_a_client_that_disconnects_does_not_stop_the_turn(server, scripted_model):
    scripted_model.script(Text(text="finished anyway", chunks=5, delay_s=0.1))
    first = await client_for(server.url)
    async with asyncio.timeout(30):
        session = await first.new_session("/tmp")
        await session.prompt("go")
        await first.aclose()  # gone before the model has even answered
        second = await client_for(server.url)
        resumed = await second.resume_session(session.id, "/tmp", replay=True)
        while not resumed.projection.stop_reason:
            await second.next_update(session.id)
    assert resumed.projection.text() == "finished anyway"
    assert resumed.projection.stop_reason == "end_turn"
    await second.aclose()


# ---- limits (authentication and Host, Origin checks: test_http_auth.py) ---------------
def test_an_oversized_body_is_refused_with_413(server):
    big = {**INIT, "params": {**INIT["params"], "_meta": {"pad": "x" * (65 * 1024 * 1024)}}}
    assert post(server.url, big).status_code == 413


async def test_a_long_replay_during_a_turn_gives_the_log_once_in_order(crow_home, scripted_model):
    """A log of several replay pages, resumed with replay while a turn appends: the
    pages go out without the log's lock, the tail with it; the resuming client gets
    every logged update exactly once, in log order, then the live ones."""
    from crow.store.db import SqliteStore

    write_config(crow_home, scripted_model.base_url, extra="[tools]\nbuiltin = []\n")
    running = HttpServer()
    scripted_model.script(Text(text=" ".join(f"w{n}" for n in range(40)), chunks=40, delay_s=0.02))
    first = recording(await client_for(running.ws_url))
    second = recording(await client_for(running.url))
    try:
        async with asyncio.timeout(60):
            session = await first.new_session("/tmp")
            store = SqliteStore(crow_home / "crow.db")
            old = {"sessionUpdate": "agent_message_chunk", "messageId": "msg_old"}
            for start in range(0, 2500, 500):
                bodies = [
                    json.dumps({**old, "content": {"type": "text", "text": f"old{n} "}}).encode()
                    for n in range(start, start + 500)
                ]
                store.append_updates([(session.id, b, None, None, None) for b in bodies])
            turn = await session.prompt("go")
            while "w3" not in session.projection.text():
                await first.next_update(session.id)
            watcher = await second.resume_session(session.id, "/tmp", replay=True)
            await session.wait(turn)
            while watcher.projection.state != "idle" or not watcher.projection.stop_reason:
                await second.next_update(session.id)
        logged = [json.loads(body) for _, body in store.replay(session.id)]
        store.close()
        seen = wire(second, session.id)
        snapshot = next(i for i, u in enumerate(seen) if is_state(u))
        content = [u for u in seen if not is_state(u)]
        assert content == logged  # nothing missing, nothing twice, the log's order
        assert snapshot >= 2500  # the snapshot follows the replay
        assert watcher.projection.text().startswith("old0 old1 ")
        assert watcher.projection.text().endswith(session.projection.text()[-20:])
    finally:
        await first.aclose()
        await second.aclose()
        running.stop()


def test_once_started_a_server_keeps_its_imports_out_of_the_collectors_view(
    crow_home, scripted_model
):
    """A full collection walks what is not frozen (crow.runtime.gc_tuning): once started,
    a server's modules (~43,000 objects) are not among it."""
    write_config(crow_home, scripted_model.base_url)
    running = HttpServer(env={"CROW_DEBUG_MEMORY": "0"})  # SIGUSR1: counts in crow.log
    log = crow_home / "logs" / "crow.log"
    try:
        deadline = time.monotonic() + 60
        while True:
            os.kill(running.process.pid, signal.SIGUSR1)
            time.sleep(0.5)
            counts = [int(n) for n in re.findall(r"(\d+) gc-tracked objects", log.read_text())]
            if counts and counts[-1] < 20_000:
                break
            assert time.monotonic() < deadline, f"objects a full collection walks: {counts}"
    finally:
        running.stop()
