"""The wire never loses a request (issue 10): raw bytes to real agent subprocesses.

Each case runs against the echo agent and ``crow serve`` (both share the
``crow.acp`` core), and v1 cases against ``crow serve``'s v1 face.  Races are
provoked by writing the next message in the same write as the previous one, and
the checks are invariants: every request gets exactly one answer, every line
out is valid JSON, and the agent keeps serving afterwards.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from crow_testing.fakemodel import Hang, Text
from crow_testing.serve_support import CROW_SERVE, write_config
from crow_testing.support import ECHO_AGENT, RawAgent

from crow.acp.errors import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    REQUEST_CANCELLED,
)

V2_INIT = {"protocolVersion": 2, "info": {"name": "robustness", "version": "1"}}
V1_INIT = {
    "protocolVersion": 1,
    "clientCapabilities": {},
    "clientInfo": {"name": "robustness-v1", "version": "1"},
}
SURROGATE_ID = b'"\\ud800"'  # a lone surrogate, as a JSON escape
PROBE_ID = "probe"

Start = Callable[..., RawAgent]


def line(message: Any) -> bytes:
    return json.dumps(message).encode() + b"\n"


def request(rid: Any, method: str, params: Any = None) -> bytes:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        message["params"] = params
    return line(message)


def cancel_request(rid: Any) -> bytes:
    return line({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": rid}})


def nested(depth: int) -> bytes:
    return b'{"jsonrpc":"2.0","id":1,"method":"session/list","params":{"x":' + (
        b"[" * depth + b"]" * depth + b"}}\n"
    )


def is_reply(message: Any) -> bool:
    return isinstance(message, dict) and "method" not in message and "id" in message


def replies_until(agent: RawAgent, rid: Any) -> list[dict[str, Any]]:
    """Every reply read up to and including the one for ``rid``."""
    seen = []
    while True:
        message = agent.recv()
        if is_reply(message):
            seen.append(message)
            if message["id"] == rid and type(message["id"]) is type(rid):
                return seen


def probe(agent: RawAgent) -> list[dict[str, Any]]:
    """The agent still answers; returns the replies that came before the probe's."""
    agent.write(request(PROBE_ID, "session/list", {}))
    seen = replies_until(agent, PROBE_ID)
    assert "result" in seen[-1], seen[-1]
    return seen[:-1]


def v1_probe(agent: RawAgent) -> None:
    agent.write(request(PROBE_ID, "session/list", {}))
    assert "result" in replies_until(agent, PROBE_ID)[-1]


@pytest.fixture(params=["echo", "crow"])
def start(request: pytest.FixtureRequest, crow_home: Path) -> Iterator[Start]:
    """Start the agent under test, not yet initialized."""
    agents: list[RawAgent] = []

    def make(*args: str) -> RawAgent:
        if request.param == "crow":
            return make_crow(*args)
        agent = RawAgent(ECHO_AGENT + list(args))
        agents.append(agent)
        return agent

    def make_crow(*args: str) -> RawAgent:
        model = request.getfixturevalue("scripted_model")
        write_config(crow_home, model.base_url)
        agent = RawAgent([*CROW_SERVE, *args])
        agents.append(agent)
        return agent

    yield make
    for agent in agents:
        agent.close()


@pytest.fixture
def crow_raw(crow_home: Path, scripted_model: Any) -> Iterator[Start]:
    """``crow serve`` not yet initialized (for the v1 cases)."""
    agents: list[RawAgent] = []

    def make() -> RawAgent:
        write_config(crow_home, scripted_model.base_url)
        agent = RawAgent(list(CROW_SERVE))
        agents.append(agent)
        return agent

    yield make
    for agent in agents:
        agent.close()


def initialized(agent: RawAgent, params: dict[str, Any] = V2_INIT) -> RawAgent:
    agent.write(request("init", "initialize", params))
    assert "result" in replies_until(agent, "init")[-1]
    return agent


