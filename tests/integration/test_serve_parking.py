"""Idle sessions that clients still have open leave memory and come back unseen
(``[server] unload_idle_s``, crow.agent.parking), on a real ``crow serve --http``:
each test on a SQLite file and on a PostgreSQL store, and two servers sharing one
PostgreSQL store (the other server's turns reach a session parked here).

Whether a session is loaded is read where an operator reads it: ``crow_live_sessions``
on /metrics, and the server's log.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Iterator
from typing import Any

import httpx2
import orjson
import pytest
from crow_testing.fakemodel import Hang, Text, ToolCalls
from crow_testing.serve_support import HttpServer, client_for, write_config
from prometheus_client.parser import text_string_to_metric_families
from test_serve_tools import probe_config

from crow.acp import schema

#: Long enough that a loaded machine's pause between two requests does not park it.
IDLE_S = 2.0


@pytest.fixture(params=["sqlite", "postgres"])
def store_env(request) -> dict[str, str]:
    """Where the sessions are kept: the SQLite file of the Crow home, or PostgreSQL."""
    if request.param == "sqlite":
        return {}
    return {"CROW_STORE_URL": request.getfixturevalue("postgres_url")}


def parking_config(crow_home, scripted_model, server: str = "") -> None:
    """Sessions parked after ``IDLE_S``; ``server``: more of ``[server]``."""
    write_config(
        crow_home,
        scripted_model.base_url,
        models={"big": {}, "small": {}},
        extra=probe_config(extra=f"[server]\nunload_idle_s = {IDLE_S}\n{server}"),
    )


@pytest.fixture
def server(crow_home, scripted_model, store_env) -> Iterator[HttpServer]:
    parking_config(crow_home, scripted_model)
    running = HttpServer(env=store_env)
    yield running
    running.stop()


@pytest.fixture
def pair(crow_home, scripted_model, postgres_url) -> Iterator[tuple[HttpServer, HttpServer]]:
    """Two servers sharing one PostgreSQL store."""
    parking_config(crow_home, scripted_model)
    env = {"CROW_STORE_URL": postgres_url}
    here = HttpServer(env=env)
    there = HttpServer(env=env)
    yield here, there
    here.stop()
    there.stop()


def live_sessions(server: HttpServer) -> float:
    metrics = httpx2.get(
        server.bare_url.removesuffix("/acp") + "/metrics",
        headers={"Authorization": f"Bearer {server.token}"},
        timeout=10,
    )
    for family in text_string_to_metric_families(metrics.text):
        for sample in family.samples:
            if sample.name == "crow_live_sessions":
                return sample.value
    raise AssertionError("no crow_live_sessions in /metrics")


async def until(check: Any, what: str, within_s: float = 15.0) -> None:
    deadline = time.monotonic() + within_s
    while not check():
        assert time.monotonic() < deadline, f"never: {what}"
        await asyncio.sleep(0.1)


def always_allow(asked: list[str]) -> Any:
    async def answer(request: Any) -> Any:
        asked.append(request.title)
        return schema.RequestPermissionResponse(
            outcome=schema.SelectedPermissionOutcome(option_id="allow_session")
        )

    return answer


def logged(into: list[dict[str, Any]]) -> Any:
    def keep(session_id: str, update: Any) -> None:
        into.append(update.to_wire())

    return keep


def content(updates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What a replay gives back (state changes, notices and the queue are live only)."""
    live_only = ("state_update", "notice", "_crow/queue")
    return [u for u in updates if u["sessionUpdate"] not in live_only]


def seqs_of(client: Any) -> list[int]:
    """Every ``crow/seq`` the client is sent from now on, as it comes."""
    seqs: list[int] = []
    deliver = client.peer._on_notification

    async def recording(method: str, params: Any) -> None:
        seq = ((params or {}).get("_meta") or {}).get("crow/seq")
        if seq is not None:
            seqs.append(seq)
        await deliver(method, params)

    client.peer._on_notification = recording
    return seqs


