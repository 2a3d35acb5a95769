"""Durable sessions of ``crow serve``: restart, kill -9, list, resume, delete, config."""

from __future__ import annotations

import os
import signal

import pytest
from crow_testing.fakemodel import Hang, Text
from crow_testing.serve_support import is_idle, kinds, notes, replayable, text_of, updates

from crow.acp.errors import INVALID_PARAMS, METHOD_NOT_FOUND, RESOURCE_NOT_FOUND
from crow.extensions import SEQ


def test_a_new_process_lists_and_resumes_the_sessions_of_an_earlier_one(
    crow, scripted_model, tmp_path
):
    proj = str(tmp_path / "proj")
    os.mkdir(proj)
    scripted_model.script(Text(text="remembered", chunks=2), Text(text="still here"))
    first = crow()
    sid = first.new_session(proj)
    live = first.run_turn(sid, "remember this")
    assert first.close() == 0

    second = crow(write=False)
    listed, _ = second.request("session/list", {"cwd": proj})
    [info] = listed["result"]["sessions"]
    assert info["sessionId"] == sid and info["title"] == "remember this" and info["updatedAt"]
    response, replay = second.resume(sid, proj, replayFrom={"type": "start"})
    assert "configOptions" in response["result"]
    # Everything that was sent live comes back, in order (the content: the state
    # changes of past turns are not replayed), then the current state, once.
    assert replay[:-1] == replayable(live)
    assert replay[-1] == {
        "sessionUpdate": "state_update",
        "state": "idle",
        "stopReason": "end_turn",
    }
    second.run_turn(sid, "and now?")
    history = scripted_model.requests[-1]["messages"]
    assert {"role": "assistant", "content": "remembered"} in history


def collect_until(process, predicate):
    return updates(process.until_update(predicate))


def nth_chunk(n):
    seen = []

    def predicate(update):
        if update.get("sessionUpdate") == "agent_message_chunk":
            seen.append(update)
        return len(seen) >= n

    return predicate


KILL_POINTS = {
    "after running": lambda: lambda u: u.get("state") == "running",
    "mid reply": lambda: nth_chunk(3),
    "waiting on the model": lambda: lambda u: u.get("sessionUpdate") == "session_info_update",
}


@pytest.mark.parametrize("point", list(KILL_POINTS))
def test_kill_9_mid_turn_loses_nothing_and_closes_the_turn_honestly(crow, scripted_model, point):
    slow = Text(text="one two three four five six ", chunks=6, delay_s=0.15)
    scripted_model.set_default(Hang() if point == "waiting on the model" else slow)
    first = crow()
    sid = first.new_session()
    _response, before = first.prompt(sid, "count slowly")
    received = updates(before)
    received += collect_until(first, KILL_POINTS[point]())
    if point == "waiting on the model":
        scripted_model.wait_for_requests(1)
    os.kill(first.proc.pid, signal.SIGKILL)
    first.proc.wait(timeout=10)
    received += updates(_drain(first))  # whatever was already in the pipe

    second = crow(write=False)
    resumed, replay = second.resume(sid, replayFrom={"type": "start"})
    assert "result" in resumed
    # No update lost or doubled: the client's view is a prefix of the replay.
    seen = replayable(received)
    assert replay[: len(seen)] == seen
    tail = replay[len(seen) :]
    kinds = [u["sessionUpdate"] for u in tail[-3:]]
    assert kinds == ["agent_message", "_crow/turnEnded", "state_update"]  # as a failed turn's
    assert "interrupted" in tail[-3]["content"][0]["text"]
    assert tail[-2]["stopReason"] == "error"
    assert tail[-1]["stopReason"] == "error" and tail[-1]["state"] == "idle"
    assert not [u for u in tail[:-3] if u["sessionUpdate"] == "user_message"]
    # The session works again, and the model sees what the user saw of the reply.
    scripted_model.set_default(Text(text="resumed fine"))
    assert text_of(second.run_turn(sid, "go on")) == "resumed fine"
    shown = text_of(received)
    if shown:
        assert {"role": "assistant", "content": shown} in scripted_model.requests[-1]["messages"]


def _drain(process):
    messages = []
    while True:
        try:
            messages.append(process.recv(timeout=1))
        except (EOFError, Exception):
            return messages


def test_stdin_closing_mid_turn_ends_the_turn_as_cancelled(crow, scripted_model):
    scripted_model.script(Hang())
    first = crow()
    sid = first.new_session()
    first.prompt(sid, "hang")
    scripted_model.wait_for_requests(1)
    assert first.close() == 0
    second = crow(write=False)
    _, replay = second.resume(sid, replayFrom={"type": "start"})
    assert replay[-1]["stopReason"] == "cancelled"
    assert any("stopped before this turn finished" in n for n in notes(replay))


