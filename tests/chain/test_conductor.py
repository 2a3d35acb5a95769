"""crow conductor: the 20 scenarios of PROXY-CHAINS.md §14, over real processes.

Every component is a real subprocess (Crow's echo agent, the arrow proxy, scripted
agents and proxies); the client writes raw bytes.  What each component saw is read
from the conductor's own ``--trace`` (a JSON line per message per hop).
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from crow_testing.support import ROOT, RawAgent

HERE = Path(__file__).resolve().parent
PY = sys.executable
ECHO = shlex.join([PY, str(ROOT / "examples" / "echo_agent.py")])
ARROW = shlex.join([PY, str(ROOT / "examples" / "arrow_proxy.py")])
PASS = shlex.join([PY, str(ROOT / "examples" / "arrow_proxy.py"), "--prefix", ""])
SCRIPTED = shlex.join([PY, str(HERE / "scripted_agent.py")])
CONDUCTOR = [PY, "-m", "crow", "conductor"]
V2 = {"protocolVersion": 2, "info": {"name": "chain-test", "version": "1"}}
V1 = {"protocolVersion": 1, "clientInfo": {"name": "chain-test", "version": "1"}}


def scripted_proxy(*args: str) -> str:
    return shlex.join([PY, str(HERE / "scripted_proxy.py"), *args])


class Chain(RawAgent):
    """A conductor subprocess, driven with raw bytes, with its trace at hand."""

    def __init__(
        self, tmp_path: Path, *components: str, mode: str = "agent", trace_path: Path | None = None
    ) -> None:
        self.trace_path = trace_path or tmp_path / f"trace-{time.monotonic_ns()}.jsonl"
        super().__init__([*CONDUCTOR, mode, "--trace", str(self.trace_path), *components])

    def hops(self) -> list[dict[str, Any]]:
        if not self.trace_path.exists():
            return []
        return [json.loads(line) for line in self.trace_path.read_text().splitlines()]

    def sent_to(self, link: str, method: str | None = None) -> list[dict[str, Any]]:
        """The messages the conductor wrote to ``link`` (optionally: of one method)."""
        return [
            hop["message"]
            for hop in self.hops()
            if hop["link"] == link
            and hop["dir"] == "out"
            and (method is None or hop["message"].get("method") == method)
        ]

    def wait_for(self, predicate: Any, timeout: float = 10.0) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if found := [hop for hop in self.hops() if predicate(hop)]:
                return found
            time.sleep(0.02)
        raise AssertionError("the trace never showed it")


@pytest.fixture
def chains(tmp_path: Path) -> Any:
    made: list[Chain] = []

    def make(*components: str, mode: str = "agent") -> Chain:
        chain = Chain(tmp_path, *components, mode=mode)
        made.append(chain)
        return chain

    yield make
    for chain in made:
        chain.close()


def text_of(updates: list[dict[str, Any]]) -> str:
    return "".join(
        m["params"]["update"]["content"]["text"]
        for m in updates
        if m.get("method") == "session/update"
        and m["params"]["update"].get("sessionUpdate") == "agent_message_chunk"
    )


def prompt(chain: Chain, sid: str, text: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    params = {"sessionId": sid, "prompt": [{"type": "text", "text": text}]}
    return chain.request("session/prompt", params)


def echo_turn(chain: Chain, text: str = "hi") -> str:
    """initialize, session/new and one prompt to an echo agent; the reply's text."""
    assert chain.request("initialize", V2)[0]["result"]["protocolVersion"] == 2
    sid = chain.new_session()
    prompt(chain, sid, text)
    updates = chain.until_update(
        lambda u: u["sessionUpdate"] == "state_update" and u["state"] == "idle"
    )
    return text_of(updates)


# ---- 1, 2: initialization -------------------------------------------------------
def test_1_each_proxy_is_initialized_before_its_successor(chains: Any) -> None:
    chain = chains(PASS, PASS, SCRIPTED)
    response, _ = chain.request("initialize", V2)
    assert response["result"]["protocolVersion"] == 2
    order = [
        (hop["link"], hop["message"]["method"])
        for hop in chain.hops()
        if hop["dir"] == "out" and "initialize" in str(hop["message"].get("method"))
    ]
    assert order == [
        ("proxy-0", "_proxy/initialize"),
        ("proxy-1", "_proxy/initialize"),
        ("agent", "initialize"),
    ]
    for link in ("proxy-0", "proxy-1", "agent"):
        (sent,) = [m for m in chain.sent_to(link) if "initialize" in m.get("method", "")]
        assert sent["params"] == V2
    assert response["result"]["_futureInitializeResponseField"] is True