def replies(updates: list[dict[str, Any]]) -> list[str]:
    """The model's whole messages (Crow's own notes left out)."""
    return [
        "".join(block["text"] for block in u["content"])
        for u in updates
        if u["sessionUpdate"] == "agent_message" and "crow/notice" not in u.get("_meta", {})
    ]


async def test_an_idle_open_session_unloads_and_comes_back_as_it_was(
    server, scripted_model, crow_home, tmp_path
):
    scripted_model.script(
        ToolCalls(calls=[("probe__touch", {"path": "one.txt"})]),
        Text(text="one done"),
        ToolCalls(calls=[("probe__touch", {"path": "two.txt"})]),
        Text(text="two done"),
    )
    extra = tmp_path / "extra"
    extra.mkdir()
    asked: list[str] = []
    owner = await client_for(server.url, on_permission=always_allow(asked))
    onlooker = await client_for(server.ws_url)
    seen_by_owner: list[dict[str, Any]] = []
    seen_by_onlooker: list[dict[str, Any]] = []
    owner.on_update(logged(seen_by_owner))
    onlooker.on_update(logged(seen_by_onlooker))
    async with asyncio.timeout(90):
        session = await owner.new_session(str(tmp_path), additional_directories=[str(extra)])
        first = await session.run("touch one")
        assert first.stop_reason == "end_turn" and len(asked) == 1
        switch = schema.IdSetSessionConfigOptionRequest.model_validate(
            {"sessionId": session.id, "configId": "model", "type": "id", "value": "small"}
        )
        await owner.call("session/set_config_option", switch)
        watching = await onlooker.resume_session(
            session.id, str(tmp_path), replay=False, additional_directories=[str(extra)]
        )

        await until(lambda: live_sessions(server) == 0, "the idle session unloaded")
        log = (crow_home / "logs" / "crow.log").read_text()
        assert f"session {session.id} idle: unloaded" in log
        before_owner, before_onlooker = len(seen_by_owner), len(seen_by_onlooker)

        second = await session.run("touch two")  # from the same connection
        assert second.stop_reason == "end_turn"
        # Loaded again (the gauge could be back at 0 already: the idle time is short).
        log = (crow_home / "logs" / "crow.log").read_text()
        assert f"session {session.id} loaded again" in log
        assert len(asked) == 1  # "always allow in this session" still holds
        assert scripted_model.requests[-1]["model"] == "small"
        await until(
            lambda: (
                watching.projection.stop_reason == "end_turn"
                and "two done" in watching.projection.text()
            ),
            "the onlooker saw the new turn live",
        )
    after_owner = seen_by_owner[before_owner:]
    after_onlooker = seen_by_onlooker[before_onlooker:]
    # Each watcher got the new turn once, and nothing of the earlier log again.
    assert content(after_owner) == content(after_onlooker)
    kinds = [u["sessionUpdate"] for u in content(after_owner)]
    assert kinds.count("user_message") == 1 and "available_commands_update" not in kinds
    assert replies(after_owner) == ["two done"]

    fresh = await client_for(server.ws_url)
    replayed: list[dict[str, Any]] = []
    fresh.on_update(logged(replayed))
    async with asyncio.timeout(30):
        listed = await fresh.list_sessions(cwd=str(tmp_path))  # (a resume sets them anew)
        resumed = await fresh.resume_session(session.id, str(tmp_path))
    # The whole log once: what the owner was sent live, in order.
    assert content(replayed) == content(seen_by_owner)
    assert replies(replayed) == ["one done", "two done"]
    assert [c.status for c in resumed.projection.tool_calls.values()] == ["completed"] * 2
    [option] = resumed.response.config_options
    assert option.current_value == "small"
    assert [c.name for c in resumed.response.available_commands][:2] == ["help", "model"]
    [info] = listed.sessions
    assert info.title == "touch one" and info.additional_directories == [str(extra)]
    # The model saw the whole history on the session's return.
    roles = [m["role"] for m in scripted_model.requests[2]["messages"]]
    assert roles[-5:] == ["user", "assistant", "tool", "assistant", "user"]
    for client in (owner, onlooker, fresh):
        await client.aclose()


