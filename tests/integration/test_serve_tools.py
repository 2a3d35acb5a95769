"""Tools over MCP in ``crow serve``: the ACP tool-call surface, permissions, failures.

A small real MCP server (tests/mcp_probe.py) runs over stdio; the scripted model
asks for its tools.
"""

from __future__ import annotations

import base64
import os
import sys
import time
from pathlib import Path

import pytest
from crow_testing.fakemodel import Text, ToolCalls
from crow_testing.serve_support import is_idle, notes, text_of, updates
from crow_testing.support import ROOT

from crow.acp.errors import INVALID_PARAMS

PROBE = [sys.executable, str(ROOT / "tests" / "mcp_probe.py")]


def probe_config(marker=None, *, builtin="[]", extra="", trusted=True):
    """The probe as a config server, trusted (its tools' crow/kind sets their policy)."""
    args = [PROBE[1]] + (["--marker", str(marker)] if marker else [])
    rendered = ", ".join(f'"{a}"' for a in args)
    return (
        f"[tools]\nbuiltin = {builtin}\n\n[mcp.servers.probe]\n"
        f'command = "{PROBE[0]}"\nargs = [{rendered}]\ntimeout_s = 20\n'
        f"trusted = {str(trusted).lower()}\n\n{extra}"
    )


def tool_updates(seen, call_id=None):
    return [
        u
        for u in seen
        if u["sessionUpdate"] in ("tool_call_update", "tool_call_content_chunk")
        and (call_id is None or u["toolCallId"] == call_id)
    ]


def until_request(agent, method):
    """Messages up to the first request from the agent with ``method``."""
    seen = []
    while True:
        message = agent.recv()
        seen.append(message)
        if message.get("method") == method and "id" in message:
            return seen


def answer(agent, request, outcome):
    agent.send({"jsonrpc": "2.0", "id": request["id"], "result": {"outcome": outcome}})


def selected(option):
    return {"outcome": "selected", "optionId": option}


def test_a_read_tool_runs_without_asking_and_feeds_the_model(crow, scripted_model):
    scripted_model.script(ToolCalls(calls=[("probe__echo", {"text": "ping"})]), Text(text="pong"))
    agent = crow(extra=probe_config())
    sid = agent.new_session()
    seen = agent.run_turn(sid, "use the tool")
    tools = tool_updates(seen)
    first = tools[0]
    assert first["status"] == "pending" and first["kind"] == "read"
    assert first["title"] and first["rawInput"] == {"text": "ping"}
    statuses = [u.get("status") for u in tools if u["sessionUpdate"] == "tool_call_update"]
    assert statuses == ["pending", "in_progress", "completed"]
    chunk = next(u for u in tools if u["sessionUpdate"] == "tool_call_content_chunk")
    assert chunk["content"] == {"type": "content", "content": {"type": "text", "text": "ping"}}
    assert tools[-1]["rawOutput"]["text"] == "ping"
    assert seen[-1]["stopReason"] == "end_turn"
    offered = [t["function"]["name"] for t in scripted_model.requests[0]["tools"]]
    assert "probe__echo" in offered
    history = scripted_model.requests[1]["messages"]
    assert history[-2]["tool_calls"][0]["function"]["name"] == "probe__echo"
    assert history[-1]["role"] == "tool" and history[-1]["content"] == "ping"


def test_an_edit_asks_first_and_reports_a_structured_diff(crow, scripted_model):
    scripted_model.script(
        ToolCalls(calls=[("probe__touch", {"path": "a.txt"})]), Text(text="written")
    )
    agent = crow(extra=probe_config())
    sid = agent.new_session()
    agent.prompt(sid, "write it")
    before = until_request(agent, "session/request_permission")
    request = before[-1]
    params = request["params"]
    assert params["sessionId"] == sid and params["title"]
    assert {o["kind"] for o in params["options"]} >= {
        "allow_once",
        "allow_always",
        "reject_once",
        "reject_always",
    }
    assert updates(before)[-1] == {"sessionUpdate": "state_update", "state": "requires_action"}
    answer(agent, request, selected("allow_once"))
    seen = updates(agent.until_update(is_idle))
    assert seen[0] == {"sessionUpdate": "state_update", "state": "running"}
    diff = next(
        u["content"]
        for u in tool_updates(seen)
        if u["sessionUpdate"] == "tool_call_content_chunk" and u["content"]["type"] == "diff"
    )
    assert diff["changes"] == [{"operation": "add", "path": "/tmp/probe/a.txt", "fileType": "text"}]
    assert diff["patch"]["format"] == "git_patch" and "+new" in diff["patch"]["text"]
    final = [u for u in tool_updates(seen) if u["sessionUpdate"] == "tool_call_update"][-1]
    assert final["status"] == "completed"
    assert final["locations"] == [{"path": "/tmp/probe/a.txt", "line": 1}]