def new_session(agent: RawAgent, extra: dict[str, Any] | None = None) -> str:
    agent.write(request("new", "session/new", {"cwd": "/tmp", "mcpServers": [], **(extra or {})}))
    reply = replies_until(agent, "new")[-1]
    return str(reply["result"]["sessionId"])


# ---- 1. $/cancel_request in the same write as its request --------------------------
def test_a_cancel_in_the_same_write_gets_exactly_one_answer_and_frees_the_id(start: Start):
    agent = initialized(start())
    ids = list(range(40))
    agent.write(b"".join(request(i, "session/list", {}) + cancel_request(i) for i in ids))
    first: Counter[Any] = Counter()
    for reply in replies_until(agent, ids[-1]) + probe(agent):
        first[reply["id"]] += 1
        assert "result" in reply or reply["error"]["code"] == REQUEST_CANCELLED, reply
    assert first == Counter(ids)  # one answer each, none lost, none doubled
    agent.write(b"".join(request(i, "session/list", {}) for i in ids))  # the ids are free
    again = replies_until(agent, ids[-1]) + probe(agent)
    assert sorted(r["id"] for r in again) == ids
    assert all("result" in r for r in again), again


# ---- 2. JSON nested deeper than the parser goes -------------------------------------
@pytest.mark.parametrize("depth", [1100, 200_000])
def test_deep_nesting_gets_a_parse_error_and_the_agent_lives(start: Start, depth: int):
    agent = start()
    agent.write(nested(depth))  # before initialize: the router's gate (crow) or the peer
    reply = agent.recv()
    assert reply["id"] is None and reply["error"]["code"] == PARSE_ERROR
    initialized(agent)
    agent.write(nested(depth))
    reply = agent.recv()
    assert reply["id"] is None and reply["error"]["code"] == PARSE_ERROR
    probe(agent)


def test_deep_nesting_on_v1_gets_a_parse_error(crow_raw: Start):
    agent = initialized(crow_raw(), V1_INIT)
    agent.write(nested(5000))
    reply = agent.recv()
    assert reply["id"] is None and reply["error"]["code"] == PARSE_ERROR
    v1_probe(agent)


@pytest.mark.parametrize(("depth", "echoed"), [(200, True), (400, False)])
def test_a_deep_prompt_is_echoed_or_refused_never_left_running(depth: int, echoed: bool):
    """Under 1024 levels a prompt parses; past ~250 it cannot be written back (orjson,
    pydantic): then it is refused with -32602 rather than acknowledged and dropped."""
    agent = initialized(RawAgent(ECHO_AGENT))
    sid = new_session(agent)
    deep: Any = "bottom"
    for _ in range(depth):
        deep = [deep]
    block = {"type": "text", "text": "deep", "_meta": {"deep": deep}}
    agent.write(request("p", "session/prompt", {"sessionId": sid, "prompt": [block]}))
    reply = replies_until(agent, "p")[-1]
    if echoed:
        assert "result" in reply
        seen = turn_updates(agent)
        assert seen[0]["sessionUpdate"] == "user_message" and seen[0]["content"] == [block]
        assert seen[-1]["stopReason"] == "end_turn"
    else:
        assert reply["error"]["code"] == INVALID_PARAMS
    probe(agent)
    agent.close()


def test_an_oversized_line_with_a_bad_escape_in_its_id_is_answered():
    agent = initialized(RawAgent([*ECHO_AGENT, "--max-message-bytes", "4096"]))
    agent.write(b'{"jsonrpc":"2.0","id":"a\\qb","method":"session/list","params":{"p":"')
    agent.write(b"x" * 10_000 + b'"}}\n')
    reply = agent.recv()
    assert reply["id"] is None and reply["error"]["code"] == INVALID_REQUEST
    probe(agent)
    agent.close()