async def test_a_running_turn_or_an_open_question_keeps_a_session_loaded(
    server, scripted_model, tmp_path
):
    scripted_model.script(
        Text(text="a b c d e", chunks=5, delay_s=IDLE_S),  # ~5 idle spells long
        ToolCalls(calls=[("probe__touch", {"path": "held.txt"})]),
        Text(text="written"),
    )
    asked = asyncio.Event()
    answer = asyncio.Event()

    async def hold_then_allow(request: Any) -> Any:
        asked.set()
        await answer.wait()
        return schema.RequestPermissionResponse(
            outcome=schema.SelectedPermissionOutcome(option_id="allow_once")
        )

    client = await client_for(server.url, on_permission=hold_then_allow)
    async with asyncio.timeout(60):
        session = await client.new_session(str(tmp_path))
        turn = await session.prompt("talk slowly")
        await asyncio.sleep(IDLE_S * 4)
        assert not turn.done and live_sessions(server) == 1  # running: kept
        await session.wait(turn)
        asking = await session.prompt("touch it")
        await asked.wait()
        await asyncio.sleep(IDLE_S * 4)
        assert live_sessions(server) == 1  # a question is open: kept
        answer.set()
        assert (await session.wait(asking)).stop_reason == "end_turn"
        await until(lambda: live_sessions(server) == 0, "unloaded once idle")
        assert "written" in session.projection.text()
    await client.aclose()


async def test_requests_naming_a_parked_session_at_once_bring_it_back_once(
    server, scripted_model, crow_home, tmp_path
):
    scripted_model.set_default(Text(text="ok"))
    owner = await client_for(server.url)
    other = await client_for(server.ws_url)
    async with asyncio.timeout(60):
        session = await owner.new_session(str(tmp_path))
        await session.run("hello")
        await until(lambda: live_sessions(server) == 0, "the idle session unloaded")
        switch = schema.IdSetSessionConfigOptionRequest.model_validate(
            {"sessionId": session.id, "configId": "model", "type": "id", "value": "small"}
        )
        switched, resumed = await asyncio.gather(
            owner.call("session/set_config_option", switch),
            other.resume_session(session.id, str(tmp_path)),
        )
        assert switched.config_options[0].current_value == "small"
        assert live_sessions(server) == 1
        assert resumed.projection.text() == "ok"  # the replay, once
        turn = await resumed.run("again")  # the other client prompts; the owner watches
        assert turn.stop_reason == "end_turn"
        await until(lambda: session.projection.text() == "okok", "the owner saw it live")
    log = (crow_home / "logs" / "crow.log").read_text()
    assert log.count(f"session {session.id} loaded again") == 1
    assert scripted_model.requests[-1]["model"] == "small"
    await owner.aclose()
    await other.aclose()


def held_shown(updates: list[dict[str, Any]]) -> list[str]:
    """The previews of the held prompts a client was last shown."""
    queues = [u["prompts"] for u in updates if u["sessionUpdate"] == "_crow/queue"]
    return [p["preview"] for p in queues[-1]] if queues else []


def hold_forever(asked: list[str]) -> Any:
    async def never(request: Any) -> Any:
        asked.append(request.title)
        await asyncio.Event().wait()

    return never


def allow_once(asked: list[str]) -> Any:
    async def answer(request: Any) -> Any:
        asked.append(request.title)
        return schema.RequestPermissionResponse(
            outcome=schema.SelectedPermissionOutcome(option_id="allow_once")
        )

    return answer