def test_2_no_proxies_the_agent_answers_unchanged(chains: Any) -> None:
    chain = chains(SCRIPTED)
    response, _ = chain.request("initialize", V2)
    assert response["result"]["_futureInitializeResponseField"] is True
    assert [m["method"] for m in chain.sent_to("agent")] == ["initialize"]


# ---- 3, 4: arrows and nested conductors -----------------------------------------
@pytest.mark.parametrize("arrows", [1, 2])
def test_3_arrow_proxies_prefix_the_reply(chains: Any, arrows: int) -> None:
    assert echo_turn(chains(*[ARROW] * arrows, ECHO)) == ">" * arrows + "Echo: hi"


def test_3_arrow_in_a_v1_chain(chains: Any) -> None:
    chain = chains(ARROW, SCRIPTED)
    assert chain.request("initialize", V1)[0]["result"]["protocolVersion"] == 1
    sid = chain.new_session()
    response, before = prompt(chain, sid, "hello")
    assert response["result"]["stopReason"] == "end_turn"
    assert text_of(before) == ">hello"


def test_4_nested_conductor(chains: Any) -> None:
    inner = shlex.join([*CONDUCTOR, "proxy", ARROW, ARROW])
    assert echo_turn(chains(inner, ECHO)) == ">>Echo: hi"


def test_4_empty_nested_conductor_is_a_passthrough(chains: Any) -> None:
    inner = shlex.join([*CONDUCTOR, "proxy"])
    assert echo_turn(chains(inner, ECHO)) == "Echo: hi"


# ---- 5, 6, 7: who may initialize whom --------------------------------------------
def test_5_only_the_conductor_sends_proxy_initialize(chains: Any) -> None:
    chain = chains(scripted_proxy("bad"), SCRIPTED)
    response, _ = chain.request("initialize", V2)
    assert response["error"]["code"] == -32600
    assert response["error"]["data"] == "initialize/proxy requests are only sent by the conductor"
    assert chain.sent_to("agent") == []


def test_5_a_client_may_not_send_proxy_initialize(chains: Any) -> None:
    chain = chains(SCRIPTED)
    chain.request("initialize", V2)
    response, _ = chain.request("_proxy/initialize", V2)
    assert response["error"]["code"] == -32600
    assert "only sent by the conductor" in response["error"]["data"]


def test_6_a_proxy_refuses_plain_initialize() -> None:
    proxy = RawAgent(shlex.split(PASS))
    try:
        response, _ = proxy.request("initialize", V2)
        assert response["error"]["code"] == -32600
        assert response["error"]["data"] == "proxies must be initialized with `_proxy/initialize`"
    finally:
        proxy.close()


def test_7_the_first_message_must_be_initialize_and_the_failure_sticks(chains: Any) -> None:
    chain = chains(ECHO)
    for _ in range(2):
        response, _ = chain.request("session/new", {"cwd": "/tmp", "mcpServers": []})
        assert response["error"]["code"] == -32600
        assert response["error"]["data"] == "expected `initialize` request"
    response, _ = chain.request("initialize", V2)  # too late: the chain stays failed
    assert response["error"]["data"] == "expected `initialize` request"
    assert chain.hops() and not any(hop["link"] == "agent" for hop in chain.hops())


# ---- 8-12: ids and cancellation, hop by hop ---------------------------------------
def test_8_every_hop_has_its_own_ids(chains: Any) -> None:
    chain = chains(PASS, SCRIPTED)
    response, _ = chain.request("initialize", V2, id=7)
    assert response["id"] == 7
    ids = [m["id"] for link in ("proxy-0", "agent") for m in chain.sent_to(link, "initialize")]
    ids += [m["id"] for m in chain.sent_to("proxy-0", "_proxy/initialize")]
    assert 7 not in ids and len(set(ids)) == 2


