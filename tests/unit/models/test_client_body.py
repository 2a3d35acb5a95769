"""The body of a model request: bytes Crow encodes itself (orjson, json as the fallback)."""

from __future__ import annotations

import json

from crow.models.client import _encode


def test_the_request_body_is_the_request_as_json():
    request = {"model": "m", "messages": [{"role": "user", "content": "héllo"}], "stream": True}
    assert json.loads(_encode(request)) == request


def test_a_lone_surrogate_is_escaped_rather_than_refused():
    request = {"messages": [{"role": "user", "content": "half a pair: \ud800"}]}
    body = _encode(request)
    assert b"\\ud800" in body and json.loads(body) == request