def test_an_fs_edit_is_asked_with_the_diff_it_would_make(crow, scripted_model, tmp_path):
    """The question shows what will happen (issue #30): the edit is worked out first,
    nothing is written before the answer, and a call that has no diff (a probe's
    touch) carries its arguments instead."""
    target = tmp_path / "notes.txt"
    target.write_text("alpha\nbeta\ngamma\n")
    edit = ("fs__edit", {"path": "notes.txt", "old_text": "beta", "new_text": "BETA"})
    touch = ("probe__touch", {"path": "other.txt"})
    scripted_model.script(ToolCalls(calls=[edit]), Text(text="done"), ToolCalls(calls=[touch]))
    agent = crow(extra=probe_config(builtin='["fs"]'))
    sid = agent.new_session(str(tmp_path))
    agent.prompt(sid, "edit it")
    request = until_request(agent, "session/request_permission")[-1]
    asked = request["params"]["subject"]
    [diff] = asked["toolCall"]["content"]
    assert diff["type"] == "diff" and diff["changes"][0]["path"] == str(target)
    assert "-beta\n+BETA\n" in diff["patch"]["text"]
    assert target.read_text() == "alpha\nbeta\ngamma\n"  # asked before, not after
    answer(agent, request, selected("reject_once"))
    agent.until_update(is_idle)
    agent.prompt(sid, "touch it")
    asked = until_request(agent, "session/request_permission")[-1]["params"]["subject"]
    assert asked["toolCall"]["rawInput"] == {"path": "other.txt"}
    assert "content" not in asked["toolCall"]


def test_allow_always_is_not_asked_again(crow, scripted_model):
    call = ToolCalls(calls=[("probe__touch", {"path": "b.txt"})])
    scripted_model.script(call, Text(text="one"), call, Text(text="two"))
    agent = crow(extra=probe_config())
    sid = agent.new_session()
    agent.prompt(sid, "first")
    answer(agent, until_request(agent, "session/request_permission")[-1], selected("allow_session"))
    agent.until_update(is_idle)
    seen = agent.run_turn(sid, "second")  # would block on a question if one were asked
    assert "requires_action" not in [u.get("state") for u in seen]


@pytest.mark.parametrize(
    "outcome",
    [
        selected("reject_once"),
        {"outcome": "cancelled"},
        {"outcome": "_acme_maybe"},
        selected("no-such-option"),
    ],
)
def test_a_rejection_or_an_unknown_answer_does_not_run_the_tool(crow, scripted_model, outcome):
    scripted_model.script(
        ToolCalls(calls=[("probe__touch", {"path": "c.txt"})]), Text(text="ok then")
    )
    agent = crow(extra=probe_config())
    sid = agent.new_session()
    agent.prompt(sid, "write")
    answer(agent, until_request(agent, "session/request_permission")[-1], outcome)
    seen = updates(agent.until_update(is_idle))
    final = [u for u in tool_updates(seen) if u["sessionUpdate"] == "tool_call_update"][-1]
    assert final["status"] == "failed"
    assert "rejected" in scripted_model.requests[1]["messages"][-1]["content"]


def test_cancel_while_asking_withdraws_the_question(crow, scripted_model):
    scripted_model.script(ToolCalls(calls=[("probe__touch", {"path": "d.txt"})]))
    agent = crow(extra=probe_config())
    sid = agent.new_session()
    agent.prompt(sid, "write")
    request = until_request(agent, "session/request_permission")[-1]
    agent.send({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}})
    seen = agent.until_update(is_idle)
    withdrawn = [m for m in seen if m.get("method") == "$/cancel_request"]
    assert withdrawn and withdrawn[0]["params"]["requestId"] == request["id"]
    last = updates(seen)
    assert last[-1]["stopReason"] == "cancelled"
    assert [u for u in tool_updates(last) if u.get("status")][-1]["status"] == "cancelled"
    answer(agent, request, selected("allow_once"))  # too late: ignored
    assert agent.run_turn(sid, "still alive?")[-1]["stopReason"]