def test_9_a_client_cancel_is_reissued_once_per_hop(chains: Any) -> None:
    chain = chains(PASS, SCRIPTED)
    chain.request("initialize", V2)
    sid = chain.new_session()
    request = {"sessionId": sid, "prompt": [{"type": "text", "text": "wait"}]}
    chain.send({"jsonrpc": "2.0", "id": 50, "method": "session/prompt", "params": request})
    chain.wait_for(
        lambda hop: hop["link"] == "agent" and hop["message"].get("method") == "session/prompt"
    )
    chain.send({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 50}})
    response, _ = chain.until_response(50)
    assert response["error"]["code"] == -32800
    (agent_prompt,) = chain.sent_to("agent", "session/prompt")
    cancels = chain.sent_to("agent", "$/cancel_request")
    assert [c["params"]["requestId"] for c in cancels] == [agent_prompt["id"]]
    assert agent_prompt["id"] != 50
    assert prompt(chain, sid, "barrier")[0]["result"]["stopReason"] == "end_turn"


def test_9_a_cancel_in_the_same_write_still_gets_one_answer(chains: Any) -> None:
    chain = chains(PASS, SCRIPTED)
    chain.request("initialize", V2)
    sid = chain.new_session()
    request = {"sessionId": sid, "prompt": [{"type": "text", "text": "wait"}]}
    chain.write(
        json.dumps(
            {"jsonrpc": "2.0", "id": 51, "method": "session/prompt", "params": request}
        ).encode()
        + b"\n"
        + json.dumps(
            {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 51}}
        ).encode()
        + b"\n"
    )
    response, _ = chain.until_response(51)
    assert response["error"]["code"] == -32800
    assert prompt(chain, sid, "barrier")[0]["result"]["stopReason"] == "end_turn"
    assert chain.nothing_within(0.3)  # no second answer to 51
    # Whatever reached the agent was withdrawn there once, with the agent's own id.
    sent = chain.sent_to("agent", "session/prompt")[:-1]
    cancels = chain.sent_to("agent", "$/cancel_request")
    assert [c["params"]["requestId"] for c in cancels] == [m["id"] for m in sent]


def test_10_an_agent_cancel_reaches_the_client_with_its_id(chains: Any) -> None:
    chain = chains(PASS, SCRIPTED)
    chain.request("initialize", V2)
    sid = chain.new_session()
    chain.send(
        {
            "jsonrpc": "2.0",
            "id": 60,
            "method": "session/prompt",
            "params": {"sessionId": sid, "prompt": [{"type": "text", "text": "ask-cancel"}]},
        }
    )
    question = chain.recv()
    assert question["method"] == "session/request_permission"
    cancel = chain.recv()
    assert cancel == {
        "jsonrpc": "2.0",
        "method": "$/cancel_request",
        "params": {"requestId": question["id"]},
    }
    chain.send({"jsonrpc": "2.0", "id": question["id"], "error": {"code": -32800, "message": "x"}})
    response, _ = chain.until_response(60)
    assert response["result"]["_meta"]["answer"]["error"]["code"] == -32800
    assert len([m for m in chain.sent_to("client") if m.get("method") == "$/cancel_request"]) == 1


def test_11_a_cancelled_prompt_withdraws_its_permission_question(chains: Any) -> None:
    chain = chains(ARROW, SCRIPTED)
    chain.request("initialize", V2)
    sid = chain.new_session()
    params = {"sessionId": sid, "prompt": [{"type": "text", "text": "ask"}]}
    chain.send({"jsonrpc": "2.0", "id": 70, "method": "session/prompt", "params": params})
    question = chain.recv()
    assert question["method"] == "session/request_permission"
    chain.send({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 70}})
    # The client's answer and the agent's withdrawal of its question, in either order.
    first, second = chain.recv(), chain.recv()
    withdrawn, response = (first, second) if "method" in first else (second, first)
    assert withdrawn == {
        "jsonrpc": "2.0",
        "method": "$/cancel_request",
        "params": {"requestId": question["id"]},
    }
    assert response["id"] == 70 and response["error"]["code"] == -32800
    chain.send({"jsonrpc": "2.0", "id": question["id"], "error": {"code": -32800, "message": "x"}})
    (agent_prompt,) = chain.sent_to("agent", "session/prompt")
    assert [c["params"]["requestId"] for c in chain.sent_to("agent", "$/cancel_request")] == [
        agent_prompt["id"]
    ]
    response, before = prompt(chain, sid, "barrier")
    assert text_of(before) == ">barrier"


