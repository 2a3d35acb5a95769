"""``crow serve`` under races, crashes and a stuck store: every acknowledged prompt ends.

Raw bytes to real subprocesses; pipelined messages go out in one write, as real
clients send them; crashes are ``kill -9`` at the point named.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from typing import Any

import pytest
from crow_testing.fakemodel import Hang, Text, ToolCalls
from crow_testing.serve_support import is_idle, kinds, notes, updates
from test_serve_tools import probe_config, until_request

from crow.store.lease import this_process

SID_PARAMS = {"cwd": "/tmp"}


def frame(method: str, params: Any, rid: int | None = None) -> bytes:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params}
    if rid is not None:
        message["id"] = rid
    return json.dumps(message).encode() + b"\n"


def prompt_frame(sid: str, rid: int, text: str = "hi") -> bytes:
    return frame(
        "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": text}]}, rid
    )


def messages_until(agent: Any, done: Any) -> list[dict[str, Any]]:
    seen = []
    while not done(seen):
        seen.append(agent.recv())
    return seen


def response(seen: list[dict[str, Any]], rid: int) -> dict[str, Any]:
    return next(m for m in seen if m.get("id") == rid and "method" not in m)


def idles(seen: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [u for u in updates(seen) if is_idle(u)]


# ---- every acknowledged prompt ends in idle -----------------------------------------
@pytest.mark.parametrize("follow", ["session/cancel", "session/close"])
def test_a_cancel_or_close_in_the_same_write_as_the_prompt_still_ends_the_turn(
    crow, scripted_model, follow
):
    scripted_model.set_default(Text(text="never mind"))
    agent = crow()
    for round_ in range(5):
        sid = agent.new_session()
        rid = 100 + round_
        closing = frame(
            follow, {"sessionId": sid}, rid=200 + round_ if follow.endswith("close") else None
        )
        agent.write(prompt_frame(sid, rid) + closing)
        seen = messages_until(
            agent, lambda s, rid=rid: bool(idles(s)) and any(m.get("id") == rid for m in s)
        )
        ack = response(seen, rid)
        assert "messageId" in ack["result"], ack
        turn = [u for u in updates(seen) if u["sessionUpdate"] != "available_commands_update"]
        assert kinds(turn)[0] == "user_message"
        assert turn[0]["messageId"] == ack["result"]["messageId"]
        assert idles(seen)[-1]["stopReason"] in ("cancelled", "end_turn")


def test_every_acknowledged_prompt_ends_in_idle_under_pipelined_cancels(crow, scripted_model):
    scripted_model.set_default(Text(text="ok"))
    agent = crow()
    sid = agent.new_session()
    acknowledged = 0
    for rid in range(300, 320):
        agent.write(prompt_frame(sid, rid) + frame("session/cancel", {"sessionId": sid}))
        seen = messages_until(agent, lambda s, rid=rid: any(m.get("id") == rid for m in s))
        if "result" not in response(seen, rid):
            continue  # refused (busy): nothing to end
        acknowledged += 1
        if not idles(seen):
            seen += agent.until_update(is_idle)
        assert len(idles(seen)) == 1
    assert acknowledged == 20


# ---- resume replays content, then one current state ----------------------------------
def test_a_resume_replays_content_then_exactly_one_current_state(crow, scripted_model):
    scripted_model.script(Text(text="first"), Text(text="second"))
    agent = crow()
    sid = agent.new_session()
    agent.run_turn(sid, "one")
    agent.run_turn(sid, "two")
    agent.close()
    later = crow(write=False)
    _, replayed = later.resume(sid, replayFrom={"type": "start"})
    states = [u for u in replayed if u["sessionUpdate"] == "state_update"]
    assert states == [{"sessionUpdate": "state_update", "state": "idle", "stopReason": "end_turn"}]
    assert replayed[-1] == states[0]
    assert [u["content"][0]["text"] for u in replayed if u["sessionUpdate"] == "agent_message"] == [
        "first",
        "second",
    ]


# ---- crashes leave sessions the model can continue ------------------------------------
def crash_mid_tool_call(crow, scripted_model, *, ask: bool) -> str:
    """Start a tool call (asking first if ``ask``), kill -9 the agent; returns the session."""
    call = ("probe__touch", {"path": "x.txt"}) if ask else ("probe__slow", {"seconds": 60})
    scripted_model.script(ToolCalls(calls=[call]), Text(text="continued"))
    agent = crow(extra=probe_config())
    sid = agent.new_session()
    agent.prompt(sid, "use the tool")
    if ask:
        until_request(agent, "session/request_permission")
    else:
        agent.until_update(lambda u: u.get("status") == "in_progress")
    os.kill(agent.proc.pid, signal.SIGKILL)
    agent.proc.wait()
    return sid


@pytest.mark.parametrize("ask", [False, True], ids=["mid-tool-call", "mid-permission"])
def test_a_crash_mid_tool_call_is_closed_so_the_model_can_continue(crow, scripted_model, ask):
    sid = crash_mid_tool_call(crow, scripted_model, ask=ask)
    later = crow(write=False)
    _, replayed = later.resume(sid, replayFrom={"type": "start"})
    tool_states = [u.get("status") for u in replayed if u["sessionUpdate"] == "tool_call_update"]
    assert tool_states[-1] == "failed"
    assert any("interrupted" in n for n in notes(replayed))
    # How the turn ended, kept in the history (a replay drops state updates but the last).
    [ended] = [u for u in replayed if u["sessionUpdate"] == "_crow/turnEnded"]
    assert ended["stopReason"] == "error" and "interrupted" in ended["error"]["message"]
    assert replayed[-1]["state"] == "idle" and replayed[-1]["stopReason"] == "error"
    seen = later.run_turn(sid, "go on")
    assert seen[-1]["stopReason"] == "end_turn"
    history = scripted_model.requests[-1]["messages"]
    calls = [
        c["id"] for m in history if m["role"] == "assistant" for c in m.get("tool_calls") or []
    ]
    results = [m["tool_call_id"] for m in history if m["role"] == "tool"]
    assert calls and calls == results  # every call the model made has its result
    assert "interrupted" in next(m for m in history if m["role"] == "tool")["content"]


def test_a_reused_pid_does_not_keep_a_dead_turn_running(crow, crow_home, scripted_model):
    scripted_model.script(Text(text="hello"))
    agent = crow()
    sid = agent.new_session()
    agent.close()
    # The owner is a live process (this test) under another start time: a reused pid.
    host, pid, _ = this_process().split(":")
    db = sqlite3.connect(crow_home / "crow.db")
    db.execute(
        "UPDATE sessions SET state = 'running', owner = ?, owner_pid = ?, lease_expires = ?"
        " WHERE id = ?",
        (f"{host}:{pid}:1", int(pid), time.time() + 600, sid),
    )
    db.commit()
    db.close()
    later = crow(write=False)
    _, replayed = later.resume(sid, replayFrom={"type": "start"})
    assert replayed[-1]["stopReason"] == "error"
    assert later.run_turn(sid, "again")[-1]["stopReason"] == "end_turn"


# ---- two processes on one home ---------------------------------------------------------
def test_two_processes_never_run_two_turns_of_one_session(crow, scripted_model):
    scripted_model.script(Hang(), Text(text="second turn"))
    first = crow()
    sid = first.new_session()
    second = crow(write=False)
    second.resume(sid)
    assert "result" in first.prompt(sid, "hold on")[0]
    scripted_model.wait_for_requests(1, timeout=30)
    refused, _ = second.prompt(sid, "me too")
    assert refused["error"]["code"] == -32602
    assert refused["error"]["data"]["reason"] == "busy"
    assert "another Crow process" in refused["error"]["message"]
    first.send({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}})
    assert first.until_update(is_idle)[-1]["params"]["update"]["stopReason"] == "cancelled"
    assert second.run_turn(sid, "now me")[-1]["stopReason"] == "end_turn"


# ---- a stuck store ends the turn visibly and stalls nothing else -----------------------
LOCKER = """
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.read()
db.execute("ROLLBACK")
"""


def test_a_store_locked_mid_turn_ends_the_turn_with_error_and_stalls_nothing(
    crow, crow_home, scripted_model, monkeypatch
):
    monkeypatch.setenv("CROW_STORE_BUSY_TIMEOUT_MS", "2000")
    scripted_model.script(Text(text="one two", chunks=2, delay_s=1.0), Text(text="after"))
    agent = crow()
    sid = agent.new_session()
    agent.prompt(sid, "talk")
    agent.until_update(lambda u: u["sessionUpdate"] == "agent_message_chunk")
    locker = subprocess.Popen(
        [sys.executable, "-c", LOCKER, str(crow_home / "crow.db")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert locker.stdout is not None and locker.stdout.readline() == "locked\n"
        # The turn's next write waits on the lock, off the event loop: a request
        # that needs no store is answered meanwhile.
        agent.write(frame("no/such_method", {}, rid=501))
        seen = messages_until(agent, lambda s: bool(idles(s)))
        assert response(seen, 501)["error"]["code"] == -32601
        assert seen.index(response(seen, 501)) < seen.index(
            next(m for m in seen if m.get("method") and is_idle(m["params"]["update"]))
        )
        idle = idles(seen)[-1]
        assert idle["stopReason"] == "error"
        assert "store" in idle["error"]["message"]
        assert any("store failed" in n for n in notes(updates(seen)))
        # A prompt while the store is locked is refused clearly, not left hanging.
        refused, _ = agent.prompt(sid, "now?")
        assert refused["error"]["code"] == -32603
        assert "store" in refused["error"]["message"]
    finally:
        assert locker.stdin is not None
        locker.stdin.close()
        locker.wait(timeout=10)
        assert locker.stdout is not None
        locker.stdout.close()
    # Once the lock is gone the end of the turn is logged: the session is idle for
    # everyone, and it takes new prompts.
    deadline = time.monotonic() + 20
    while _stored_state(crow_home, sid) != "idle":
        assert time.monotonic() < deadline, "the end of the turn was never logged"
        time.sleep(0.2)
    assert agent.run_turn(sid, "again")[-1]["stopReason"] == "end_turn"


def test_a_reply_the_store_refuses_is_neither_shown_whole_nor_in_the_history(
    crow, crow_home, scripted_model
):
    """A reply's agent_message (and usage) and the model's message are saved in one
    transaction: when it fails, the client is not shown a reply that the model's
    history lacks (and a crash between them cannot make them disagree)."""
    scripted_model.script(Text(text="first answer"), Text(text="second answer"))
    agent = crow()
    sid = agent.new_session()
    agent.run_turn(sid, "first")
    db = sqlite3.connect(crow_home / "crow.db")
    db.execute(
        "CREATE TRIGGER refuse_reply BEFORE INSERT ON transcript"
        " WHEN NEW.body LIKE '%second answer%' BEGIN SELECT RAISE(ABORT, 'disk full'); END"
    )
    db.commit()
    seen = agent.run_turn(sid, "second")
    assert "agent_message_chunk" in kinds(seen)  # the deltas went out as they came
    assert "agent_message" not in kinds(seen) and "usage_update" not in kinds(seen)
    assert seen[-1]["stopReason"] == "error" and "store" in seen[-1]["error"]["message"]
    logged = [
        json.loads(r[0])
        for r in db.execute("SELECT body FROM updates WHERE session_id = ?", (sid,))
    ]
    history = [
        json.loads(r[0])
        for r in db.execute("SELECT body FROM transcript WHERE session_id = ?", (sid,))
    ]
    db.close()
    shown = [u["content"][0]["text"] for u in logged if u["sessionUpdate"] == "agent_message"]
    said = [m["content"] for m in history if m["role"] == "assistant"]
    assert shown == said == ["first answer"]
    assert [m["content"][0]["text"] for m in history if m["role"] == "user"] == ["first", "second"]


def _stored_state(home, sid: str) -> str:
    db = sqlite3.connect(home / "crow.db")
    try:
        return db.execute("SELECT state FROM sessions WHERE id = ?", (sid,)).fetchone()[0]
    finally:
        db.close()


# ---- a cancelled resume leaves the tools running ---------------------------------------
def test_a_resume_cancelled_part_way_leaves_the_session_its_tools(crow, scripted_model, tmp_path):
    scripted_model.set_default(Text(text="ok"))
    agent = crow(extra=probe_config())
    sid = agent.new_session()
    agent.run_turn(sid, "start the tools")
    for round_ in range(5):  # a new set of roots each time: the tools are replaced
        rid = 600 + round_
        params = {"sessionId": sid, "cwd": "/tmp", "additionalDirectories": [str(tmp_path)]}
        if round_ % 2:
            params["additionalDirectories"] = []
        agent.write(
            frame("session/resume", params, rid=rid) + frame("$/cancel_request", {"requestId": rid})
        )
        seen = messages_until(agent, lambda s, rid=rid: any(m.get("id") == rid for m in s))
        answer = response(seen, rid)
        assert "result" in answer or answer["error"]["code"] == -32800
        agent.run_turn(sid, "which tools?")
        offered = [t["function"]["name"] for t in scripted_model.requests[-1].get("tools", [])]
        assert "probe__echo" in offered


@pytest.mark.parametrize("cwd", ['"/tmp/\\ud800"', '"/tmp/a\\u0000b"', '"relative"'])
def test_a_cwd_that_cannot_be_stored_is_invalid_params(crow, cwd):
    agent = crow()
    head = b'{"jsonrpc":"2.0","id":700,"method":"session/new","params":{"cwd":'
    agent.write(head + cwd.encode() + b"}}\n")
    answer, _ = agent.until_response(700)
    assert answer["error"]["code"] == -32602
    assert agent.new_session()  # still serving
