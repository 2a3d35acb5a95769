"""Crow's own proxies in real chains: ``crow proxy judge`` in front of crow serve
(v2 and v1) and of the TypeScript SDK's echo agent (a third-party agent).

One scripted model server plays both parts, as in test_verify: the worker's reply
first, then the judge's answer.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from typing import Any

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