@pytest.mark.parametrize("stage", ["initialize", "session/new"])
def test_12_initialize_and_session_new_can_be_cancelled(chains: Any, stage: str) -> None:
    chain = chains(PASS, shlex.join([PY, str(HERE / "scripted_agent.py")]))
    if stage == "session/new":
        chain.request("initialize", V2)
        params: dict[str, Any] = {"cwd": "/wait", "mcpServers": []}
        chain.send({"jsonrpc": "2.0", "id": 80, "method": stage, "params": params})
        chain.wait_for(lambda hop: hop["link"] == "agent" and hop["message"].get("method") == stage)
        chain.send({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 80}})
        response, _ = chain.until_response(80)
        assert response["error"]["code"] == -32800
        (sent,) = chain.sent_to("agent", stage)
        cancels = chain.sent_to("agent", "$/cancel_request")
        assert [c["params"]["requestId"] for c in cancels] == [sent["id"]]
    else:
        # The initialize is withdrawn while the proxy waits on the agent: the proxy
        # gets exactly one cancel with its own id, and the client an answer.
        chain.write(
            json.dumps({"jsonrpc": "2.0", "id": 81, "method": "initialize", "params": V2}).encode()
            + b"\n"
            + json.dumps(
                {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 81}}
            ).encode()
            + b"\n"
        )
        response, _ = chain.until_response(81)
        assert "result" in response or response["error"]["code"] == -32800
        (sent,) = chain.sent_to("proxy-0", "_proxy/initialize")
        cancels = chain.sent_to("proxy-0", "$/cancel_request")
        assert [c["params"]["requestId"] for c in cancels] == [sent["id"]]


# ---- 13, 14: what passes through, in which order -----------------------------------
def test_13_meta_reaches_the_agent_unchanged(chains: Any) -> None:
    chain = chains(PASS, SCRIPTED)
    chain.request("initialize", V2)
    sid = chain.new_session()
    meta = {"traceparent": "00-abc-def-01", "tracestate": "k=v", "baggage": "a=b"}
    params = {"sessionId": sid, "prompt": [{"type": "text", "text": "x"}], "_meta": meta}
    chain.request("session/prompt", params)
    (sent,) = chain.sent_to("agent", "session/prompt")
    assert sent["params"] == params


def test_14_updates_sent_before_a_response_arrive_before_it(chains: Any) -> None:
    chain = chains(PASS, PASS, SCRIPTED)
    chain.request("initialize", V2)
    response, before = chain.request("session/resume", {"sessionId": "s1", "cwd": "/tmp"})
    assert "result" in response
    assert [m["params"]["update"]["content"][0]["text"] for m in before] == ["replayed"]
    later = chain.recv()
    assert later["params"]["update"]["content"][0]["text"] == "later"


# ---- 15, 16, 17: versions ----------------------------------------------------------
@pytest.mark.parametrize(("asked", "runs"), [(2, 2), (3, 2), (1, 1)])
def test_15_the_chain_runs_one_version_end_to_end(chains: Any, asked: int, runs: int) -> None:
    chain = chains(PASS, SCRIPTED)
    params = {**(V1 if asked == 1 else V2), "protocolVersion": asked}
    response, _ = chain.request("initialize", params)
    assert response["result"]["protocolVersion"] == runs
    for link in ("proxy-0", "agent"):
        (sent,) = [m for m in chain.sent_to(link) if "initialize" in m.get("method", "")]
        assert sent["params"]["protocolVersion"] == runs


@pytest.mark.parametrize(
    ("params", "code", "message"),
    [
        ({}, -32602, "initialize.protocolVersion must be a valid ACP protocol version"),
        ({"protocolVersion": "2"}, -32602, "must be a valid ACP protocol version"),
        ({"protocolVersion": 0}, -32600, "unsupported ACP protocol version 0"),
    ],
)
def test_16_bad_versions_are_refused_at_once(
    chains: Any, params: dict[str, Any], code: int, message: str
) -> None:
    chain = chains(ECHO)
    started = time.monotonic()
    response, _ = chain.request("initialize", params)
    assert time.monotonic() - started < 5
    assert response["error"]["code"] == code
    assert message in response["error"]["message"]


