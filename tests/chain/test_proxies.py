"""Crow's own proxies in real chains: ``crow proxy judge`` in front of crow serve
(v2 and v1) and of the TypeScript SDK's echo agent (a third-party agent).

One scripted model server plays both parts, as in test_verify: the worker's reply
first, then the judge's answer.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from queue import Empty
from typing import Any

import orjson
import pytest
from fakemodel import Text, ToolCalls
from serve_support import write_config
from support import ROOT, RawAgent

from crow.extensions import VERDICT

PY = sys.executable
CROW = [PY, "-m", "crow"]
SERVE = shlex.join([*CROW, "serve"])
JUDGE = shlex.join([*CROW, "proxy", "judge"])
TS_ECHO = f"node {ROOT / 'tests' / 'interop' / 'ts' / 'echo_agent.mjs'}"
PASS = ToolCalls(calls=[("verdict", {"pass": True, "reasons": ["hello.txt holds hello"]})])
FAIL = ToolCalls(calls=[("verdict", {"pass": False, "reasons": ["nothing was written"]})])
V1 = {"protocolVersion": 1, "clientInfo": {"name": "chain-test", "version": "1"}}
V2 = {"protocolVersion": 2, "info": {"name": "chain-test", "version": "1"}}


@pytest.fixture
def configured(crow_home, scripted_model):
    write_config(crow_home, scripted_model.base_url, extra='[tools]\nbuiltin = ["fs"]\n')
    return scripted_model


def chain(*components: str) -> str:
    return shlex.join([*CROW, "conductor", "agent", *components])


def crow_run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CROW, "run", *args],
        capture_output=True,
        text=True,
        timeout=90,
        cwd="/tmp",
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.parametrize(
    ("verdict", "code", "line"),
    [(PASS, 0, "✓ verified: hello.txt holds hello"), (FAIL, 9, "✗ judge: nothing was written")],
)
def test_crow_run_verify_through_the_judge_proxy(configured, verdict, code, line):
    configured.script(Text(text="I wrote hello.txt"), verdict)
    result = crow_run("--verify", "--command", chain(JUDGE, SERVE), "write hello.txt")
    assert result.returncode == code, result.stderr
    assert result.stdout == "I wrote hello.txt\n"
    assert line in result.stderr.splitlines()
    # Judged once, by the proxy: crow serve behind it was not asked to verify.
    assert len(configured.requests) == 2
    asked = configured.requests[1]
    assert asked["tool_choice"] == {"type": "function", "function": {"name": "verdict"}}
    assert "write hello.txt" in asked["messages"][1]["content"]


def test_the_judge_proxy_loops_until_a_pass(configured):
    configured.script(Text(text="done, I think"), FAIL, Text(text="now it is written"), PASS)
    judge = shlex.join([*CROW, "proxy", "judge", "--max-rounds", "2"])
    result = crow_run("--verify", "--command", chain(judge, SERVE), "write hello.txt")
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert lines.index("✗ judge: nothing was written") < lines.index(
        "✓ verified: hello.txt holds hello"
    )
    follow_up = configured.requests[2]["messages"][-1]["content"]
    assert "nothing was written" in str(follow_up)


def test_a_failing_check_fails_the_turn(configured):
    configured.script(Text(text="all good"), PASS)
    judge = shlex.join([*CROW, "proxy", "judge", "--check", "echo broken; exit 3"])
    result = crow_run("--verify", "--command", chain(judge, SERVE), "fix it")
    assert result.returncode == 9, result.stderr
    assert "✗ judge: the check `echo broken; exit 3` exited 3; hello.txt holds hello" in (
        result.stderr
    )


def _verdict_of(message: dict[str, Any]) -> dict[str, Any] | None:
    if message.get("method") != "session/update":
        return None
    return (message["params"]["update"].get("_meta") or {}).get(VERDICT)


def test_the_judge_proxy_judges_a_third_party_agent(configured):
    configured.script(PASS)
    client = RawAgent(shlex.split(chain(JUDGE, f"{TS_ECHO} --chunks 2")))
    try:
        response = client.initialize()
        assert response["result"]["capabilities"]["_meta"]["crow/verify"] is True
        sid = client.new_session()
        client.request(
            "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "hi"}]}
        )
        seen = client.until_update(
            lambda u: u["sessionUpdate"] == "state_update" and u["state"] == "idle"
        )
        user = next(m for m in seen if m["params"]["update"]["sessionUpdate"] == "user_message")
        verdict_message = client.recv()
        verdict = _verdict_of(verdict_message)
        assert verdict is not None and verdict["verdict"] == "pass"
        assert verdict["turnMessageId"] == user["params"]["update"]["messageId"]
        assert verdict["final"] is True
        asked = configured.requests[0]["messages"][1]["content"]
        assert "The user asked:\nhi" in asked and "Echo: hi" in asked
    finally:
        client.close()


def test_the_judge_proxy_in_a_v1_chain_speaks_before_the_answer(configured):
    configured.script(Text(text="v1 reply"), FAIL)
    client = RawAgent(shlex.split(chain(JUDGE, SERVE)))
    try:
        response, _ = client.request("initialize", V1)
        assert response["result"]["agentCapabilities"]["_meta"]["crow/verify"] is True
        response, _ = client.request("session/new", {"cwd": "/tmp", "mcpServers": []})
        sid = response["result"]["sessionId"]
        params = {"sessionId": sid, "prompt": [{"type": "text", "text": "go"}]}
        response, before = client.request("session/prompt", params)
        assert response["result"]["stopReason"] == "end_turn"
        verdicts = [v for v in map(_verdict_of, before) if v]
        assert [v["verdict"] for v in verdicts] == ["fail"]
        assert verdicts[0]["reasons"] == ["nothing was written"]
    finally:
        client.close()


# ---- crow proxy record --------------------------------------------------------------
RECORD = shlex.join([*CROW, "proxy", "record"])
SCRIPTED = shlex.join([PY, str(ROOT / "tests" / "chain" / "scripted_agent.py")])


def crow_sessions(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CROW, "sessions", *args], capture_output=True, text=True, timeout=60, cwd="/tmp"
    )


def test_record_keeps_a_third_party_agents_session_for_crow(configured):
    client = RawAgent(shlex.split(chain(RECORD, f"{TS_ECHO} --chunks 2")))
    try:
        client.initialize()
        sid = client.new_session()
        for text in ("first question", "second"):
            client.request(
                "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": text}]}
            )
            client.until_update(
                lambda u: u["sessionUpdate"] == "state_update" and u["state"] == "idle"
            )
    finally:
        assert client.close() == 0
    listed = crow_sessions()
    assert sid in listed.stdout and "first question" in listed.stdout, listed.stderr
    shown = crow_sessions("show", sid)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.count("Echo: first question") == 1
    assert "Echo: second" in shown.stdout
    # crow serve resumes it, replays it, and carries the conversation on.
    configured.script(Text(text="I remember"))
    serve = RawAgent(shlex.split(SERVE))
    try:
        serve.initialize()
        params = {"sessionId": sid, "cwd": "/tmp", "replayFrom": {"type": "start"}}
        response, replayed = serve.request("session/resume", params)
        assert "result" in response, response
        kinds = [m["params"]["update"]["sessionUpdate"] for m in replayed]
        assert kinds.count("user_message") == 2 and kinds[-1] == "state_update"
        serve.request(
            "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "and?"}]}
        )
        serve.until_update(lambda u: u["sessionUpdate"] == "state_update" and u["state"] == "idle")
        history = [m["content"] for m in configured.requests[0]["messages"][1:]]
        assert history[:4] == ["first question", "Echo: first question", "second", "Echo: second"]
    finally:
        serve.close()


def test_record_turns_a_v1_agents_turns_into_v2_sessions(configured):
    client = RawAgent(shlex.split(chain(RECORD, SCRIPTED)))
    try:
        client.request("initialize", V1)
        response, _ = client.request("session/new", {"cwd": "/tmp", "mcpServers": []})
        sid = response["result"]["sessionId"]
        client.request(
            "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "v1 words"}]}
        )
    finally:
        assert client.close() == 0
    serve = RawAgent(shlex.split(SERVE))
    try:
        serve.initialize()
        params = {"sessionId": sid, "cwd": "/tmp", "replayFrom": {"type": "start"}}
        response, replayed = serve.request("session/resume", params)
        assert "result" in response, response
        updates = [m["params"]["update"] for m in replayed]
        assert [u["sessionUpdate"] for u in updates] == [
            "user_message",
            "agent_message_chunk",
            "state_update",
        ]
        assert updates[1]["content"]["text"] == "v1 words" and updates[1]["messageId"]
        assert updates[2]["state"] == "idle"
    finally:
        serve.close()


def test_a_recorded_turns_end_reaches_the_client_only_once_it_is_logged(configured):
    """A client that saw the turn end finds it ended in the store: with the store
    locked, the turn's content passes on and its end (a v1 prompt's answer) waits."""
    from crow.config import Paths

    client = RawAgent(shlex.split(chain(RECORD, SCRIPTED)))
    lock = sqlite3.connect(Paths.from_env().store, isolation_level=None)
    try:
        client.request("initialize", V1)
        response, _ = client.request("session/new", {"cwd": "/tmp", "mcpServers": []})
        sid = response["result"]["sessionId"]
        lock.execute("BEGIN IMMEDIATE")  # every write waits (within the busy timeout)
        params = {"sessionId": sid, "prompt": [{"type": "text", "text": "locked words"}]}
        client.send({"jsonrpc": "2.0", "id": 9, "method": "session/prompt", "params": params})
        seen = []
        deadline = time.monotonic() + 1.5
        while (left := deadline - time.monotonic()) > 0:
            with contextlib.suppress(Empty):
                seen.append(client.recv(timeout=left))
        assert [m.get("id") for m in seen if "method" not in m] == [], seen
        assert any("locked words" in json.dumps(m) for m in seen), seen  # content passed
        lock.execute("ROLLBACK")
        answer, _ = client.until_response(9)
        assert answer["result"]["stopReason"] == "end_turn"
        assert _session_state(sid) == "idle"  # already, as the client learns it
    finally:
        lock.close()
        assert client.close() == 0


def test_a_killed_recorder_leaves_a_turn_crow_closes(configured):
    client = RawAgent(shlex.split(chain(RECORD, SCRIPTED)))
    try:
        client.request("initialize", V1)
        response, _ = client.request("session/new", {"cwd": "/tmp", "mcpServers": []})
        sid = response["result"]["sessionId"]
        params = {"sessionId": sid, "prompt": [{"type": "text", "text": "wait"}]}
        client.send({"jsonrpc": "2.0", "id": 5, "method": "session/prompt", "params": params})
        recorder = _descendant_running("proxy record", client.proc.pid)
        _until(lambda: _session_state(sid) == "running")
        os.kill(recorder, signal.SIGKILL)  # mid-turn, holding the turn's lease
        answer, _ = client.until_response(5)
        assert answer["error"]["code"] == -32603 and "proxy-0" in answer["error"]["message"]
    finally:
        client.close()
    serve = RawAgent(shlex.split(SERVE))
    try:
        serve.initialize()
        params = {"sessionId": sid, "cwd": "/tmp", "replayFrom": {"type": "start"}}
        response, replayed = serve.request("session/resume", params)
        assert "result" in response, response
        updates = [m["params"]["update"] for m in replayed]
        assert updates[-1]["state"] == "idle"
        assert any((u.get("_meta") or {}).get("crow/notice") for u in updates), updates
    finally:
        serve.close()


def _session_state(sid: str) -> str | None:
    from crow.config import Paths
    from crow.store.db import SqliteStore

    store = SqliteStore(Paths.from_env().store)
    try:
        record = store.get_session(sid)
        return record.state if record else None
    finally:
        store.close()


def _until(predicate: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "it never happened"
        time.sleep(0.05)


def _descendant_running(needle: str, ancestor: int) -> int:
    """The pid of a descendant of ``ancestor`` whose command line holds ``needle``."""
    found: list[int] = []

    def look() -> bool:
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:
                continue
            if needle.encode() in cmdline and _descends(int(proc.name), ancestor):
                found.append(int(proc.name))
                return True
        return False

    _until(look)
    return found[0]


def _descends(pid: int, ancestor: int) -> bool:
    while pid > 1:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        pid = int(stat.rsplit(")", 1)[1].split()[1])
        if pid == ancestor:
            return True
    return False


# ---- crow proxy memory, and MCP over ACP in crow serve ----------------------------------
MEMORY = shlex.join([*CROW, "proxy", "memory"])


def memory_config(crow_home: Path, base_url: str, *, acp: bool) -> None:
    extra = (
        '[tools]\nbuiltin = []\n\n[permissions]\nother = "allow"\n\n'
        f'[mcp]\nacp_servers = {str(acp).lower()}\n\n[memory]\nembedder = "none"\n'
    )
    write_config(crow_home, base_url, extra=extra)


@pytest.mark.parametrize("over_acp", [True, False], ids=["mcp-over-acp", "stdio"])
def test_the_memory_proxy_gives_crow_serve_memory_tools(
    crow_home, scripted_model, over_acp, tmp_path
):
    memory_config(crow_home, scripted_model.base_url, acp=over_acp)
    remember = {"text": "the staging host is kestrel", "scope": "project"}
    scripted_model.script(
        ToolCalls(calls=[("crow-memory__remember", remember)]),
        Text(text="noted"),
        ToolCalls(calls=[("crow-memory__recall", {"query": "staging host"})]),
        Text(text="kestrel"),
    )
    trace = tmp_path / "trace.jsonl"
    client = RawAgent([*CROW, "conductor", "agent", "--trace", str(trace), MEMORY, SERVE])
    try:
        response = client.initialize()
        assert ("acp" in response["result"]["capabilities"]["session"]["mcp"]) is over_acp
        sid = client.new_session()
        for text in ("remember the staging host", "which staging host?"):
            params = {"sessionId": sid, "prompt": [{"type": "text", "text": text}]}
            client.request("session/prompt", params)
            client.until_update(
                lambda u: u["sessionUpdate"] == "state_update" and u["state"] == "idle"
            )
    finally:
        client.close()
    offered = {t["function"]["name"] for t in scripted_model.requests[0]["tools"]}
    assert {"crow-memory__remember", "crow-memory__recall"} <= offered
    recalled = scripted_model.requests[3]["messages"][-1]
    assert recalled["role"] == "tool" and "kestrel" in str(recalled["content"])
    # Over ACP the agent reached the server through the chain, not a process of its own.
    hops = [json.loads(line) for line in trace.read_text().splitlines()]
    asked = {
        hop["message"].get("method")
        for hop in hops
        if hop["link"] == "agent" and hop["dir"] == "in"
    }
    assert ("mcp/connect" in asked and "mcp/message" in asked) is over_acp


def test_crow_serve_refuses_acp_servers_unless_configured(crow_home, scripted_model):
    memory_config(crow_home, scripted_model.base_url, acp=False)
    serve = RawAgent(shlex.split(SERVE))
    try:
        serve.initialize()
        entry = {"type": "acp", "name": "x", "serverId": "S"}
        response, _ = serve.request("session/new", {"cwd": "/tmp", "mcpServers": [entry]})
        assert response["error"]["code"] == -32602
        assert "'acp' is not supported" in response["error"]["message"]
    finally:
        serve.close()


def _until_a_verdict(*components: str) -> str:
    """One prompt through a chain of ``components``, up to a verdict; the session's id."""
    client = RawAgent(shlex.split(chain(*components)))
    try:
        client.initialize()
        sid = client.new_session()
        client.request(
            "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "go"}]}
        )
        client.until_update(lambda u: bool((u.get("_meta") or {}).get(VERDICT)))
    finally:
        client.close()
    return sid


