"""One ``crow serve``'s sessions share its built-in servers and stay apart.

Two sessions in different directories call fs, terminal and memory tools (the scripted
model asks for them); the process made one server of each kind (its log says so once
per kind), yet each session reached its own files, jobs and memories only, and closing
one stopped its own background job and nothing of the other's.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from crow_testing.fakemodel import Text, ToolCalls
from crow_testing.serve_support import memory_turn as turn

CONFIG = (
    '[tools]\nbuiltin = ["fs", "terminal", "web", "memory"]\n\n'
    '[permissions]\nedit = "allow"\nexecute = "allow"\n\n'
    '[memory]\nembedder = "none"\nauto_recall = false\n'
)


def answers(request: dict) -> dict[str, str]:
    """The tool results a model request carries, by the tool's name."""
    names = {
        call["id"]: call["function"]["name"]
        for message in request["messages"]
        if message["role"] == "assistant"
        for call in message.get("tool_calls") or ()
    }
    return {
        names[m["tool_call_id"]]: m["content"] for m in request["messages"] if m["role"] == "tool"
    }


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def wait_dead(pid: int, within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while alive(pid):
        assert time.monotonic() < deadline, f"pid {pid} still runs"
        time.sleep(0.05)


def test_two_sessions_share_one_server_of_each_kind_and_stay_apart(
    crow, scripted_model, tmp_path, crow_home
):
    a_dir, b_dir = tmp_path / "a", tmp_path / "b"
    for folder in (a_dir, b_dir):
        (folder / ".git").mkdir(parents=True)  # each its own project
    (a_dir / "only-a.txt").write_text("secret of a\n")
    (b_dir / "only-b.txt").write_text("secret of b\n")
    pidfile = tmp_path / "b-job.pid"
    scripted_model.script(
        # session A's turn
        ToolCalls(
            calls=[
                ("fs__write", {"path": "notes.md", "content": "by a\n"}),
                ("fs__read", {"path": str(b_dir / "only-b.txt")}),
                ("terminal__start", {"command": "sleep 60"}),
                ("memory__remember", {"text": "alpha fact of a", "scope": "project"}),
            ]
        ),
        Text(text="a done"),
        # session B's turn
        ToolCalls(
            calls=[
                ("fs__list", {"path": "."}),
                ("fs__grep", {"pattern": "secret", "path": str(a_dir)}),
                ("terminal__list_processes", {}),
                ("terminal__stop", {"id": "bg_1"}),
                ("memory__list_memories", {}),
            ]
        ),
        Text(text="b done"),
        ToolCalls(calls=[("terminal__run", {"command": f"echo $$ > {pidfile}; pwd; sleep 60"})]),
    )
    agent = crow(extra=CONFIG)
    sid_a = agent.new_session(str(a_dir))
    sid_b = agent.new_session(str(b_dir))

    seen_a = turn(agent, sid_a, "work in a")
    assert seen_a[-1]["stopReason"] == "end_turn"
    got_a = answers(scripted_model.requests[1])
    assert (a_dir / "notes.md").read_text() == "by a\n"
    assert "outside the allowed roots" in got_a["fs__read"]
    assert "secret of b" not in got_a["fs__read"]
    assert "Started bg_1" in got_a["terminal__start"]
    assert "alpha fact of a" not in got_a["memory__remember"]  # it answers with an id

    seen_b = turn(agent, sid_b, "look around in b")
    assert seen_b[-1]["stopReason"] == "end_turn"
    got_b = answers(scripted_model.requests[3])
    assert "only-b.txt" in got_b["fs__list"] and "only-a.txt" not in got_b["fs__list"]
    assert "notes.md" not in got_b["fs__list"]
    assert "outside the allowed roots" in got_b["fs__grep"]
    assert got_b["terminal__list_processes"] == "No background processes."
    assert "no background process with id 'bg_1'" in got_b["terminal__stop"]
    assert "alpha fact of a" not in got_b["memory__list_memories"]
    assert json.loads(got_b["memory__list_memories"])["memories"] == []

    # A's job runs on: B could neither see nor stop it.
    job = job_pid(a_dir)
    assert alive(job)

    # One server object of each kind served both sessions.
    log = (crow_home / "logs" / "crow.log").read_text()
    for kind in ("fs", "terminal", "web", "memory"):
        assert log.count(f"built-in server {kind} made") == 1, kind

    # Closing A stops A's job; B's tools go on working.
    response, _ = agent.request("session/close", {"sessionId": sid_a})
    assert "result" in response, response
    wait_dead(job)
    response, _ = agent.prompt(sid_b, "run in b")
    assert "result" in response, response
    deadline = time.monotonic() + 15
    while not pidfile.exists() or not pidfile.read_text().strip():
        assert time.monotonic() < deadline, "B's command did not start"
        time.sleep(0.05)
    b_pid = int(pidfile.read_text())
    assert Path(f"/proc/{b_pid}/cwd").resolve() == b_dir.resolve()
    agent.send({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid_b}})


def job_pid(cwd: Path) -> int:
    """The pid of the ``sleep 60`` running in ``cwd`` (A's background job)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes()
            where = (entry / "cwd").resolve()
        except OSError:
            continue
        if command.startswith(b"sleep\x0060") and where == cwd.resolve():
            return int(entry.name)
    raise AssertionError(f"no sleep 60 runs in {cwd}")
