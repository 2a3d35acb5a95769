"""Which SSE stream an outbound frame of an HTTP connection goes to."""

from __future__ import annotations

import orjson
import pytest

from crow.acp.transports.http_requests import session_route as _session_route
from crow.acp.transports.http_server import HttpLimits, HttpTransport
from crow.agent.watchers import update_frame


def update(session_id: str) -> bytes:
    return update_frame(session_id, b'{"sessionUpdate":"agent_message_chunk"}', 7)


@pytest.mark.parametrize(
    ("frame", "stream"),
    [
        (update("sess_1"), "sess_1"),
        (update('odd"id\\\u00e9'), 'odd"id\\\u00e9'),  # escaped in JSON: parsed
        (update("s\u00e9ance"), "s\u00e9ance"),  # UTF-8 as it is
        (orjson.dumps({"jsonrpc": "2.0", "method": "x", "params": {"sessionId": "s2"}}), "s2"),
        (orjson.dumps({"jsonrpc": "2.0", "method": "x", "params": {}}), None),
        (orjson.dumps({"jsonrpc": "2.0", "id": 5, "result": {}}), None),
    ],
)
async def test_a_frame_goes_to_its_sessions_stream(frame, stream):
    transport = HttpTransport(id="c", limits=HttpLimits())
    await transport.write_frames([frame])
    assert {key: list(s.frames) for key, s in transport.streams.items()} == {stream: [frame]}


def response(rid: int) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "id": rid, "result": {}})


async def test_a_session_attached_without_its_header_goes_to_the_connection_until_opened():
    """session/load without Acp-Session-Id (the Python SDK's client): its answer and the
    session's traffic come on the connection's stream until the client opens the
    session's own."""
    transport = HttpTransport(id="c", limits=HttpLimits())
    load = {"jsonrpc": "2.0", "id": 4, "method": "session/load", "params": {"sessionId": "s"}}
    assert _session_route(transport, load, None) is None
    prompt = {"jsonrpc": "2.0", "id": 5, "method": "session/prompt", "params": {"sessionId": "s"}}
    assert _session_route(transport, prompt, "s") == "s"
    transport.request_sessions["5"] = "s"
    await transport.write_frames([update("s"), response(4), response(5)])
    assert list(transport.stream(None).frames) == [update("s"), response(4), response(5)]
    transport.opened(transport.stream("s"))
    await transport.write_frames([update("s")])
    assert list(transport.stream("s").frames) == [update("s")]
    assert len(transport.stream(None).frames) == 3


async def test_a_session_stream_its_reader_left_empty_is_forgotten():
    transport = HttpTransport(id="c", limits=HttpLimits())
    for session in ("unknown", "busy"):
        transport.opened(transport.stream(session))
    await transport.write_frames([update("busy")])
    for session in ("unknown", "busy"):
        transport.left(transport.streams[session])
    assert set(transport.streams) == {"busy"}  # what it holds waits for the next reader


async def test_too_many_unread_session_streams_drop_the_connection():
    transport = HttpTransport(id="c", limits=HttpLimits(max_session_streams=3))
    await transport.write_frames([update(f"s{i}") for i in range(3)])
    assert not transport.closed
    await transport.write_frames([update("s3")])
    assert transport.closed and "session streams" in (transport.dropped or "")