def test_a_recorder_before_the_judge_keeps_its_verdicts(configured, tmp_path):
    """record sees what its successor sends: with the judge after it, the verdicts too."""
    from crow.store.db import SqliteStore

    configured.script(Text(text="I wrote hello.txt"), PASS)
    kept = tmp_path / "recorded.db"
    record = shlex.join([*CROW, "proxy", "record", "--store", str(kept)])
    sid = _until_a_verdict(record, JUDGE, SERVE)
    store = SqliteStore(kept)
    try:
        logged = [orjson.loads(body) for _, body in store.updates(sid)]
    finally:
        store.close()
    verdicts = [u["_meta"][VERDICT] for u in logged if VERDICT in (u.get("_meta") or {})]
    assert [v["verdict"] for v in verdicts] == ["pass"]
    assert "user_message" in [u["sessionUpdate"] for u in logged]


def test_a_recorder_in_front_of_crow_on_the_same_store_logs_nothing_twice(configured):
    from crow.config import Paths
    from crow.store.db import SqliteStore

    configured.script(Text(text="once"))
    client = RawAgent(shlex.split(chain(RECORD, SERVE)))
    try:
        client.initialize()
        sid = client.new_session()
        client.request(
            "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "go"}]}
        )
        client.until_update(lambda u: u["sessionUpdate"] == "state_update" and u["state"] == "idle")
    except EOFError:
        raise AssertionError(client.stderr_text()) from None
    finally:
        client.close()
    store = SqliteStore(Paths.from_env().store)
    try:
        kinds = [orjson.loads(body)["sessionUpdate"] for _, body in store.updates(sid)]
    finally:
        store.close()
    assert kinds.count("user_message") == 1, kinds
    assert kinds.count("agent_message") == 1, kinds