# ---- 3. lone surrogates --------------------------------------------------------------
def test_a_surrogate_id_before_initialize_is_answered(start: Start):
    agent = start()
    agent.write(b'{"jsonrpc":"2.0","id":' + SURROGATE_ID + b',"method":"session/list"}\n')
    reply = agent.recv()
    assert reply["id"] == "\ud800" and reply["error"]["code"] == INVALID_REQUEST
    initialized(agent)
    probe(agent)


@pytest.mark.parametrize(
    ("raw", "rid", "code"),
    [
        (b'{"jsonrpc":"2.0","id":"\\ud800","method":"session/list","params":{}}', "\ud800", None),
        (b'{"jsonrpc":"2.0","id":"x\\udfffy","method":"\\udfff"}', "x\udfffy", METHOD_NOT_FOUND),
        (b'{"jsonrpc":"2.0","id":3,"method":"session/\\ud800"}', 3, METHOD_NOT_FOUND),
        (
            b'{"jsonrpc":"2.0","id":4,"method":"session/prompt",'
            b'"params":{"sessionId":"\\ud800","prompt":[{"type":"text","text":"x"}]}}',
            4,
            "any",
        ),
    ],
)
def test_surrogates_after_initialize_are_answered(start: Start, raw: bytes, rid: Any, code: Any):
    agent = initialized(start())
    agent.write(raw + b"\n")
    reply = replies_until(agent, rid)[-1]
    if code is None:
        assert "result" in reply
    elif code != "any":
        assert reply["error"]["code"] == code
    else:
        assert isinstance(reply["error"]["code"], int) and reply["error"]["message"]
    probe(agent)


def test_surrogates_on_v1_are_answered(crow_raw: Start):
    agent = initialized(crow_raw(), V1_INIT)
    agent.write(b'{"jsonrpc":"2.0","id":"\\ud800","method":"session/list","params":{}}\n')
    assert "result" in replies_until(agent, "\ud800")[-1]
    agent.write(b'{"jsonrpc":"2.0","id":7,"method":"\\ud800","params":{}}\n')
    assert replies_until(agent, 7)[-1]["error"]["code"] == METHOD_NOT_FOUND
    v1_probe(agent)


def test_a_surrogate_in_the_v1_initialize_id_is_answered(crow_raw: Start):
    agent = crow_raw()
    init = json.dumps(V1_INIT).encode()
    agent.write(b'{"jsonrpc":"2.0","id":' + SURROGATE_ID + b',"method":"initialize","params":')
    agent.write(init + b"}\n")
    assert replies_until(agent, "\ud800")[-1]["result"]["protocolVersion"] == 1
    v1_probe(agent)


@pytest.mark.parametrize("init", [V2_INIT, V1_INIT], ids=["v2", "v1"])
@pytest.mark.parametrize(
    "block",
    [
        b'{"type":"text","text":"a\\ud800b"}',
        b'{"type":"text","text":"ok","_meta":{"note":"\\udfff"}}',
        b'{"type":"resource_link","name":"\\ud83d","uri":"file:///x"}',
    ],
)
def test_a_lone_surrogate_in_a_prompt_is_refused_at_the_request(
    crow_raw: Start, scripted_model: Any, init: dict[str, Any], block: bytes
):
    """Refused with -32602 before the turn starts (it was acknowledged, then the turn
    failed as the store could not encode it); the session takes the next prompt."""
    scripted_model.set_default(Text(text="fine"))
    agent = initialized(crow_raw(), init)
    sid = new_session(agent).encode()
    head = b'{"jsonrpc":"2.0","id":9,"method":"session/prompt","params":{"sessionId":"'
    agent.write(head + sid + b'","prompt":[{"type":"text","text":"x"},' + block + b"]}}\n")
    seen = [agent.recv()]
    while not is_reply(seen[-1]):
        seen.append(agent.recv())
    assert seen[-1]["error"]["code"] == INVALID_PARAMS
    assert seen[-1]["error"]["data"] == {"index": 1}
    assert not [m for m in seen if "user_message" in json.dumps(m)]  # no turn began
    prompt = {"sessionId": sid.decode(), "prompt": [{"type": "text", "text": "again"}]}
    agent.write(request(10, "session/prompt", prompt))
    reply = replies_until(agent, 10)[-1]
    assert "result" in reply, reply