def test_list_pages_with_a_cursor_and_filters_by_cwd(crow, tmp_path):
    many = str(tmp_path / "many")
    os.mkdir(many)
    other = str(tmp_path / "other")
    os.mkdir(other)
    agent = crow()
    ids = {agent.new_session(many) for _ in range(55)}
    agent.new_session(other)
    seen, params = [], {"cwd": many}
    while True:
        page, _ = agent.request("session/list", params)
        seen += [s["sessionId"] for s in page["result"]["sessions"]]
        if not page["result"].get("nextCursor"):
            break
        params = {"cwd": many, "cursor": page["result"]["nextCursor"]}
    assert len(seen) == 55 and set(seen) == ids
    bad, _ = agent.request("session/list", {"cursor": "not-a-cursor"})
    assert bad["error"]["code"] == INVALID_PARAMS


def test_resume_checks_its_params(crow, tmp_path):
    a = str(tmp_path / "a")
    os.mkdir(a)
    agent = crow()
    sid = agent.new_session(a)
    wrong_cwd, _ = agent.resume(sid, "/tmp/b")
    assert wrong_cwd["error"]["code"] == INVALID_PARAMS
    cursor, replay = agent.resume(sid, a, replayFrom={"type": "_acme"})
    assert cursor["error"]["code"] == INVALID_PARAMS and replay == []
    unknown, _ = agent.resume("sess_nope", a)
    assert unknown["error"]["code"] == RESOURCE_NOT_FOUND
    _plain, before = agent.resume(sid, a)
    states = [u for u in before if u["sessionUpdate"] != "available_commands_update"]
    assert states == [{"sessionUpdate": "state_update", "state": "idle"}]


def test_close_then_prompt_is_32002_and_resume_brings_it_back(crow, scripted_model):
    scripted_model.set_default(Text(text="hi"))
    agent = crow()
    sid = agent.new_session()
    assert agent.request("session/close", {"sessionId": sid})[0]["result"] == {}
    closed, _ = agent.prompt(sid, "hello?")
    assert closed["error"]["code"] == RESOURCE_NOT_FOUND
    agent.resume(sid)
    assert agent.run_turn(sid, "hello again")[-1]["stopReason"] == "end_turn"


def test_close_while_running_sends_cancelled_first(crow, scripted_model):
    scripted_model.script(Hang())
    agent = crow()
    sid = agent.new_session()
    agent.prompt(sid, "hang")
    scripted_model.wait_for_requests(1)
    response, before = agent.request("session/close", {"sessionId": sid})
    assert response["result"] == {}
    assert [u for u in updates(before) if is_idle(u)][-1]["stopReason"] == "cancelled"


def test_delete_is_advertised_and_removes_the_session(crow, tmp_path):
    gone = str(tmp_path / "gone")
    os.mkdir(gone)
    agent = crow()
    sid = agent.new_session(gone)
    assert agent.request("session/delete", {"sessionId": sid})[0]["result"] == {}
    assert agent.request("session/delete", {"sessionId": "nope"})[0]["result"] == {}
    listed, _ = agent.request("session/list", {"cwd": gone})
    assert listed["result"]["sessions"] == []
    gone, _ = agent.resume(sid, gone)
    assert gone["error"]["code"] == RESOURCE_NOT_FOUND


def test_capabilities_and_removed_v1_methods(crow):
    agent = crow(models={"m": {"capabilities": ["tools", "image"]}})
    response, _ = agent.request(
        "initialize", {"protocolVersion": 2, "info": {"name": "t", "version": "1"}}
    )
    assert response["error"]["code"] == -32600  # already initialized by the fixture
    fresh = crow(write=False)
    for method in ("session/load", "session/set_mode", "authenticate"):
        assert fresh.request(method, {})[0]["error"]["code"] == METHOD_NOT_FOUND


