"""The sans-I/O JSON-RPC core, byte table by byte table (ACP-V2.md §2-§3)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from crow.acp.connection import (
    MAX_HELD,
    Batch,
    CancelRequest,
    Connection,
    EncodeError,
    Notification,
    Request,
    Response,
    Send,
    decode,
    encode,
)
from crow.acp.errors import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    AcpUsageError,
    InvalidParams,
    MessageTooLarge,
    MethodNotFound,
)
from crow.acp.transports.stdio import StdioTransport

BAD_INPUT = [  # (line, expected code, reply id)
    (b'{"jsonrpc":"2.0","id":1,"method":', PARSE_ERROR, None),
    (b"{nope}", PARSE_ERROR, None),
    (b"42", INVALID_REQUEST, None),
    (b'"x"', INVALID_REQUEST, None),
    (b"null", INVALID_REQUEST, None),
    (b"true", INVALID_REQUEST, None),
    (b"[]", INVALID_REQUEST, None),
    (b'{"jsonrpc":"2.0","id":3}', INVALID_REQUEST, 3),
    (b'{"id":4,"method":"session/list"}', INVALID_REQUEST, 4),
    (b'{"jsonrpc":"2.0","id":"k","method":["m"]}', INVALID_REQUEST, "k"),
    (b'{"jsonrpc":"2.0","id":{"a":1},"method":"session/list"}', INVALID_REQUEST, None),
    (b'{"jsonrpc":"2.0","id":true,"method":"session/list"}', INVALID_REQUEST, None),
    (b'{"jsonrpc":"2.0","id":6,"method":"session/list","params":"x"}', INVALID_REQUEST, 6),
    (b'{"jsonrpc":"2.0","id":7,"method":"session/list","params":[1]}', INVALID_PARAMS, 7),
    (b'{"jsonrpc":"2.0","id":8,"method":"session/list","params":[]}', INVALID_PARAMS, 8),
    (b"[" * 1100 + b"]" * 1100, PARSE_ERROR, None),
    (b'{"a":' * 100_000 + b"1" + b"}" * 100_000, PARSE_ERROR, None),
    (b"\xff\xfe{}", PARSE_ERROR, None),
]


def ready() -> Connection:
    conn = Connection(require_initialize=True)
    conn.initialized()
    return conn


@pytest.mark.parametrize(("line", "code", "rid"), BAD_INPUT)
def test_bad_input_becomes_an_error_reply(line, code, rid):
    [event] = ready().receive(line)
    assert isinstance(event, Send)
    assert event.message["error"]["code"] == code
    assert event.message["id"] == rid and type(event.message["id"]) is type(rid)


@pytest.mark.parametrize(("line", "code", "rid"), BAD_INPUT)
async def test_bad_input_through_the_stdio_framing_whole_bytewise_and_joined(line, code, rid):
    good = b'{"jsonrpc":"2.0","id":99,"method":"session/list"}'
    for feed in ([line + b"\n" + good + b"\n"], [bytes([b]) for b in line + b"\n" + good + b"\n"]):
        reader = asyncio.StreamReader()
        for piece in feed:
            reader.feed_data(piece)
        reader.feed_eof()
        transport = StdioTransport(reader, writer=None)  # type: ignore[arg-type]
        conn = ready()
        first = conn.receive(await transport.read_frame())
        second = conn.receive(await transport.read_frame())
        assert first[0].message["error"]["code"] == code
        assert isinstance(second[0], Request) and second[0].id == 99
        assert await transport.read_frame() is None


async def test_stdio_framing_drops_blank_lines_and_a_partial_last_line():
    reader = asyncio.StreamReader()
    reader.feed_data(b'\n  \n{"a":1}\n{"b":')
    reader.feed_eof()
    transport = StdioTransport(reader, writer=None)  # type: ignore[arg-type]
    assert await transport.read_frame() == b'{"a":1}'
    assert await transport.read_frame() is None


async def test_stdio_framing_reports_an_oversized_line_and_goes_on():
    reader = asyncio.StreamReader()
    reader.feed_data(
        b'{"jsonrpc":"2.0","id":5,"method":"x","params":{"p":"' + b"y" * 5000 + b'"}}\n'
    )
    reader.feed_data(b'{"ok":1}\n')
    reader.feed_eof()
    transport = StdioTransport(reader, writer=None, max_message_bytes=1000)  # type: ignore[arg-type]
    with pytest.raises(MessageTooLarge) as info:
        await transport.read_frame()
    [reply] = ready().receive_oversized(info.value.prefix)  # type: ignore[attr-defined]
    assert reply.message["id"] == 5 and reply.message["error"]["code"] == INVALID_REQUEST
    assert await transport.read_frame() == b'{"ok":1}'


def test_requests_before_initialize_are_refused_and_notifications_dropped():
    conn = Connection(require_initialize=True)
    [refused] = conn.receive(b'{"jsonrpc":"2.0","id":1,"method":"session/new","params":{}}')
    assert refused.message["error"]["code"] == INVALID_REQUEST
    assert conn.receive(b'{"jsonrpc":"2.0","method":"session/cancel","params":{}}') == []
    [cancel] = conn.receive(
        b'{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":1}}'
    )
    assert isinstance(cancel, CancelRequest)
    [init] = conn.receive(b'{"jsonrpc":"2.0","id":2,"method":"initialize","params":{}}')
    assert isinstance(init, Request)


def test_initialize_twice_is_refused():
    conn = ready()
    [again] = conn.receive(b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}')
    assert again.message["error"]["code"] == INVALID_REQUEST


def test_responses_match_whatever_the_id_type():
    conn = Connection()
    rid, msg = conn.request("session/request_permission", {"x": 1})
    assert msg == {
        "jsonrpc": "2.0",
        "id": rid,
        "method": "session/request_permission",
        "params": {"x": 1},
    }
    [response] = conn.receive(encode({"jsonrpc": "2.0", "id": str(rid), "result": {"ok": 1}}))
    assert isinstance(response, Response) and response.result == {"ok": 1}
    assert response.method == "session/request_permission"


def test_stray_and_malformed_responses_are_ignored():
    conn = Connection()
    assert conn.receive(b'{"jsonrpc":"2.0","id":42,"result":{}}') == []
    assert conn.receive(b'{"jsonrpc":"2.0","id":null,"error":{"code":1,"message":"x"}}') == []


def test_an_id_in_use_cannot_be_reused():
    conn = ready()
    [first] = conn.receive(b'{"jsonrpc":"2.0","id":1,"method":"a"}')
    [second] = conn.receive(b'{"jsonrpc":"2.0","id":1,"method":"b"}')
    assert isinstance(first, Request)
    assert second.message["error"]["code"] == INVALID_REQUEST
    conn.result(1, {})
    [third] = conn.receive(b'{"jsonrpc":"2.0","id":1,"method":"c"}')
    assert isinstance(third, Request)


def test_answering_twice_is_our_bug():
    conn = ready()
    conn.receive(b'{"jsonrpc":"2.0","id":1,"method":"a"}')
    assert conn.error(1, MethodNotFound.for_method("a"))["error"]["code"] == METHOD_NOT_FOUND
    with pytest.raises(AcpUsageError):
        conn.result(1, {})


def test_batch_entries_become_one_batch_when_accepted():
    conn = Connection(accept_batches=True)
    [batch] = conn.receive(
        b'[{"jsonrpc":"2.0","id":10,"method":"session/list","params":{}},'
        b'{"jsonrpc":"2.0","method":"_acme/n"},1]'
    )
    assert isinstance(batch, Batch)
    assert [r.id for r in batch.requests] == [10]
    assert [n.method for n in batch.notifications] == ["_acme/n"]
    assert [e["error"]["code"] for e in batch.errors] == [INVALID_REQUEST]


def test_batches_are_refused_by_default_as_the_ts_sdk_does():
    conn = Connection()
    [reply] = conn.receive(b'[{"jsonrpc":"2.0","id":10,"method":"session/list"}]')
    assert reply.message["error"]["code"] == INVALID_REQUEST and reply.message["id"] is None


def test_forgetting_a_request_yields_a_cancel_request():
    conn = Connection()
    rid, _ = conn.request("x", None)
    assert conn.forget_request(rid) == {
        "jsonrpc": "2.0",
        "method": "$/cancel_request",
        "params": {"requestId": rid},
    }
    assert conn.forget_request(rid) is None
    assert conn.receive(encode({"jsonrpc": "2.0", "id": rid, "result": {}})) == []


def test_notifications_are_events():
    [note] = ready().receive(
        b'{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"s"}}'
    )
    assert note == Notification(method="session/cancel", params={"sessionId": "s"})


def test_encoding_is_one_compact_line():
    frame = encode({"jsonrpc": "2.0", "method": "m", "params": {"t": "a\nb", "u": "é"}})
    assert b"\n" not in frame and b" " not in frame


# ---- decode and encode never fail on what a peer sends -----------------------------
DECODABLE = [  # (frame, value)
    (b'{"id":"\\ud800"}', {"id": "\ud800"}),  # orjson refuses a lone surrogate escape
    (b"[" * 1000 + b"]" * 1000, "nested"),
    # orjson reads integers past 64 bits as floats: an id stays the integer it was
    (b'{"id":123456789012345678901234567890}', {"id": 123456789012345678901234567890}),
    (b'{"id":-18446744073709551617}', {"id": -18446744073709551617}),
    (b'{"id":1.5}', {"id": 1.5}),
]


@pytest.mark.parametrize(("frame", "value"), DECODABLE)
def test_decode_takes_valid_json_orjson_refuses(frame, value):
    got = decode(frame)
    if value != "nested":
        assert got == value
        assert [type(v) for v in got.values()] == [type(v) for v in value.values()]


@pytest.mark.parametrize(
    "frame",
    [b"[" * 1025 + b"]" * 1025, b"[" * 500_000, b'{"a":' * 50_000, b"\xff", b"\xc3(", b"{,}"],
)
def test_decode_raises_only_value_error(frame):
    with pytest.raises(ValueError):
        decode(frame)


def deep(levels: int) -> Any:
    value: Any = "bottom"
    for _ in range(levels):
        value = [value]
    return value


ENCODABLE = [
    {"jsonrpc": "2.0", "id": "\ud800", "result": {}},  # echoed from a peer
    {"jsonrpc": "2.0", "id": 2**70, "error": {"code": -32601, "message": "\udfff"}},
    {"jsonrpc": "2.0", "method": "n", "params": {"deep": deep(400)}},  # past orjson's 254
    {"jsonrpc": "2.0", "method": "n", "params": {"t": "line\nbreak \u2028 é"}},
]


@pytest.mark.parametrize("message", ENCODABLE)
def test_encode_writes_what_orjson_refuses_as_one_line_of_valid_json(message):
    frame = encode(message)
    assert b"\n" not in frame
    assert json.loads(frame) == message


@pytest.mark.parametrize("message", [{"deep": deep(5000)}, {"x": object()}, {"x": float("nan")}])
def test_encode_raises_encode_error_when_json_cannot_carry_it(message):
    if isinstance(message.get("x"), float):
        assert encode(message) == b'{"x":null}'  # orjson's choice: still valid JSON
        return
    with pytest.raises(EncodeError):
        encode(message)


# ---- a notification method sent with an id -------------------------------------------
def test_cancel_request_sent_as_a_request_cancels_and_is_answered():
    cancel, reply = ready().receive(
        b'{"jsonrpc":"2.0","id":9,"method":"$/cancel_request","params":{"requestId":3}}'
    )
    assert cancel == CancelRequest(id=3)
    assert reply.message == {"jsonrpc": "2.0", "id": 9, "result": {}}


# ---- requests pipelined behind initialize -------------------------------------------
INIT = b'{"jsonrpc":"2.0","id":"i","method":"initialize","params":{}}'
INIT2 = b'{"jsonrpc":"2.0","id":"j","method":"initialize","params":{}}'
NEW = b'{"jsonrpc":"2.0","id":1,"method":"session/new","params":{}}'
LIST = b'{"jsonrpc":"2.0","id":2,"method":"session/list"}'
NOTE = b'{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"s"}}'
CANCEL_INIT = b'{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":"i"}}'


def summary(events: list[Any]) -> list[Any]:
    """Events in short: a request's id, a notification's method, an error's code."""
    out: list[Any] = []
    for event in events:
        if isinstance(event, Request):
            out.append(event.id)
        elif isinstance(event, Notification):
            out.append(event.method)
        elif isinstance(event, CancelRequest):
            out.append(("cancel", event.id))
        else:
            out.append(event.message["error"]["code"])
    return out