@pytest.mark.parametrize("answer", ["1", "none"])
def test_17_an_agent_answering_another_version_fails_initialize(chains: Any, answer: str) -> None:
    agent = shlex.join([PY, str(HERE / "scripted_agent.py"), "--answer-version", answer])
    chain = chains(PASS, agent)
    response, _ = chain.request("initialize", V2)
    assert response["error"]["code"] == -32603
    assert "protocolVersion" in response["error"]["message"]


# ---- 18, 19: MCP over ACP ------------------------------------------------------------
def test_18_mcp_over_acp_reaches_the_proxy_that_serves_it(chains: Any) -> None:
    chain = chains(scripted_proxy("mcp", "S"), PASS, SCRIPTED)
    chain.request("initialize", V2)
    response, _ = chain.request("session/new", {"cwd": "/tmp", "mcpServers": []})
    assert response["result"]["_meta"]["mcpServers"] == [
        {"type": "acp", "name": "test", "serverId": "S"}
    ]
    response, _ = prompt(chain, "s1", "mcp S")
    seen = response["result"]["_meta"]["seen"]
    assert seen["connect"]["result"] == {"connectionId": "conn-1"}
    assert seen["message"]["result"]["echo"] == "tools/list"
    assert seen["disconnect"]["result"] == {}
    notes = [
        m["params"]["params"]
        for m in chain.sent_to("proxy-0", "_proxy/successor")
        if "id" not in m and m["params"]["method"] == "mcp/message"
    ]
    assert notes == [{"connectionId": "conn-1", "method": "notifications/initialized"}]


def test_18_an_unknown_mcp_server_travels_up_to_the_client(chains: Any) -> None:
    chain = chains(scripted_proxy("mcp", "S"), PASS, SCRIPTED)
    chain.request("initialize", V2)
    chain.new_session()
    chain.send(
        {
            "jsonrpc": "2.0",
            "id": 90,
            "method": "session/prompt",
            "params": {"sessionId": "s1", "prompt": [{"type": "text", "text": "mcp OTHER"}]},
        }
    )
    asked = chain.recv()
    assert asked["method"] == "mcp/connect" and asked["params"] == {"serverId": "OTHER"}
    chain.send({"jsonrpc": "2.0", "id": asked["id"], "error": {"code": -32002, "message": "no"}})
    response, _ = chain.until_response(90)
    assert response["result"]["_meta"]["seen"]["connect"]["error"]["code"] == -32002


def test_19_an_injected_server_keeps_the_others(chains: Any) -> None:
    chain = chains(scripted_proxy("mcp", "S"), SCRIPTED)
    chain.request("initialize", V2)
    mine = {"type": "stdio", "name": "mine", "command": "x", "args": [], "env": []}
    for method in ("session/new", "session/resume"):
        response, _ = chain.request(
            method, {"cwd": "/tmp", "sessionId": "s1", "mcpServers": [mine]}
        )
        assert response["result"]["_meta"]["mcpServers"] == [
            mine,
            {"type": "acp", "name": "test", "serverId": "S"},
        ]


# ---- 20: anything else passes through ----------------------------------------------
def test_20_unknown_methods_and_their_errors_pass_through(chains: Any) -> None:
    chain = chains(PASS, PASS, SCRIPTED)
    chain.request("initialize", V2)
    response, _ = chain.request("_vendor/ping", {"x": 1})
    assert response["error"] == {
        "code": -32601,
        "message": "Method not found",
        "data": {"method": "_vendor/ping"},
    }
    (sent,) = chain.sent_to("agent", "_vendor/ping")
    assert sent["params"] == {"x": 1}


# ---- the chain's lifecycle -------------------------------------------------------------
def test_a_component_that_dies_takes_the_chain_down_with_a_reason(chains: Any) -> None:
    dying = shlex.join(
        [PY, "-c", "import sys; sys.stdin.readline(); print('boom', file=sys.stderr); sys.exit(3)"]
    )
    chain = chains(PASS, dying)
    response, _ = chain.request("initialize", V2)
    assert response["error"]["code"] == -32603
    assert "agent" in response["error"]["message"] and "code 3" in response["error"]["message"]
    assert "boom" in response["error"]["message"]
    assert chain.proc.wait(timeout=10) == 1