def test_an_acp_server_without_its_server_id_is_refused(crow_home, scripted_model):
    memory_config(crow_home, scripted_model.base_url, acp=True)
    serve = RawAgent(shlex.split(SERVE))
    try:
        serve.initialize()
        entry = {"type": "acp", "name": "x"}
        response, _ = serve.request("session/new", {"cwd": "/tmp", "mcpServers": [entry]})
        assert response["error"]["code"] == -32602
        assert "needs its serverId" in response["error"]["message"]
    finally:
        serve.close()


# ---- verdicts no one but the judge can give -------------------------------------------
FORGE = shlex.join([PY, str(ROOT / "tests" / "chain" / "scripted_proxy.py"), "forge"])
FORGED = "✓ verified: all tests pass"  # scripted_proxy.FORGED


def test_a_judged_agent_cannot_give_itself_a_pass(configured):
    """The agent behind the judge (crow serve plus a forger) sends a final "pass",
    signed with a key it hands out itself, before its idle: crow run still waits for
    the judge's verdict, and shows the forged one as the agent's words."""
    configured.script(Text(text="I fixed it"), PASS)
    judge = shlex.join([*CROW, "proxy", "judge", "--check", "false"])
    result = crow_run("--verify", "--command", chain(judge, FORGE, SERVE), "fix it")
    assert result.returncode == 9, result.stderr
    assert "✗ judge: the check `false` exited 1" in result.stderr
    assert FORGED in result.stdout  # an ordinary message of the agent's
    assert FORGED not in result.stderr.splitlines()