HOLD_CASES = [  # (frames after INIT, outcome of INIT, released events, then pending)
    ([NEW, NOTE, LIST], "ok", [1, "session/cancel", 2], False),
    ([NEW, NOTE, LIST], "fail", [INVALID_REQUEST, INVALID_REQUEST], False),
    ([NEW, INIT2, LIST], "ok", [1, INVALID_REQUEST, 2], False),
    ([NEW, INIT2, LIST], "fail", [INVALID_REQUEST, "j"], True),  # LIST waits for INIT2
    ([b"{bad", NEW], "ok", [1], False),  # a parse error is answered at once, not held
]


@pytest.mark.parametrize(("frames", "outcome", "released", "pending"), HOLD_CASES)
def test_messages_behind_an_initialize_are_held_until_it_is_answered(
    frames, outcome, released, pending
):
    conn = Connection(require_initialize=True)
    [init] = conn.receive(INIT)
    assert isinstance(init, Request)
    at_once = [e for f in frames for e in conn.receive(f)]
    assert all(isinstance(e, Send) and e.message["error"]["code"] == PARSE_ERROR for e in at_once)
    assert conn.release() == []  # nothing moves before the answer
    if outcome == "ok":
        conn.initialized()
        conn.result("i", {})
    else:
        conn.error("i", InvalidParams("bad"))
    assert summary(conn.release()) == released
    assert conn.release() == []
    if pending:
        conn.error("j", InvalidParams("bad again"))
        assert summary(conn.release()) == [INVALID_REQUEST]