@pytest.mark.parametrize("proxies", [[], [PASS]], ids=["agent-alone", "behind-a-proxy"])
def test_an_agent_that_never_answers_initialize_times_out_with_its_name(
    proxies: list[str],
) -> None:
    """--init-timeout: the client is answered -32603 naming the silent component and its
    last stderr line (it waited forever), and the conductor exits 1."""
    hung = shlex.join(
        [
            PY,
            "-c",
            "import sys, time; print('loading weights', file=sys.stderr, flush=True); "
            "sys.stdin.readline(); time.sleep(600)",
        ]
    )
    # 5 s: a Python proxy answers in well under that even on a busy machine (with 1 s,
    # a loaded CI machine blamed the proxy); the agent never does.
    chain = RawAgent([*CONDUCTOR, "agent", "--init-timeout", "5", *proxies, hung])
    try:
        response, _ = chain.request("initialize", V2)
        error = response["error"]
        assert error["code"] == -32603 and error["data"]["component"] == "agent"
        assert error["message"].startswith(f"the chain's agent ({hung}) did not answer")
        assert "within 5 s: loading weights" in error["message"]
        assert chain.proc.wait(timeout=20) == 1
    finally:
        chain.close()


def test_a_component_that_cannot_start_fails_initialize(chains: Any) -> None:
    chain = chains("/nonexistent/agent --flag")
    response, _ = chain.request("initialize", V2)
    assert response["error"]["code"] == -32603
    assert "cannot start agent" in response["error"]["message"]


def test_the_components_end_with_the_client(chains: Any, tmp_path: Path) -> None:
    chain = chains(PASS, ECHO)
    echo_turn(chain)
    pids = _descendants(chain.proc.pid)
    assert len(pids) >= 2
    assert chain.close() == 0
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
        time.sleep(0.05)
    assert not [pid for pid in pids if _alive(pid)]


@pytest.mark.parametrize(
    "spec",
    ['{"command": "x", "argz": []}', '{"args": ["a"]}', "FOO=bar", "'unclosed"],
)
def test_a_bad_component_is_a_usage_error(spec: str) -> None:
    done = subprocess.run([*CONDUCTOR, "agent", spec], capture_output=True, text=True, timeout=30)
    assert done.returncode == 2
    assert done.stderr.startswith("crow conductor: ") and done.stdout == ""


def test_components_take_json_and_environment(chains: Any, tmp_path: Path) -> None:
    log = tmp_path / "agent.log"
    spec = json.dumps(
        {
            "command": PY,
            "args": [str(HERE / "scripted_agent.py")],
            "env": {"SCRIPTED_AGENT_LOG": str(log)},
        }
    )
    chain = chains(f"SCRIPTED_AGENT_LOG={shlex.quote(str(log))} {PASS}", spec)
    chain.request("initialize", V2)
    assert json.loads(log.read_text().splitlines()[0])["method"] == "initialize"


def _descendants(pid: int) -> list[int]:
    found: list[int] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry))
    return found + [d for child in found for d in _descendants(child)]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


# ---- races, bad input, signals --------------------------------------------------------
def test_a_pipelined_client_gets_every_prompt_to_idle(chains: Any) -> None:
    """initialize, session/new, prompts and a cancel in one write, through a proxy."""
    chain = chains(PASS, shlex.join([*shlex.split(ECHO), "--chunks", "3", "--delay-ms", "5"]))
    frames = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": V2},
        {"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {"cwd": "/tmp"}},
    ]
    chain.write(b"".join(json.dumps(f).encode() + b"\n" for f in frames))
    sid = chain.until_response(2)[0]["result"]["sessionId"]
    prompts = [
        {
            "jsonrpc": "2.0",
            "id": 10 + n,
            "method": "session/prompt",
            "params": {"sessionId": sid, "prompt": [{"type": "text", "text": f"p{n}"}]},
        }
        for n in range(3)
    ]
    cancel = {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}}
    chain.write(b"".join(json.dumps(f).encode() + b"\n" for f in [*prompts, cancel]))
    answers: dict[int, dict[str, Any]] = {}
    idles = 0
    while len(answers) < 3 or idles < sum("result" in a for a in answers.values()):
        message = chain.recv()
        if message.get("id") in (10, 11, 12) and "method" not in message:
            assert message["id"] not in answers  # exactly one answer each
            answers[message["id"]] = message
        update = message.get("params", {}).get("update", {})
        if update.get("sessionUpdate") == "state_update" and update.get("state") == "idle":
            idles += 1
    assert chain.nothing_within(0.3)