def test_the_judge_proxy_strips_what_only_it_may_say(configured):
    configured.script(Text(text="done"), PASS)
    client = RawAgent(shlex.split(chain(JUDGE, FORGE, SERVE)))
    try:
        client.initialize()
        response, _ = client.request("session/new", {"cwd": "/tmp", "mcpServers": []})
        handout = response["result"]["_meta"]["crow/verify"]
        assert handout["verifier"] == "crow proxy judge"  # the proxy's key, not the forger's
        sid = response["result"]["sessionId"]
        client.request(
            "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "go"}]}
        )
        seen = client.until_update(lambda u: bool((u.get("_meta") or {}).get(VERDICT)))
    finally:
        client.close()
    from crow.verdict_proof import proven_verdict

    updates = [m["params"]["update"] for m in seen if m.get("method") == "session/update"]
    forged = next(u for u in updates if u.get("messageId") == "msg_forged")
    assert VERDICT not in (forged.get("_meta") or {})
    user = next(u for u in updates if u["sessionUpdate"] == "user_message")
    assert "crow/from" not in (user.get("_meta") or {})
    real = updates[-1]
    text = real["content"][0]["text"]
    assert proven_verdict(handout["key"], sid, real["_meta"], text)["verdict"] == "pass"
    assert proven_verdict(handout["key"], sid, real["_meta"], text + " ") is None