async def test_a_session_parked_here_follows_another_servers_turn_and_comes_back_whole(
    pair, scripted_model, crow_home, tmp_path
):
    """Parked on one server, prompted through another: the watcher here sees that turn
    live (and answers its question), its own prompt is held behind it and served
    here, and every return has the whole history."""
    here, there = pair
    scripted_model.script(
        Text(text="one done"),  # here
        ToolCalls(calls=[("probe__touch", {"path": "two.txt"})]),  # there: asks
        Text(text="two done", chunks=4, delay_s=IDLE_S),  # (the prompt here is held)
        Text(text="three done"),  # here, once the turn there ended
        Text(text="four done"),  # here, after it was parked again
    )
    asked_here: list[str] = []
    asked_there: list[str] = []
    owner = await client_for(here.url, on_permission=allow_once(asked_here))
    elsewhere = await client_for(there.ws_url, on_permission=hold_forever(asked_there))
    seqs = seqs_of(owner)
    seen: list[dict[str, Any]] = []
    seen_there: list[dict[str, Any]] = []
    owner.on_update(logged(seen))
    elsewhere.on_update(logged(seen_there))
    async with asyncio.timeout(120):
        session = await owner.new_session(str(tmp_path))
        assert (await session.run("one")).stop_reason == "end_turn"
        other = await elsewhere.resume_session(session.id, str(tmp_path), replay=False)
        await until(lambda: live_sessions(here) == 0, "parked here")
        await until(lambda: live_sessions(there) == 0, "parked there")

        two = await other.prompt("touch two")  # served there, as if nothing were parked
        await until(lambda: "two" in session.projection.text(), "the turn there seen here")
        assert len(asked_here) == len(asked_there) == 1  # asked on both, answered here
        assert live_sessions(here) == 1
        three = asyncio.ensure_future(session.prompt("three"))  # held: the turn runs there
        await until(lambda: held_shown(seen_there) == ["three"], "the held prompt shown there")
        assert (await other.wait(two)).stop_reason == "end_turn"
        assert (await session.wait(await three)).stop_reason == "end_turn"
        await until(lambda: "three done" in other.projection.text(), "seen there too")

        await until(lambda: live_sessions(here) == 0, "parked here again")
        assert (await session.run("four")).stop_reason == "end_turn"
    # The owner got every logged update once, in the log's order, none missing.
    assert seqs == list(range(seqs[0], seqs[-1] + 1))
    assert replies(seen) == ["one done", "two done", "three done", "four done"]
    # What the model saw here at the last return: every turn, the other server's too.
    messages = scripted_model.requests[-1]["messages"]
    assert [m["role"] for m in messages][-9:] == [
        *("user", "assistant"),  # one (here)
        *("user", "assistant", "tool", "assistant"),  # touch two (there)
        *("user", "assistant"),  # three (here, held behind it)
        "user",  # four
    ]
    assert "two done" in str(messages[-4]["content"])
    fresh = await client_for(here.ws_url)
    replayed: list[dict[str, Any]] = []
    fresh.on_update(logged(replayed))
    async with asyncio.timeout(30):
        await fresh.resume_session(session.id, str(tmp_path))
    assert content(replayed) == content(seen)
    log = (crow_home / "logs" / "crow.log").read_text()
    assert log.count(f"session {session.id} loaded again") >= 3  # (on both servers)
    for client in (owner, elsewhere, fresh):
        await client.aclose()


async def test_a_turn_left_by_a_dead_server_ends_for_a_session_parked_here(
    pair, scripted_model, tmp_path
):
    """The server running a turn is killed: this one closes the turn (its sweep), and
    the watchers of the session it had parked see it end, then prompt it here."""
    here, there = pair
    scripted_model.script(Text(text="before"), Hang(), Text(text="after"))
    owner = await client_for(here.url)
    elsewhere = await client_for(there.ws_url)
    async with asyncio.timeout(90):
        session = await owner.new_session(str(tmp_path))
        await session.run("one")
        other = await elsewhere.resume_session(session.id, str(tmp_path), replay=False)
        await until(lambda: live_sessions(here) == 0, "parked here")
        await other.prompt("hang")
        await until(lambda: session.projection.state == "running", "the turn there seen here")
        there.process.send_signal(signal.SIGKILL)
        there.process.wait(timeout=10)
        await until(lambda: session.projection.state == "idle", "its end seen here", 30)
        assert session.projection.stop_reason != "end_turn"
        await until(lambda: live_sessions(here) == 0, "parked here again")
        assert (await session.run("go on")).stop_reason == "end_turn"
    assert session.projection.text().endswith("after")
    with contextlib.suppress(Exception):  # (its server is gone)
        await elsewhere.aclose()
    await owner.aclose()


