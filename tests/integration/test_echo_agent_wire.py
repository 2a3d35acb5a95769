"""The echo agent as a real subprocess, driven with raw bytes (ACP-V2.md §2-§7).

Every case ends with a liveness probe: the connection survived the bad input.
"""

from __future__ import annotations

import json
import time

import pytest

from crow.acp.errors import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    RESOURCE_NOT_FOUND,
    UNSUPPORTED_PROTOCOL_VERSION,
)

# (raw line, expected code, expected reply id) — CONFORMANCE.md A.1
BAD_INPUT = [
    (b'{"jsonrpc":"2.0","id":1,"method":', PARSE_ERROR, None),
    (b"\xff\xfe not utf-8", PARSE_ERROR, None),
    (b"42", INVALID_REQUEST, None),
    (b'"hello"', INVALID_REQUEST, None),
    (b"null", INVALID_REQUEST, None),
    (b"[]", INVALID_REQUEST, None),
    (b'{"jsonrpc":"2.0","id":5}', INVALID_REQUEST, 5),
    (b'{"jsonrpc":"1.0","id":6,"method":"session/list"}', INVALID_REQUEST, 6),
    (b'{"jsonrpc":"2.0","id":7,"method":42}', INVALID_REQUEST, 7),
    (b'{"jsonrpc":"2.0","id":null,"method":"session/list"}', INVALID_REQUEST, None),
    (b'{"jsonrpc":"2.0","id":1.5,"method":"session/list"}', INVALID_REQUEST, None),
    (b'{"jsonrpc":"2.0","id":8,"method":"session/list","params":[1]}', INVALID_PARAMS, 8),
    (b'{"jsonrpc":"2.0","id":13,"method":"session/list","params":"x"}', INVALID_REQUEST, 13),
    (b'{"jsonrpc":"2.0","id":"7","method":"nope"}', METHOD_NOT_FOUND, "7"),
    (b'{"jsonrpc":"2.0","id":2,"method":"session/frobnicate","params":{}}', METHOD_NOT_FOUND, 2),
    (b'{"jsonrpc":"2.0","id":3,"method":"_acme/echo","params":{}}', METHOD_NOT_FOUND, 3),
    (b'{"jsonrpc":"2.0","id":4,"method":"session/load","params":{}}', METHOD_NOT_FOUND, 4),
    (b'{"jsonrpc":"2.0","id":9,"method":"session/new","params":{}}', INVALID_PARAMS, 9),
    (b'{"jsonrpc":"2.0","id":10,"method":"session/new","params":{"cwd":42}}', INVALID_PARAMS, 10),
    (
        b'{"jsonrpc":"2.0","id":11,"method":"session/new","params":{"cwd":"rel/dir"}}',
        INVALID_PARAMS,
        11,
    ),
    (
        b'{"jsonrpc":"2.0","id":12,"method":"session/list","params":{"cursor":"garbage"}}',
        INVALID_PARAMS,
        12,
    ),
]


def probe(agent) -> None:
    response, _ = agent.request("session/list", {}, id=999)
    assert "result" in response


@pytest.mark.parametrize(
    ("line", "code", "rid"), BAD_INPUT, ids=[str(c[0][:40]) for c in BAD_INPUT]
)
def test_bad_input_gets_the_right_error_and_the_connection_survives(echo_agent, line, code, rid):
    echo_agent.initialize()
    echo_agent.write(line + b"\n")
    reply = echo_agent.recv()
    assert reply["error"]["code"] == code
    assert reply["id"] == rid and type(reply["id"]) is type(rid)
    assert isinstance(reply["error"]["message"], str) and reply["error"]["message"]
    probe(echo_agent)


def test_invalid_params_carry_the_validation_detail(echo_agent):
    echo_agent.initialize()
    response, _ = echo_agent.request("session/new", {"cwd": 42})
    data = response["error"]["data"]
    assert isinstance(data, list) and data[0]["loc"] == ["cwd"]


def test_bad_input_in_one_read_with_the_next_message(echo_agent):
    echo_agent.initialize()
    echo_agent.write(
        b'{"jsonrpc":"2.0","id":1,"method":\n'
        b'{"jsonrpc":"2.0","id":2,"method":"session/list","params":{}}\n'
    )
    assert echo_agent.recv()["error"]["code"] == PARSE_ERROR
    assert "result" in echo_agent.recv()


def test_a_request_split_across_writes_is_one_message(echo_agent):
    echo_agent.initialize()
    for byte in b'{"jsonrpc":"2.0","id":77,"method":"session/list","params":{}}\n':
        echo_agent.write(bytes([byte]))
    reply = echo_agent.recv()
    assert reply["id"] == 77 and "result" in reply