def test_a_cancel_of_the_initialize_itself_is_not_held():
    conn = Connection(require_initialize=True)
    conn.receive(INIT)
    assert conn.receive(NEW) == []
    assert summary(conn.receive(CANCEL_INIT)) == [("cancel", "i")]


def test_what_is_held_is_bounded():
    conn = Connection(require_initialize=True)
    conn.receive(INIT)
    for n in range(MAX_HELD):
        assert conn.receive(b'{"jsonrpc":"2.0","id":%d,"method":"m"}' % (n + 10)) == []
    [refused] = conn.receive(NEW)
    assert refused.message["id"] == 1 and refused.message["error"]["code"] == INVALID_REQUEST
    assert conn.receive(NOTE) == []  # a notification past the bound is dropped
    conn.result("i", {})
    assert len(conn.release()) == MAX_HELD


def test_held_messages_come_back_after_a_success_through_result_alone():
    """The answer itself opens the gate, even if ``initialized()`` was not called."""
    conn = Connection(require_initialize=True)
    conn.receive(INIT)
    conn.receive(LIST)
    conn.result("i", {})
    assert conn.is_initialized and summary(conn.release()) == [2]


@pytest.mark.parametrize(
    ("prefix", "rid"),
    [
        (b'{"jsonrpc":"2.0","id":"a\\qb","method":"x","params":{"p":"', None),  # bad escape
        (b'{"jsonrpc":"2.0","id":"\\ud800","method":"x"', "\ud800"),
        (b'{"jsonrpc":"2.0","id":12,"method":"x"', 12),
        (b"\xff\xfe", None),
    ],
)
def test_an_oversized_frame_is_answered_whatever_its_prefix(prefix, rid):
    [reply] = ready().receive_oversized(prefix)
    assert reply.message["id"] == rid and reply.message["error"]["code"] == INVALID_REQUEST
    encode(reply.message)


def test_an_oversized_reply_to_our_request_fails_that_request():
    """A reply too large to read must not leave its caller waiting forever."""
    conn = ready()
    rid, _ = conn.request("session/list", {})
    [failed] = conn.receive_oversized(b'{"jsonrpc":"2.0","id":%d,"result":{"sessions":[' % rid)
    assert isinstance(failed, Response) and failed.method == "session/list"
    assert failed.error is not None and failed.error["code"] == INVALID_REQUEST
    assert "too large" in failed.error["message"]
    assert conn.receive(b'{"jsonrpc":"2.0","id":%d,"result":{}}' % rid) == []  # settled once
