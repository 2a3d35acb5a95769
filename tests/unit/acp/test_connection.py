"""The sans-I/O JSON-RPC core, byte table by byte table (ACP-V2.md §2-§3)."""

from __future__ import annotations

import asyncio

import pytest

from crow.acp.connection import (
    Batch,
    CancelRequest,
    Connection,
    Notification,
    Request,
    Response,
    Send,
    encode,
)
from crow.acp.errors import (
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    AcpUsageError,
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
