"""The TS SDK's v2 HTTP client against a second server for a session the first one
made: both ``crow serve`` processes on one PostgreSQL store (``CROW_STORE_URL``)."""

from __future__ import annotations

import pytest
from crow_testing.fakemodel import Text
from crow_testing.serve_support import HttpServer, text_of
from test_ts_sdk import TS_DIR, run_driver

pytestmark = pytest.mark.interop


def test_the_ts_sdk_client_carries_on_a_session_on_another_server(
    crow, scripted_model, postgres_url, monkeypatch
):
    monkeypatch.setenv("CROW_STORE_URL", postgres_url)
    scripted_model.script(Text(text="said on A"), Text(text="said on B", chunks=3))
    first = crow()
    sid = first.new_session(cwd=str(TS_DIR))
    assert text_of(first.run_turn(sid, "on A")) == "said on A"
    second = HttpServer(env={"CROW_STORE_URL": postgres_url})
    try:
        report, _ = run_driver(
            "drive_http.mjs", "--url", second.url, "--session", sid, "--prompt", "on B"
        )
        assert report["sessionId"] == sid and report["stopReason"] == "end_turn"
        assert report["agentText"] == "said on B"
        replayed = [u for u in report["replayUpdates"] if u["sessionUpdate"] == "user_message"]
        assert [u["content"][0]["text"] for u in replayed] == ["on A", "on B"]
    finally:
        second.stop()