#: The sweep for dead servers (and their held prompts) this rarely: it comes once the
#: session is parked (two servers start, a turn runs and ends, and the session idles
#: for ``IDLE_S``: some 5-10 s here).
SLOW_SWEEP_S = 25.0


async def test_a_dead_servers_held_prompt_dropped_while_parked_here_updates_the_queue_shown(
    crow_home, scripted_model, postgres_url, tmp_path
):
    """A change to the held prompts is news of its own: a server holding a prompt
    behind the turn here dies; the turn ends and the session is parked with the dead
    server's prompt still filed; the sweep then drops it, and nothing else happens to
    the session.  It comes back for that, and its watcher is shown the queue empty,
    not the gone prompt for good."""
    parking_config(crow_home, scripted_model, server=f"orphan_sweep_s = {SLOW_SWEEP_S}\n")
    scripted_model.script(Hang())
    env = {"CROW_STORE_URL": postgres_url}
    here, there = HttpServer(env=env), HttpServer(env=env)
    owner = await client_for(here.url)
    elsewhere = await client_for(there.ws_url)
    seen: list[dict[str, Any]] = []
    owner.on_update(logged(seen))
    held = None
    try:
        async with asyncio.timeout(SLOW_SWEEP_S * 3):
            session = await owner.new_session(str(tmp_path))
            other = await elsewhere.resume_session(session.id, str(tmp_path), replay=False)
            await session.prompt("hang")
            await until(lambda: other.projection.state == "running", "the turn seen there")
            held = asyncio.ensure_future(other.prompt("held there"))
            await until(lambda: held_shown(seen) == ["held there"], "shown here")
            there.process.send_signal(signal.SIGKILL)
            there.process.wait(timeout=10)
            await session.cancel()
            await until(lambda: session.projection.state == "idle", "the turn here ended")
            await until(lambda: live_sessions(here) == 0, "parked here")
            assert held_shown(seen) == ["held there"]  # (no sweep yet: still filed)
            await until(lambda: held_shown(seen) == [], "the queue shown empty", SLOW_SWEEP_S * 2)
            assert live_sessions(here) == 1  # back for the news
    finally:
        if held is not None:
            held.cancel()
        with contextlib.suppress(Exception):  # (its server is gone)
            await elsewhere.aclose()
        await owner.aclose()
        here.stop()
        there.stop()


def listener_pids(url: str) -> list[int]:
    """The backends of the servers' LISTEN connections (crow.store.listen)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity"
            " WHERE datname = current_database() AND query LIKE 'LISTEN%'"
        ).fetchall()
    return [pid for (pid,) in rows]


async def test_news_missed_while_the_store_connection_was_lost_reaches_a_parked_session(
    crow_home, scripted_model, postgres_url, tmp_path
):
    """The server's LISTEN connection drops; another server logs to a session parked
    here meanwhile: once listening again, the session comes back and its watcher
    gets that update."""
    import psycopg

    from crow.agent.updates import agent_message
    from crow.store.db import open_store

    parking_config(crow_home, scripted_model)
    scripted_model.script(Text(text="one done"))
    here = HttpServer(env={"CROW_STORE_URL": postgres_url})
    elsewhere = open_store(postgres_url)  # what another server writes with
    owner = await client_for(here.url)
    try:
        async with asyncio.timeout(60):
            session = await owner.new_session(str(tmp_path))
            await session.run("one")
            await until(lambda: live_sessions(here) == 0, "parked here")
            [listening] = listener_pids(postgres_url)
            with psycopg.connect(postgres_url, autocommit=True) as conn:
                conn.execute("SELECT pg_terminate_backend(%s)", (listening,))
            await until(lambda: listening not in listener_pids(postgres_url), "it dropped")
            update = agent_message("msg_afar", "from afar")
            elsewhere.append_update(session.id, orjson.dumps(update))  # heard by nobody
            await until(lambda: "from afar" in session.projection.text(), "seen once back")
            assert len(listener_pids(postgres_url)) == 1  # (listening again)
            assert live_sessions(here) == 1
            await until(lambda: live_sessions(here) == 0, "parked again")
    finally:
        await owner.aclose()
        elsewhere.close()
        here.stop()
