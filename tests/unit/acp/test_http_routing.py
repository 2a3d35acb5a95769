"""Which SSE stream an outbound frame of an HTTP connection goes to."""

from __future__ import annotations

import orjson
import pytest

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
