"""The ``session/update`` frame layout (crow.acp.frames): what one side writes, the
other reads back, and the bytes are the notification ACP defines."""

from __future__ import annotations

import orjson
import pytest

from crow.acp.frames import encode_update, session_of_update

UPDATE = b'{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hi"}}'


@pytest.mark.parametrize("seq", [None, 0, 41])
@pytest.mark.parametrize("session_id", ["sess_1", "s\u00e9ance", ""])
def test_a_frame_reads_back_as_it_was_written(session_id, seq):
    frame = encode_update(session_id, UPDATE, seq)
    meta = {} if seq is None else {"_meta": {"crow/seq": seq}}
    params = {"sessionId": session_id, "update": orjson.loads(UPDATE), **meta}
    assert orjson.loads(frame) == {"jsonrpc": "2.0", "method": "session/update", "params": params}
    assert session_of_update(frame) == session_id


@pytest.mark.parametrize(
    "frame",
    [
        encode_update('odd"id\\', UPDATE, 1),  # escaped in JSON: the caller parses it
        orjson.dumps({"jsonrpc": "2.0", "method": "session/update", "params": {}}),
        orjson.dumps({"jsonrpc": "2.0", "id": 5, "result": {}}),
        b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"unterminated',
    ],
)
def test_any_other_frame_is_left_to_the_parser(frame):
    assert session_of_update(frame) is None