def test_command_output_is_shown_in_a_display_terminal(crow, scripted_model):
    scripted_model.script(
        ToolCalls(calls=[("probe__shell", {"command": "make"})]), Text(text="built")
    )
    agent = crow(extra=probe_config(extra='[permissions]\nexecute = "allow"\n'))
    seen = agent.run_turn(agent.new_session(), "build")
    terminal = next(u for u in seen if u["sessionUpdate"] == "terminal_update")
    term_id = terminal["terminalId"]
    assert terminal["command"] == "make" and terminal["cwd"] == "/tmp"
    reference = next(
        u for u in tool_updates(seen) if u["sessionUpdate"] == "tool_call_content_chunk"
    )
    assert reference["content"] == {"type": "terminal", "terminalId": term_id}
    output = b"".join(
        base64.b64decode(u["data"]) for u in seen if u["sessionUpdate"] == "terminal_output_chunk"
    )
    assert output.decode() == "".join(f"line {i} of make\n" for i in range(3))
    exited = [u for u in seen if u["sessionUpdate"] == "terminal_update"][-1]
    assert exited["exitStatus"] == {"exitCode": 3}


def test_tool_calls_of_one_reply_run_concurrently(crow, scripted_model):
    scripted_model.script(
        ToolCalls(calls=[("probe__slow", {"seconds": 0.6}), ("probe__slow", {"seconds": 0.6})]),
        Text(text="both done"),
    )
    agent = crow(extra=probe_config())
    seen = agent.run_turn(agent.new_session(), "wait twice")
    statuses = [
        (u["toolCallId"], u.get("status"))
        for u in tool_updates(seen)
        if u.get("status") in ("in_progress", "completed")
    ]
    # Both were in progress before either completed.
    assert [s for _, s in statuses[:2]] == ["in_progress", "in_progress"]
    tool_messages = [m for m in scripted_model.requests[1]["messages"] if m["role"] == "tool"]
    assert [m["content"] for m in tool_messages] == ["slept 0.6", "slept 0.6"]


def test_cancel_stops_a_running_tool_on_the_server(crow, scripted_model, tmp_path):
    scripted_model.script(ToolCalls(calls=[("probe__slow", {"seconds": 60})]), Text(text="after"))
    agent = crow(extra=probe_config(tmp_path))
    sid = agent.new_session()
    agent.prompt(sid, "sleep")
    agent.until_update(lambda u: u.get("status") == "in_progress")
    started = time.monotonic()
    agent.send({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}})
    seen = updates(agent.until_update(is_idle))
    assert seen[-1]["stopReason"] == "cancelled" and time.monotonic() - started < 5
    assert [u for u in tool_updates(seen) if u.get("status")][-1]["status"] == "cancelled"
    deadline = time.monotonic() + 5
    while not (tmp_path / "cancelled").exists():
        assert time.monotonic() < deadline, "the MCP server never saw the cancellation"
        time.sleep(0.05)
    # The model's next request answers the cancelled call, so the history stays valid.
    scripted_model.script(Text(text="fine"))
    agent.run_turn(sid, "next")
    assert scripted_model.requests[-1]["messages"][-2]["content"].startswith("The tool call was")


def test_a_server_that_dies_is_reported_and_the_session_goes_on(crow, scripted_model):
    scripted_model.script(
        ToolCalls(calls=[("probe__crash", {})]), Text(text="oh no"), Text(text="still here")
    )
    agent = crow(extra=probe_config(extra='[permissions]\nother = "allow"\n'))
    sid = agent.new_session()
    seen = agent.run_turn(sid, "crash it")
    assert any("'probe' stopped working" in n for n in notes(seen))
    final = [u for u in tool_updates(seen) if u["sessionUpdate"] == "tool_call_update"][-1]
    assert final["status"] == "failed"
    assert agent.run_turn(sid, "and now")[-1]["stopReason"] == "end_turn"
    assert "tools" not in scripted_model.requests[-1]  # the dead server's tools are gone