def test_bad_input_gets_answers_and_the_chain_goes_on(chains: Any) -> None:
    chain = chains(PASS, ECHO)
    chain.write(b"{not json\n")
    assert chain.recv()["error"]["code"] == -32700
    chain.write(b"[" * 5000 + b"]" * 5000 + b"\n")
    assert chain.recv()["error"]["code"] in (-32700, -32600)
    chain.write(b'{"jsonrpc": "2.0", "id": 3, "method": "initialize", "params": [1]}\n')
    assert chain.recv()["error"]["code"] == -32602
    assert echo_turn(chain) == "Echo: hi"


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "kill-9"])
def test_components_die_with_the_conductor(chains: Any, how: signal.Signals) -> None:
    chain = chains(PASS, ECHO)
    echo_turn(chain)
    pids = _descendants(chain.proc.pid)
    assert len(pids) >= 2
    # Ctrl-C at a terminal reaches the conductor; its components have sessions of
    # their own, so it, not the terminal, stops them.
    os.kill(chain.proc.pid, how)
    code = chain.proc.wait(timeout=10)
    assert code == (130 if how == signal.SIGINT else -signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
        time.sleep(0.05)
    assert not [pid for pid in pids if _alive(pid)]


def test_a_client_that_stops_reading_stops_the_agent_not_the_conductors_memory() -> None:
    flood = shlex.join([*shlex.split(ECHO), "--chunks", "100000"])
    # Not RawAgent: its reader thread would read on; this client truly stops reading.
    command = [*CONDUCTOR, "agent", flood]
    with subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        stdin, stdout = proc.stdin, proc.stdout

        def send(message: dict[str, Any]) -> None:
            stdin.write(json.dumps(message).encode() + b"\n")
            stdin.flush()

        send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": V2})
        send({"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {"cwd": "/tmp"}})
        sid = None
        while sid is None:
            message = json.loads(stdout.readline())
            sid = message.get("result", {}).get("sessionId") if message.get("id") == 2 else None
        params = {"sessionId": sid, "prompt": [{"type": "text", "text": "x" * 200_000}]}
        send({"jsonrpc": "2.0", "id": 9, "method": "session/prompt", "params": params})
        time.sleep(3)  # 100,000 updates, and the client reads none of them
        status = Path(f"/proc/{proc.pid}/status").read_text()
        rss_mib = int(status.split("VmRSS:")[1].split()[0]) / 1024
        text = ""
        while True:  # then it reads, and nothing was lost
            update = json.loads(stdout.readline()).get("params", {}).get("update", {})
            if update.get("sessionUpdate") == "agent_message_chunk":
                text += update["content"]["text"]
            if update.get("state") == "idle":
                break
        proc.kill()
    assert rss_mib < 150  # buffering them all took ~300 MiB
    assert text == "Echo: " + "x" * 200_000


def test_an_agent_put_where_a_proxy_goes_is_named(chains: Any) -> None:
    chain = chains(ECHO, ECHO)
    response, _ = chain.request("initialize", V2)
    assert response["error"]["code"] == -32600
    assert response["error"]["message"].startswith("proxy-0 (")
    assert "refused _proxy/initialize" in response["error"]["message"]
    assert "not an ACP proxy" in response["error"]["message"]


def test_the_trace_file_is_private_whatever_the_umask(tmp_path: Path) -> None:
    """--trace holds every message of the chain: made 0600, and an older file that
    was left open is tightened (it is appended to: what it held is kept)."""
    older = tmp_path / "older.jsonl"
    older.write_text('{"kept": true}\n')
    older.chmod(0o644)
    old = os.umask(0o022)  # the usual default, with which open() makes files 0644
    try:
        made, reused = Chain(tmp_path, ECHO), Chain(tmp_path, ECHO, trace_path=older)
    finally:
        os.umask(old)
    try:
        assert echo_turn(made) == "Echo: hi" and echo_turn(reused) == "Echo: hi"
    finally:
        made.close()
        reused.close()
    assert stat.S_IMODE(made.trace_path.stat().st_mode) == 0o600
    assert stat.S_IMODE(older.stat().st_mode) == 0o600
    assert older.read_text().startswith('{"kept": true}\n') and len(reused.hops()) > 4
