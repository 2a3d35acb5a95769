"""Idle sessions that clients still have open leave memory and come back unseen
(``[server] unload_idle_s``, crow.agent.parking), on a real ``crow serve --http``.

Whether a session is loaded is read where an operator reads it: ``crow_live_sessions``
on /metrics, and the server's log.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
from crow_testing.fakemodel import Text, ToolCalls
from crow_testing.serve_support import HttpServer, client_for, write_config
from prometheus_client.parser import text_string_to_metric_families
from test_serve_tools import probe_config

from crow.acp import schema

#: Long enough that a loaded machine's pause between two requests does not park it.
IDLE_S = 2.0


@pytest.fixture
def server(crow_home, scripted_model) -> Iterator[HttpServer]:
    write_config(
        crow_home,
        scripted_model.base_url,
        models={"big": {}, "small": {}},
        extra=probe_config(extra=f"[server]\nunload_idle_s = {IDLE_S}\n"),
    )
    running = HttpServer()
    yield running
    running.stop()


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
    """What a replay gives back (state changes and notices are live only)."""
    return [u for u in updates if u["sessionUpdate"] not in ("state_update", "notice")]


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