def test_a_server_that_cannot_start_is_reported(crow, scripted_model):
    scripted_model.set_default(Text(text="works without it"))
    broken = '[mcp.servers.broken]\ncommand = "/nonexistent/mcp-server"\n'
    agent = crow(extra=probe_config(extra=broken))
    sid = agent.new_session()
    seen = agent.run_turn(sid, "hello")
    assert any("'broken' failed to start" in n for n in notes(seen))
    assert seen[-1]["stopReason"] == "end_turn"


def test_max_steps_stops_a_tool_loop_with_a_note(crow, scripted_model):
    scripted_model.set_default(ToolCalls(calls=[("probe__echo", {"text": "again"})]))
    agent = crow(extra=probe_config(), max_steps=3)
    seen = agent.run_turn(agent.new_session(), "loop forever")
    assert seen[-1]["stopReason"] == "max_turn_requests"
    assert any("Stopped after 3 model calls" in n for n in notes(seen))
    assert len(scripted_model.requests) == 3


def test_the_client_can_name_mcp_servers(crow, scripted_model):
    scripted_model.script(
        ToolCalls(calls=[("mine__echo", {"text": "from the client"})]), Text(text="done")
    )
    agent = crow(extra="[tools]\nbuiltin = []\n")
    server = {
        "type": "stdio",
        "name": "mine",
        "command": PROBE[0],
        "args": [PROBE[1]],
        "env": [{"name": "X", "value": "1"}],
    }
    response, _ = agent.request("session/new", {"cwd": "/tmp", "mcpServers": [server]})
    sid = response["result"]["sessionId"]
    agent.prompt(sid, "call it")
    # A client-named server is never trusted: its "read" tool asks like "other".
    asked = until_request(agent, "session/request_permission")[-1]
    assert "not marked trusted" in asked["params"]["description"]
    answer(agent, asked, selected("allow_once"))
    seen = updates(agent.until_update(is_idle))
    assert any(u.get("rawOutput", {}).get("text") == "from the client" for u in tool_updates(seen))
    for bad in (
        [server, server],
        [{**server, "type": "sse", "url": "http://x"}],
        [{**server, "command": "relative/path"}],
    ):
        refused, _ = agent.request("session/new", {"cwd": "/tmp", "mcpServers": bad})
        assert refused["error"]["code"] == INVALID_PARAMS


def test_capabilities_advertise_mcp_transports(crow):
    agent = crow(extra="[tools]\nbuiltin = []\n")
    session = agent.initialized["result"]["capabilities"]["session"]
    assert session["mcp"] == {"stdio": {}, "http": {}}


def test_allow_saved_is_remembered_across_sessions_and_processes(crow, scripted_model, crow_home):
    call = ToolCalls(calls=[("probe__touch", {"path": "s.txt"})])
    scripted_model.script(call, Text(text="one"), call, Text(text="two"))
    first = crow(extra=probe_config())
    sid = first.new_session()
    first.prompt(sid, "first")
    answer(first, until_request(first, "session/request_permission")[-1], selected("allow_saved"))
    first.until_update(is_idle)
    assert '"probe__touch" = "allow"' in (crow_home / "permissions.toml").read_text()
    first.close()
    second = crow(write=False)
    seen = second.run_turn(second.new_session(), "second")  # blocks if it asks
    assert "requires_action" not in [u.get("state") for u in seen]


def test_the_built_in_fs_server_edits_inside_the_session_and_refuses_outside(
    crow, scripted_model, tmp_path
):
    project = tmp_path / "project"
    project.mkdir()
    (tmp_path / "secret.txt").write_text("do not read")
    scripted_model.script(
        ToolCalls(
            calls=[
                ("fs__write", {"path": "notes.md", "content": "# Notes\n"}),
                ("fs__read", {"path": "../secret.txt"}),
            ]
        ),
        Text(text="done"),
    )
    agent = crow(extra='[tools]\nbuiltin = ["fs"]\n\n[permissions]\nedit = "allow"\n')
    sid = agent.new_session(str(project))
    seen = agent.run_turn(sid, "write notes, then peek outside")
    assert (project / "notes.md").read_text() == "# Notes\n"
    finals = {
        u["toolCallId"]: u
        for u in tool_updates(seen)
        if u["sessionUpdate"] == "tool_call_update" and u.get("status") in ("completed", "failed")
    }
    assert sorted(u["status"] for u in finals.values()) == ["completed", "failed"]
    diff = next(
        u["content"]
        for u in tool_updates(seen)
        if u["sessionUpdate"] == "tool_call_content_chunk" and u["content"]["type"] == "diff"
    )
    assert diff["changes"][0]["path"] == str(project / "notes.md")
    tool_answers = [
        m["content"] for m in scripted_model.requests[1]["messages"] if m["role"] == "tool"
    ]
    assert "do not read" not in " ".join(tool_answers)


