"""What one client can make ``crow serve`` store: prompt size, titles, directories.

Each refusal is a ``-32602`` with a one-line reason, and nothing is stored.
"""

from __future__ import annotations

from crow_testing.fakemodel import Text
from crow_testing.serve_support import notes, updates

from crow.acp.errors import INVALID_PARAMS, INVALID_REQUEST


def test_a_prompt_over_the_limit_is_refused_and_not_stored(crow, scripted_model):
    scripted_model.script(Text(text="small is fine"))
    agent = crow(extra="[limits]\nmax_prompt_mib = 0.5\n")
    sid = agent.new_session()
    refused, before = agent.prompt(sid, "x" * (600 * 1024))
    assert refused["error"]["code"] == INVALID_PARAMS
    assert "limits.max_prompt_mib" in refused["error"]["message"]
    assert refused["error"]["data"]["limit"] == 512 * 1024
    assert not [u for u in updates(before) if u["sessionUpdate"] != "available_commands_update"]
    seen = agent.run_turn(sid, "y" * (400 * 1024))
    assert seen[-1]["stopReason"] == "end_turn"
    _, replayed = agent.resume(sid, replayFrom={"type": "start"})
    sent = [u for u in replayed if u["sessionUpdate"] == "user_message"]
    assert len(sent) == 1 and sent[0]["content"][0]["text"].startswith("y")


def test_the_default_limit_refuses_a_ten_megabyte_prompt(crow):
    agent = crow()
    refused, _ = agent.prompt(agent.new_session(), "z" * (10 * 1024 * 1024))
    assert refused["error"]["code"] == INVALID_PARAMS
    assert "at most 8 MiB" in refused["error"]["message"]


def test_a_new_session_needs_existing_directories(crow, tmp_path):
    agent = crow()
    missing = str(tmp_path / "nope")
    for params in ({"cwd": missing}, {"cwd": "/tmp", "additionalDirectories": [missing]}):
        refused, _ = agent.request("session/new", params)
        assert refused["error"]["code"] == INVALID_PARAMS
        assert "is not an existing directory" in refused["error"]["message"]
    listed, _ = agent.request("session/list", {})
    assert listed["result"]["sessions"] == []


def test_a_title_has_a_bounded_length(crow):
    agent = crow()
    sid = agent.new_session()
    seen = agent.run_turn(sid, "/title " + "t" * 5000)
    assert any("at most 200 characters" in n for n in notes(seen))
    agent.run_turn(sid, "/title A fine title")
    listed, _ = agent.request("session/list", {})
    assert [s.get("title") for s in listed["result"]["sessions"]] == ["A fine title"]


def test_a_connection_opens_at_most_max_sessions_per_connection(crow):
    """[server] max_sessions_per_connection: the next session/new (or a resume of a
    session not open here) is refused with -32600 and one line; closing one frees a place."""
    agent = crow(extra="[server]\nmax_sessions_per_connection = 3\n")
    open_ones = [agent.new_session() for _ in range(3)]
    refused, _ = agent.request("session/new", {"cwd": "/tmp", "mcpServers": []})
    assert refused["error"]["code"] == INVALID_REQUEST
    message = refused["error"]["message"]
    assert "\n" not in message and "(limit 3, [server] max_sessions_per_connection)" in message
    agent.request("session/close", {"sessionId": open_ones[0]})
    fourth = agent.new_session()
    refused, _ = agent.resume(open_ones[0])
    assert refused["error"]["code"] == INVALID_REQUEST
    resumed, _ = agent.resume(fourth)  # open here already: no new place taken
    assert "result" in resumed
    agent.request("session/close", {"sessionId": open_ones[1]})
    resumed, _ = agent.resume(open_ones[0])
    assert "result" in resumed