def test_the_model_config_option_switches_models(crow, scripted_model):
    scripted_model.set_default(Text(text="ok"))
    agent = crow(models={"big": {}, "small": {}})
    response, _ = agent.request("session/new", {"cwd": "/tmp"})
    sid = response["result"]["sessionId"]
    [option] = response["result"]["configOptions"]
    assert option["configId"] == "model" and option["currentValue"] == "big"
    assert [o["value"] for o in option["options"]] == ["big", "small"]
    changed, before = agent.request(
        "session/set_config_option",
        {"sessionId": sid, "configId": "model", "type": "id", "value": "small"},
    )
    assert changed["result"]["configOptions"][0]["currentValue"] == "small"
    assert "config_option_update" in kinds(updates(before))
    agent.run_turn(sid, "hi")
    assert scripted_model.requests[-1]["model"] == "small"
    bad, _ = agent.request(
        "session/set_config_option",
        {"sessionId": sid, "configId": "model", "type": "id", "value": "huge"},
    )
    assert bad["error"]["code"] == INVALID_PARAMS
    unknown, _ = agent.request(
        "session/set_config_option",
        {"sessionId": sid, "configId": "speed", "type": "id", "value": "x"},
    )
    assert unknown["error"]["code"] == INVALID_PARAMS


def test_a_new_sessions_commands_come_after_its_response_once_logged(crow):
    """``session/new`` stores the session and its first update together: the update
    follows the response (a client can place it), as seq 1, and a resume replays it
    once."""
    agent = crow()
    response, before = agent.request("session/new", {"cwd": "/tmp"})
    sid = response["result"]["sessionId"]
    assert not updates(before)
    [frame] = agent.until_update(lambda u: True)
    assert frame["params"]["update"]["sessionUpdate"] == "available_commands_update"
    assert frame["params"]["_meta"][SEQ] == 1
    _, replay = agent.resume(sid, replayFrom={"type": "start"})
    assert kinds(replay) == ["available_commands_update", "state_update"]
    assert agent.nothing_within(0.3)


def test_slash_commands(crow, scripted_model):
    scripted_model.set_default(Text(text="model answer"))
    agent = crow(models={"big": {}, "small": {}})
    sid = agent.new_session()
    announced = collect_until(agent, lambda u: u["sessionUpdate"] == "available_commands_update")
    names = [c["name"] for c in announced[-1]["availableCommands"]]
    assert names == ["help", "model", "compact", "title", "remember", "forget", "memories"]
    assert "/model" in notes(agent.run_turn(sid, "/help"))[0]
    switched = agent.run_turn(sid, "/model small")
    assert "config_option_update" in kinds(switched)
    titled = agent.run_turn(sid, "/title My session")
    assert [u["title"] for u in titled if u["sessionUpdate"] == "session_info_update"][-1] == (
        "My session"
    )
    assert scripted_model.requests == []  # no command reached the model
    agent.run_turn(sid, "/unknown is just text")
    assert scripted_model.requests[-1]["model"] == "small"
    assert scripted_model.requests[-1]["messages"][1]["content"][0]["text"] == (
        "/unknown is just text"
    )


def test_compaction_summarises_when_the_context_fills(crow, scripted_model):
    agent = crow(models={"tiny": {"context_window": 400, "max_output_tokens": 50}})
    sid = agent.new_session()
    scripted_model.script(
        Text(text="a" * 600),
        Text(text="b" * 600),
        Text(text="SUMMARY OF EARLIER TALK"),
        Text(text="fresh answer"),
    )
    agent.run_turn(sid, "first")
    agent.run_turn(sid, "second")
    seen = agent.run_turn(sid, "third")
    assert any("Compacted" in n for n in notes(seen))
    summary_request, answer_request = scripted_model.requests[2], scripted_model.requests[3]
    assert "Summarise" in summary_request["messages"][0]["content"]
    sent = str(answer_request["messages"])
    assert "SUMMARY OF EARLIER TALK" in sent and "a" * 600 not in sent
    _, replay = agent.resume(sid, replayFrom={"type": "start"})
    assert "a" * 600 in text_of(replay)  # the full history is still replayed


def test_context_length_error_compacts_and_retries_once(crow, scripted_model):
    from crow_testing.fakemodel import Error

    agent = crow()
    sid = agent.new_session()
    scripted_model.script(
        Text(text="one"),
        Text(text="two"),
        Error(status=400, message="This model's maximum context length is 10"),
        Text(text="summary"),
        Text(text="after compaction"),
    )
    agent.run_turn(sid, "q1")
    agent.run_turn(sid, "q2")
    seen = agent.run_turn(sid, "q3")
    assert text_of(seen) == "after compaction" and seen[-1]["stopReason"] == "end_turn"


def test_config_errors_name_the_file_and_key(crow_home):
    import subprocess
    import sys

    crow_home.mkdir(parents=True, exist_ok=True)
    (crow_home / "config.toml").write_text('[models.x]\nprovider = "nowhere"\n')
    result = subprocess.run(
        [sys.executable, "-m", "crow", "serve"],
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 2 and result.stdout == ""
    assert str(crow_home / "config.toml") in result.stderr
    assert "models.x.provider" in result.stderr