def test_unknown_notifications_and_stray_responses_get_no_reply(echo_agent):
    echo_agent.initialize()
    echo_agent.send({"jsonrpc": "2.0", "method": "_acme/ping", "params": {}})
    echo_agent.send({"jsonrpc": "2.0", "method": "acme/ping"})
    echo_agent.send({"jsonrpc": "2.0", "id": 12345, "result": {}})
    echo_agent.write(b"\n   \n")
    assert echo_agent.nothing_within(0.3)
    probe(echo_agent)


def test_ids_keep_their_json_type(echo_agent):
    echo_agent.initialize()
    by_string, _ = echo_agent.request("session/list", {}, id="abc")
    by_int, _ = echo_agent.request("session/list", {}, id=7)
    by_digit_string, _ = echo_agent.request("session/list", {}, id="7")
    assert by_string["id"] == "abc"
    assert by_int["id"] == 7 and type(by_int["id"]) is int
    assert by_digit_string["id"] == "7"


def test_a_batch_is_refused_with_one_error_and_nothing_runs(echo_agent):
    """§2.4 [T], the default: one -32600 with id null; no entry is processed."""
    echo_agent.initialize()
    echo_agent.write(
        b'[{"jsonrpc":"2.0","id":10,"method":"session/new","params":{"cwd":"/b"}},1]\n'
    )
    reply = echo_agent.recv()
    assert reply["error"]["code"] == INVALID_REQUEST and reply["id"] is None
    listed, _ = echo_agent.request("session/list", {})
    assert listed["result"]["sessions"] == []


def test_batch_is_answered_as_one_array_when_accepted(make_agent):
    """§2.4 [H], behind --accept-batches: one array back, no entry for notifications."""
    echo_agent = make_agent("--accept-batches")
    echo_agent.initialize()
    echo_agent.write(
        b'[{"jsonrpc":"2.0","id":10,"method":"session/list","params":{}},'
        b'{"jsonrpc":"2.0","method":"_acme/n"},1]\n'
    )
    reply = echo_agent.recv()
    assert isinstance(reply, list) and len(reply) == 2
    by_id = {json.dumps(r["id"]): r for r in reply}
    assert "result" in by_id["10"]
    assert by_id["null"]["error"]["code"] == INVALID_REQUEST
    echo_agent.write(b'[{"jsonrpc":"2.0","method":"_acme/n"}]\n')
    assert echo_agent.nothing_within(0.3)
    probe(echo_agent)


def test_oversized_message_is_refused_and_the_connection_survives(make_agent):
    agent = make_agent("--max-message-bytes", "4096")
    agent.initialize()
    big = {
        "jsonrpc": "2.0",
        "id": 31,
        "method": "session/new",
        "params": {"cwd": "/tmp", "_meta": {"pad": "x" * 10000}},
    }
    agent.send(big)
    reply = agent.recv()
    assert reply["error"]["code"] == INVALID_REQUEST and reply["id"] == 31
    assert "too large" in reply["error"]["message"].lower()
    probe(agent)