BIG_ID = 123456789012345678901234567890  # past 64 bits: orjson would read a float


@pytest.mark.parametrize("init", [V2_INIT, V1_INIT], ids=["v2", "v1"])
def test_ids_are_echoed_exactly_and_objects_or_arrays_are_invalid(
    crow_raw: Start, init: dict[str, Any]
):
    """JSON-RPC ids are strings or numbers: a big integer comes back as the same
    integer (it came back 1.2345678901234568e+29 on v1), an object or array id is
    -32600 with id null on v1 as on v2 (v1 answered them with a result)."""
    agent = initialized(crow_raw(), init)
    for rid in (BIG_ID, -(2**70), 2**64, "007"):
        agent.write(request(rid, "session/list", {}))
        reply = replies_until(agent, rid)[-1]
        assert "result" in reply and type(reply["id"]) is type(rid)
    assert str(BIG_ID).encode() in b"".join(agent.raw_stdout)
    for rid in ({"a": 1}, [1], True, 1.5, None):
        agent.write(request(rid, "session/list", {}))
        reply = agent.recv()
        assert reply["id"] is None and reply["error"]["code"] == INVALID_REQUEST, (rid, reply)
    # A response with such an id answers nothing of ours: dropped, the agent lives.
    agent.write(line({"jsonrpc": "2.0", "id": {"a": 1}, "result": {}}))
    if init is V2_INIT:
        probe(agent)
    else:
        v1_probe(agent)


# ---- 4. params as an array ------------------------------------------------------------
def test_params_as_an_array_is_invalid_params(start: Start):
    agent = start()
    agent.write(request(1, "initialize", [2]))
    assert agent.recv()["error"]["code"] == INVALID_PARAMS
    initialized(agent)
    agent.write(request(2, "session/new", ["/tmp"]))
    reply = replies_until(agent, 2)[-1]
    assert reply["error"]["code"] == INVALID_PARAMS
    probe(agent)


# ---- 5. requests pipelined behind initialize ---------------------------------------
def test_requests_written_behind_initialize_run_in_order(start: Start):
    agent = start()
    agent.write(
        request("i", "initialize", V2_INIT)
        + request("n", "session/new", {"cwd": "/tmp", "mcpServers": []})
        + request("l", "session/list", {})
    )
    init, new, listed = replies_until(agent, "l")
    assert [init["id"], new["id"], listed["id"]] == ["i", "n", "l"]
    assert init["result"]["protocolVersion"] == 2
    sid = new["result"]["sessionId"]
    assert sid in [s["sessionId"] for s in listed["result"]["sessions"]]


def test_requests_behind_a_failed_initialize_are_refused_then_a_retry_works(start: Start):
    agent = start()
    agent.write(
        request(1, "initialize", {"protocolVersion": "two", "info": V2_INIT["info"]})
        + request(2, "session/list", {})
        + request(3, "initialize", V2_INIT)
        + request(4, "session/list", {})
    )
    replies = replies_until(agent, 4)
    assert [r["id"] for r in replies] == [1, 2, 3, 4]
    assert replies[0]["error"]["code"] == INVALID_PARAMS
    assert replies[1]["error"]["code"] == INVALID_REQUEST
    assert replies[2]["result"]["protocolVersion"] == 2
    assert "result" in replies[3]


def test_v1_requests_written_behind_initialize_run_in_order(crow_raw: Start):
    agent = crow_raw()
    agent.write(
        request("i", "initialize", V1_INIT)
        + request("n", "session/new", {"cwd": "/tmp", "mcpServers": []})
        + request("l", "session/list", {})
    )
    init, new, listed = replies_until(agent, "l")
    assert init["result"]["protocolVersion"] == 1
    assert new["result"]["sessionId"] in [s["sessionId"] for s in listed["result"]["sessions"]]