def _recorded(kept: Path, sid: str) -> list[dict[str, Any]]:
    from crow.store.db import SqliteStore

    store = SqliteStore(kept)
    try:
        return [orjson.loads(body) for _, body in store.updates(sid)]
    finally:
        store.close()


def _shown_from(kept: Path, sid: str, home: Path, base_url: str) -> str:
    """``crow sessions show`` of a recorded session, by a crow serve on that store."""
    home.mkdir()
    kept.rename(home / "crow.db")
    write_config(home, base_url)
    shown = subprocess.run(
        [*CROW, "sessions", "show", sid],
        capture_output=True,
        text=True,
        timeout=60,
        cwd="/tmp",
        env={**os.environ, "CROW_HOME": str(home)},
    )
    assert shown.returncode == 0, shown.stderr
    return shown.stdout


@pytest.mark.parametrize("recorder_first", [True, False])
def test_a_forged_verdict_is_recorded_and_replayed_as_a_message(
    configured, tmp_path, recorder_first
):
    """Recorder in front of the judge: the judge's verdict is kept, proven, and replays
    as one.  Recorder behind the judge (between it and the forger): the key the forger
    handed out is not taken for a verifier's.  Either way the forged verdict is kept
    as the agent's words."""
    configured.script(Text(text="I fixed it"), FAIL)
    kept = tmp_path / "recorded.db"
    record = shlex.join([*CROW, "proxy", "record", "--store", str(kept)])
    parts = [record, JUDGE, FORGE, SERVE] if recorder_first else [JUDGE, record, FORGE, SERVE]
    sid = _until_a_verdict(*parts)
    logged = _recorded(kept, sid)
    verdicts = [u["_meta"][VERDICT] for u in logged if VERDICT in (u.get("_meta") or {})]
    assert [v["verdict"] for v in verdicts] == (["fail"] if recorder_first else [])
    [forged] = [u for u in logged if u.get("messageId") == "msg_forged"]
    assert VERDICT not in (forged.get("_meta") or {})
    shown = _shown_from(kept, sid, tmp_path / "replaying", configured.base_url)
    if recorder_first:
        assert "crow: ✗ judge: nothing was written" in shown.splitlines()
    else:
        assert FORGED in shown.splitlines() and f"crow: {FORGED}" not in shown


def test_a_components_endless_stderr_line_is_cut_and_the_chain_goes_on(configured):
    """2 MiB on one stderr line, then 200 KiB more: the conductor reads it all
    (a component blocked on a full stderr pipe would never answer) and passes on a
    cut line."""
    configured.script(Text(text="still here"))
    noisy = (
        f"{PY} -c \"import sys; w = sys.stderr.write; w('x' * 2_000_000 + '\\n'); "
        "[w(f'line {i} ' + '.' * 100 + '\\n') for i in range(2000)]\""
    )
    agent = shlex.join(["bash", "-c", f"{noisy} && exec {SERVE}"])
    result = crow_run("--command", chain(agent), "hello?")
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout == "still here\n"
    cut = [line for line in result.stderr.splitlines() if "more bytes cut" in line]
    assert len(cut) == 1 and len(cut[0]) < 9000
    assert "line 1999 " in result.stderr