def test_the_built_in_terminal_streams_output_and_cancel_kills_the_command(
    crow, scripted_model, tmp_path
):
    pidfile = tmp_path / "pid"
    scripted_model.script(
        ToolCalls(calls=[("terminal__run", {"command": "echo first; echo second >&2"})]),
        Text(text="ran it"),
        ToolCalls(calls=[("terminal__run", {"command": f"echo $$ > {pidfile}; sleep 60"})]),
    )
    agent = crow(extra='[tools]\nbuiltin = ["terminal"]\n\n[permissions]\nexecute = "allow"\n')
    sid = agent.new_session(str(tmp_path))
    seen = agent.run_turn(sid, "run it")
    output = b"".join(
        base64.b64decode(u["data"]) for u in seen if u["sessionUpdate"] == "terminal_output_chunk"
    )
    assert b"first" in output and b"second" in output
    assert [u for u in seen if u["sessionUpdate"] == "terminal_update"][-1]["exitStatus"] == {
        "exitCode": 0
    }

    agent.prompt(sid, "run forever")
    deadline = time.monotonic() + 10
    while not pidfile.exists() or not pidfile.read_text().strip():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    pid = int(pidfile.read_text())
    agent.send({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}})
    assert updates(agent.until_update(is_idle))[-1]["stopReason"] == "cancelled"
    deadline = time.monotonic() + 5
    while _alive(pid):
        assert time.monotonic() < deadline, "the cancelled command is still running"
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split()[2] != "Z"  # a zombie is dead, just not reaped
    except FileNotFoundError:
        return False


def test_an_untrusted_servers_read_only_tool_still_asks(crow, scripted_model):
    scripted_model.script(ToolCalls(calls=[("probe__echo", {"text": "x"})]), Text(text="no"))
    agent = crow(extra=probe_config(trusted=False))
    sid = agent.new_session()
    agent.prompt(sid, "use the tool")
    seen = until_request(agent, "session/request_permission")
    shown = tool_updates(
        [m["params"]["update"] for m in seen if m.get("method") == "session/update"]
    )
    assert shown[0]["kind"] == "read"  # shown as it describes itself, decided as "other"
    answer(agent, seen[-1], selected("reject_once"))
    done = updates(agent.until_update(is_idle))
    assert done[-1]["stopReason"] == "end_turn"
    assert scripted_model.requests[1]["messages"][-1]["content"].startswith("The user rejected")


@pytest.mark.parametrize("option", ["allow_once", "reject_once"])
def test_ask_client_servers_asks_before_starting_one(crow, scripted_model, option):
    scripted_model.script(Text(text="ok"))
    agent = crow(extra="[tools]\nbuiltin = []\n\n[mcp]\nask_client_servers = true\n")
    server = {"type": "stdio", "name": "mine", "command": PROBE[0], "args": [PROBE[1]], "env": []}
    new = {"cwd": "/tmp", "mcpServers": [server]}
    sid = agent.request("session/new", new)[0]["result"]["sessionId"]
    # The servers start at the first turn (an idle session runs none): it asks then.
    prompt = {"sessionId": sid, "prompt": [{"type": "text", "text": "hello"}]}
    agent.send({"jsonrpc": "2.0", "id": "prompt", "method": "session/prompt", "params": prompt})
    seen = until_request(agent, "session/request_permission")
    asked = seen[-1]["params"]
    assert asked["subject"]["type"] == "command" and PROBE[1] in asked["subject"]["command"]
    assert asked["subject"]["cwd"] == "/tmp"
    answer(agent, seen[-1], selected(option))
    agent.until_update(is_idle)
    offered = [t["function"]["name"] for t in scripted_model.requests[0].get("tools", [])]
    assert ("mine__echo" in offered) == (option == "allow_once")