# ---- 6. a notification sent as a request ---------------------------------------------
def test_session_cancel_sent_as_a_request_is_answered(start: Start):
    agent = initialized(start())
    sid = new_session(agent)
    agent.write(request("c", "session/cancel", {"sessionId": sid}))
    assert replies_until(agent, "c")[-1]["result"] == {}
    agent.write(request("bad", "session/cancel", {}))
    assert replies_until(agent, "bad")[-1]["error"]["code"] == INVALID_PARAMS
    probe(agent)


def test_cancel_request_sent_as_a_request_cancels_and_is_answered(start: Start):
    agent = initialized(start())
    agent.write(request(5, "session/list", {}) + request(6, "$/cancel_request", {"requestId": 5}))
    replies = replies_until(agent, 6) + probe(agent)
    assert Counter(r["id"] for r in replies) == Counter([5, 6])
    assert next(r for r in replies if r["id"] == 6)["result"] == {}


def test_v1_session_cancel_sent_as_a_request_is_answered(crow_raw: Start):
    agent = initialized(crow_raw(), V1_INIT)
    sid = new_session(agent)
    agent.write(request("c", "session/cancel", {"sessionId": sid}))
    assert replies_until(agent, "c")[-1]["result"] == {}
    v1_probe(agent)


# ---- 7. end of input ------------------------------------------------------------------
def test_a_request_whose_input_ends_at_once_is_answered(start: Start):
    """``printf '<initialize>\\n' | agent`` prints the answer, then the agent exits."""
    agent = start()
    agent.write(request(1, "initialize", V2_INIT) + request(2, "session/list", {}))
    assert agent.close() == 0
    replies = [json.loads(raw) for raw in agent.raw_stdout]
    assert [r["id"] for r in replies] == [1, 2] and all("result" in r for r in replies)


def test_a_v1_request_whose_input_ends_at_once_is_answered(crow_raw: Start):
    agent = crow_raw()
    agent.write(request(1, "initialize", V1_INIT) + request(2, "session/list", {}))
    assert agent.close() == 0
    replies = [json.loads(raw) for raw in agent.raw_stdout]
    assert [r["id"] for r in replies] == [1, 2] and all("result" in r for r in replies)


def test_a_v1_prompt_still_running_at_end_of_input_is_answered(
    crow_raw: Start, scripted_model: Any
):
    """Past the grace the turn is not done: the prompt gets an error, not silence."""
    agent = initialized(crow_raw(), V1_INIT)
    sid = new_session(agent)
    scripted_model.set_default(Hang())
    prompt = {"sessionId": sid, "prompt": [{"type": "text", "text": "hang"}]}
    agent.write(request("p", "session/prompt", prompt))
    scripted_model.wait_for_requests(1)
    assert agent.close() == 0
    replies = [m for m in map(json.loads, agent.raw_stdout) if is_reply(m)]
    answer = [r for r in replies if r["id"] == "p"]
    assert len(answer) == 1 and "error" in answer[0], answer


# ---- 8. the echo agent refuses what it does not advertise ------------------------------
@pytest.fixture
def echo() -> Iterator[RawAgent]:
    agent = initialized(RawAgent([*ECHO_AGENT, "--chunks", "20", "--delay-ms", "20"]))
    yield agent
    agent.close()