# ---- initialize (§3) ------------------------------------------------------------
def test_requests_before_initialize_are_refused(echo_agent):
    response, _ = echo_agent.request("session/new", {"cwd": "/tmp"})
    assert response["error"]["code"] == INVALID_REQUEST
    echo_agent.send({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": "x"}})
    assert echo_agent.nothing_within(0.2)
    assert echo_agent.initialize()["result"]["protocolVersion"] == 2


def test_initialize_answers_v2_shape_with_object_markers(echo_agent):
    result = echo_agent.initialize()["result"]
    assert result["protocolVersion"] == 2
    assert isinstance(result["info"]["name"], str) and isinstance(result["info"]["version"], str)
    assert "agentCapabilities" not in result and "agentInfo" not in result
    assert result["capabilities"]["session"] == {}


def test_newer_client_version_is_answered_with_2(echo_agent):
    response, _ = echo_agent.request(
        "initialize", {"protocolVersion": 3, "info": {"name": "t", "version": "1"}}
    )
    assert response["result"]["protocolVersion"] == 2


def test_v1_client_gets_unsupported_version(echo_agent):
    response, _ = echo_agent.request(
        "initialize",
        {
            "protocolVersion": 1,
            "clientCapabilities": {},
            "clientInfo": {"name": "v1", "version": "1"},
        },
    )
    assert response["error"]["code"] == UNSUPPORTED_PROTOCOL_VERSION
    assert response["error"]["data"] == {"requested": 1, "supported": [2]}
    assert echo_agent.initialize()["result"]["protocolVersion"] == 2


@pytest.mark.parametrize(
    "params",
    [
        {"info": {"name": "t", "version": "1"}},
        {"protocolVersion": "two", "info": {"name": "t", "version": "1"}},
        {"protocolVersion": "2", "info": {"name": "t", "version": "1"}},
        {"protocolVersion": 2},
    ],
)
def test_malformed_initialize_leaves_the_connection_uninitialized(echo_agent, params):
    response, _ = echo_agent.request("initialize", params)
    assert response["error"]["code"] == INVALID_PARAMS
    refused, _ = echo_agent.request("session/list", {})
    assert refused["error"]["code"] == INVALID_REQUEST
    assert echo_agent.initialize()["result"]["protocolVersion"] == 2


def test_second_initialize_is_refused(echo_agent):
    echo_agent.initialize()
    sid = echo_agent.new_session()
    again = echo_agent.initialize()
    assert again["error"]["code"] == INVALID_REQUEST
    listed, _ = echo_agent.request("session/list", {})
    assert sid in [s["sessionId"] for s in listed["result"]["sessions"]]


# ---- sessions and prompts (§5-§7) -----------------------------------------------
def updates(messages):
    return [m["params"]["update"] for m in messages if m.get("method") == "session/update"]


def is_idle(update):
    return update.get("sessionUpdate") == "state_update" and update["state"] == "idle"


def test_prompt_lifecycle_in_order(make_agent):
    agent = make_agent("--chunks", "3")
    agent.initialize()
    sid = agent.new_session()
    response, before = agent.request(
        "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "hello"}]}
    )
    message_id = response["result"]["messageId"]
    seen = updates(before + agent.until_update(is_idle))
    kinds = [u["sessionUpdate"] for u in seen]
    assert kinds == [
        "user_message",
        "state_update",
        "agent_message_chunk",
        "agent_message_chunk",
        "agent_message_chunk",
        "agent_message",
        "state_update",
    ]
    assert seen[0]["messageId"] == message_id
    assert seen[0]["content"] == [{"type": "text", "text": "hello"}]
    assert seen[1]["state"] == "running"
    assert "".join(u["content"]["text"] for u in seen[2:5]) == "Echo: hello"
    assert seen[5]["content"] == [{"type": "text", "text": "Echo: hello"}]
    assert seen[6] == {"sessionUpdate": "state_update", "state": "idle", "stopReason": "end_turn"}


def test_prompt_is_acknowledged_before_the_turn_ends(make_agent):
    agent = make_agent("--chunks", "5", "--delay-ms", "100")
    agent.initialize()
    sid = agent.new_session()
    _, before = agent.request(
        "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "slow"}]}
    )
    assert not any(is_idle(u) for u in updates(before))
    agent.until_update(is_idle)


def test_second_prompt_while_busy_is_refused(make_agent):
    agent = make_agent("--chunks", "10", "--delay-ms", "100")
    agent.initialize()
    sid = agent.new_session()
    prompt = {"sessionId": sid, "prompt": [{"type": "text", "text": "one"}]}
    agent.request("session/prompt", prompt)
    busy, _ = agent.request("session/prompt", prompt)
    assert busy["error"]["code"] == INVALID_PARAMS
    agent.send({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}})
    assert agent.until_update(is_idle)[-1]["params"]["update"]["stopReason"] == "cancelled"


def test_cancel_ends_the_turn_with_cancelled(make_agent):
    agent = make_agent("--chunks", "50", "--delay-ms", "50")
    agent.initialize()
    sid = agent.new_session()
    agent.request("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "x"}]})
    agent.until_update(lambda u: u.get("sessionUpdate") == "agent_message_chunk")
    started = time.monotonic()
    agent.send({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}})
    idle = agent.until_update(is_idle)[-1]["params"]["update"]
    assert idle["stopReason"] == "cancelled"
    assert time.monotonic() - started < 5  # bounded wait, not a timing assertion of speed
    probe(agent)


def test_close_while_running_sends_cancelled_idle_before_the_reply(make_agent):
    agent = make_agent("--chunks", "50", "--delay-ms", "50")
    agent.initialize()
    sid = agent.new_session()
    agent.request("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "x"}]})
    agent.until_update(lambda u: u.get("state") == "running")
    response, before = agent.request("session/close", {"sessionId": sid})
    assert response["result"] == {}
    assert [u for u in updates(before) if is_idle(u)][-1]["stopReason"] == "cancelled"
    after, _ = agent.request(
        "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "y"}]}
    )
    assert after["error"]["code"] == RESOURCE_NOT_FOUND
    assert after["error"]["data"] == {"sessionId": sid}


def test_close_is_idempotent(echo_agent):
    echo_agent.initialize()
    sid = echo_agent.new_session()
    for target in (sid, sid, "nope"):
        response, _ = echo_agent.request("session/close", {"sessionId": target})
        assert response["result"] == {}


def test_resume_with_replay_repeats_history_then_state_then_reply(make_agent):
    agent = make_agent("--chunks", "2")
    agent.initialize()
    sid = agent.new_session()
    response, before = agent.request(
        "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "remember me"}]}
    )
    live = updates(before + agent.until_update(is_idle))
    agent.request("session/close", {"sessionId": sid})
    resumed, replay_msgs = agent.request(
        "session/resume", {"sessionId": sid, "cwd": "/tmp", "replayFrom": {"type": "start"}}
    )
    assert resumed["result"] == {}
    replay = updates(replay_msgs)
    assert [u["sessionUpdate"] for u in replay] == ["user_message", "agent_message", "state_update"]
    assert replay[0]["messageId"] == response["result"]["messageId"]
    live_agent_id = next(u["messageId"] for u in live if u["sessionUpdate"] == "agent_message")
    assert replay[1]["messageId"] == live_agent_id
    assert replay[1]["content"] == [{"type": "text", "text": "Echo: remember me"}]
    assert replay[2] == {"sessionUpdate": "state_update", "state": "idle", "stopReason": "end_turn"}


def test_resume_without_replay_sends_only_the_state(echo_agent):
    echo_agent.initialize()
    sid = echo_agent.new_session()
    _, before = echo_agent.request("session/resume", {"sessionId": sid, "cwd": "/tmp"})
    assert updates(before) == [{"sessionUpdate": "state_update", "state": "idle"}]


def test_resume_with_an_unknown_cursor_is_refused_without_replay(echo_agent):
    echo_agent.initialize()
    sid = echo_agent.new_session()
    response, before = echo_agent.request(
        "session/resume", {"sessionId": sid, "cwd": "/tmp", "replayFrom": {"type": "_acme_from"}}
    )
    assert response["error"]["code"] == INVALID_PARAMS
    assert updates(before) == []


def test_resume_unknown_session_is_32002(echo_agent):
    echo_agent.initialize()
    response, _ = echo_agent.request("session/resume", {"sessionId": "nope", "cwd": "/tmp"})
    assert response["error"]["code"] == RESOURCE_NOT_FOUND
    assert response["error"]["data"] == {"sessionId": "nope"}


def test_list_filters_by_cwd_and_pages(echo_agent):
    echo_agent.initialize()
    ids = {echo_agent.new_session("/tmp/a") for _ in range(60)}
    echo_agent.new_session("/tmp/b")
    seen: list[str] = []
    params: dict = {"cwd": "/tmp/a"}
    while True:
        page, _ = echo_agent.request("session/list", params)
        seen += [s["sessionId"] for s in page["result"]["sessions"]]
        if "nextCursor" not in page["result"]:
            break
        params = {"cwd": "/tmp/a", "cursor": page["result"]["nextCursor"]}
    assert len(seen) == len(set(seen)) == 60 and set(seen) == ids
    empty, _ = echo_agent.request("session/list", {"cwd": "/nonexistent"})
    assert empty["result"]["sessions"] == []


# ---- the wire itself (§2) ---------------------------------------------------------
def test_stdout_carries_only_json_rpc_lines(make_agent):
    agent = make_agent("--chunks", "4")
    agent.initialize()
    sid = agent.new_session()
    agent.request(
        "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "a\nb"}]}
    )
    agent.until_update(is_idle)
    agent.close()
    assert agent.raw_stdout
    for line in agent.raw_stdout:
        assert line.endswith(b"\n") and line.count(b"\n") == 1
        message = json.loads(line)
        assert isinstance(message, dict) and message["jsonrpc"] == "2.0"


def test_exits_promptly_when_stdin_closes_mid_turn(make_agent):
    agent = make_agent("--chunks", "1000", "--delay-ms", "100")
    agent.initialize()
    sid = agent.new_session()
    agent.request("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "x"}]})
    agent.until_update(lambda u: u.get("sessionUpdate") == "agent_message_chunk")
    assert agent.proc.stdin is not None
    agent.proc.stdin.close()
    assert agent.proc.wait(timeout=5) == 0