def test_a_result_over_the_cap_reaches_the_model_cut_and_is_kept_whole(
    crow, scripted_model, crow_home, tmp_path
):
    """1 MiB from a tool, 64 KiB allowed: the model, the client and the log get the
    beginning and a note; the whole is in a private file the session's fs tools read."""
    scripted_model.script(ToolCalls(calls=[("probe__big", {"kib": 1024})]), Text(text="it is long"))
    agent = crow(
        extra=probe_config(builtin='["fs"]', extra="").replace(
            "[tools]\n", "[tools]\nmax_result_kib = 64\n", 1
        )
    )
    sid = agent.new_session(str(tmp_path))
    seen = agent.run_turn(sid, "get the big output")
    assert seen[-1]["stopReason"] == "end_turn"
    told = scripted_model.requests[1]["messages"][-1]["content"]
    assert told.startswith("line 000000 ") and len(told.encode()) < 65 * 1024
    assert "[Crow cut this result: 1.0 MiB is over the 64 KiB limit" in told
    saved = crow_home / "tool-output" / sid
    [kept] = list(saved.iterdir())
    assert kept.stat().st_mode & 0o777 == 0o600
    assert kept.read_text().count("\n") == 1024 * 16
    assert str(kept) in told
    shown = [
        u["content"]["content"]["text"]
        for u in tool_updates(seen)
        if u["sessionUpdate"] == "tool_call_content_chunk"
    ]
    assert shown == [told]
    answer, replayed = agent.resume(sid, str(tmp_path), replayFrom={"type": "start"})
    assert "result" in answer, answer
    logged = str(replayed)
    assert "line 000000" in logged and "line 001100" not in logged
    # The session's own fs tools read the kept file.
    scripted_model.script(
        ToolCalls(calls=[("fs__read", {"path": str(kept), "offset": 16000, "limit": 2})]),
        Text(text="read it"),
    )
    agent.run_turn(sid, "read the end of it")
    assert "line 015999" in scripted_model.requests[-1]["messages"][-1]["content"]


def probes_of(pid):
    """The probe servers running under the crow process ``pid`` (their own process groups)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                status = Path(f"/proc/{entry}/status").read_text()
                command = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            ppid = next(line for line in status.splitlines() if line.startswith("PPid:"))
            if int(ppid.split()[1]) == pid and b"mcp_probe" in command:
                found.append(int(entry))
    return found


def test_an_idle_session_stops_its_tool_servers_and_its_next_turn_starts_them(crow, scripted_model):
    """[server] unload_idle_s: after a quiet spell the session's servers are gone; the
    next turn has the same tools, and a resume replays everything."""
    scripted_model.script(
        ToolCalls(calls=[("probe__echo", {"text": "one"})]),
        Text(text="first"),
        ToolCalls(calls=[("probe__echo", {"text": "two"})]),
        Text(text="second"),
    )
    agent = crow(extra=probe_config(extra="[server]\nunload_idle_s = 0.3\n"))
    sid = agent.new_session()
    assert probes_of(agent.proc.pid) == []  # nothing runs before the first turn
    first = agent.run_turn(sid, "echo one")
    assert first[-1]["stopReason"] == "end_turn" and probes_of(agent.proc.pid)
    deadline = time.monotonic() + 10
    while probes_of(agent.proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert probes_of(agent.proc.pid) == []  # stopped while the session idled
    second = agent.run_turn(sid, "echo two")
    assert second[-1]["stopReason"] == "end_turn"
    assert [t["function"]["name"] for t in scripted_model.requests[2]["tools"]] == [
        t["function"]["name"] for t in scripted_model.requests[0]["tools"]
    ]
    results = [u for u in tool_updates(second) if u.get("status") == "completed"]
    assert results, second
    _, replayed = agent.resume(sid, replayFrom={"type": "start"})
    assert text_of(replayed) == "firstsecond"
    done = [u for u in tool_updates(replayed) if u.get("status") == "completed"]
    assert len(done) == 2