@pytest.mark.parametrize(
    "block",
    [
        {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"},
        {"type": "audio", "data": "UklGRg==", "mimeType": "audio/wav"},
        {"type": "resource", "resource": {"uri": "file:///a", "text": "a"}},
        {"type": "_acme_block", "x": 1},
    ],
)
def test_echo_refuses_prompt_blocks_it_does_not_advertise(echo: RawAgent, block: dict):
    sid = new_session(echo)
    text = {"type": "text", "text": "hi"}
    echo.write(request("p", "session/prompt", {"sessionId": sid, "prompt": [text, block]}))
    reply = replies_until(echo, "p")[-1]
    assert reply["error"]["code"] == INVALID_PARAMS
    assert reply["error"]["data"] == {"type": block["type"]}
    link = {"type": "resource_link", "uri": "file:///a", "name": "a"}
    echo.write(request("ok", "session/prompt", {"sessionId": sid, "prompt": [text, link]}))
    assert "result" in replies_until(echo, "ok")[-1]


@pytest.mark.parametrize(
    "server",
    [
        {"type": "http", "name": "remote", "url": "https://mcp.example.com/mcp", "headers": []},
        {"type": "sse", "name": "old", "url": "https://mcp.example.com/sse", "headers": []},
        {"type": "stdio", "name": "tools", "command": "/bin/true", "args": [], "env": []},
    ],
)
def test_echo_refuses_mcp_servers_it_does_not_advertise(echo: RawAgent, server: dict):
    echo.write(request("n", "session/new", {"cwd": "/tmp", "mcpServers": [server]}))
    reply = replies_until(echo, "n")[-1]
    assert reply["error"]["code"] == INVALID_PARAMS
    assert reply["error"]["data"] == {"type": server["type"]}
    sid = new_session(echo)
    resume = {"sessionId": sid, "cwd": "/tmp", "mcpServers": [server]}
    echo.write(request("r", "session/resume", resume))
    assert replies_until(echo, "r")[-1]["error"]["code"] == INVALID_PARAMS


def turn_updates(agent: RawAgent, until_id: Any | None = None) -> list[dict[str, Any]]:
    """Updates up to the idle that ends the turn (and the reply ``until_id``, if given)."""
    seen: list[dict[str, Any]] = []
    answered = until_id is None
    while True:
        message = agent.recv()
        if is_reply(message) and message["id"] == until_id:
            answered = True
        elif message.get("method") == "session/update":
            seen.append(message["params"]["update"])
        if answered and seen and seen[-1].get("state") == "idle":
            return seen


@pytest.mark.parametrize("how", ["notification", "request", "close"])
def test_a_cancel_right_behind_the_prompt_still_ends_the_turn(echo: RawAgent, how: str):
    sid = new_session(echo)
    prompt = request(
        "p", "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "x"}]}
    )
    stop = {
        "notification": line(
            {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}}
        ),
        "request": request("c", "session/cancel", {"sessionId": sid}),
        "close": request("c", "session/close", {"sessionId": sid}),
    }[how]
    echo.write(prompt + stop)
    ack = replies_until(echo, "p")[-1]
    assert "result" in ack
    seen = turn_updates(echo, None if how == "notification" else "c")
    kinds = [u["sessionUpdate"] for u in seen]
    assert kinds[0] == "user_message" and seen[0]["messageId"] == ack["result"]["messageId"]
    assert seen[-1] == {"sessionUpdate": "state_update", "state": "idle", "stopReason": "cancelled"}
    assert [u.get("state") for u in seen if u["sessionUpdate"] == "state_update"] in (
        ["running", "idle"],
        ["idle"],
    )
    if how != "close":
        probe(echo)


def test_a_prompt_and_close_right_before_end_of_input_are_answered():
    agent = RawAgent([*ECHO_AGENT, "--chunks", "50", "--delay-ms", "50"])
    initialized(agent)
    sid = new_session(agent)
    text = [{"type": "text", "text": "x"}]
    agent.write(
        request("p", "session/prompt", {"sessionId": sid, "prompt": text})
        + request("c", "session/close", {"sessionId": sid})
    )
    assert agent.close() == 0
    out = [json.loads(raw) for raw in agent.raw_stdout]
    assert {r["id"] for r in out if is_reply(r)} >= {"p", "c"}
    idle = [m["params"]["update"] for m in out if m.get("method") == "session/update"][-1]
    assert idle == {"sessionUpdate": "state_update", "state": "idle", "stopReason": "cancelled"}
