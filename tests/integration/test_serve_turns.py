"""``crow serve`` turns against the scripted model: order, stop reasons, cancel, fallback."""

from __future__ import annotations

import base64
import threading
import time

import pytest
from crow_testing.fakemodel import Drop, Error, Hang, Text
from crow_testing.serve_support import kinds, notes, text_of, updates, without_notices

from crow.acp.errors import INVALID_PARAMS, RESOURCE_NOT_FOUND


@pytest.mark.parametrize("together", [False, True], ids=["apart", "in-one-read"])
def test_the_turn_lifecycle_in_order(crow, scripted_model, together):
    """The same whether the model's deltas come one by one or all in one read (then
    they are logged in one transaction)."""
    reply = Text(text="Hello there", chunks=3, reasoning="let me think", together=together)
    scripted_model.script(reply)
    agent = crow()
    sid = agent.new_session()
    response, before = agent.prompt(sid, "hi")
    message_id = response["result"]["messageId"]
    seen = updates(before + agent.until_update(lambda u: u.get("stopReason")))
    waits = [u["title"] for u in seen if u["sessionUpdate"] == "notice"]
    assert waits in ([], ["starting the tool servers", "the tool servers are up"])
    seen = without_notices(seen)
    assert kinds(seen) == [
        "available_commands_update",
        "user_message",
        "state_update",
        "session_info_update",
        "agent_thought_chunk",
        "agent_thought_chunk",
        "agent_thought_chunk",
        "agent_message_chunk",
        "agent_message_chunk",
        "agent_message_chunk",
        "agent_thought",
        "agent_message",
        "usage_update",
        "state_update",
    ]
    assert seen[1]["messageId"] == message_id
    assert seen[2]["state"] == "running"
    assert seen[3]["title"] == "hi"
    assert text_of(seen) == "Hello there" and text_of(seen, "agent_thought_chunk") == "let me think"
    final = seen[11]
    assert final["content"] == [{"type": "text", "text": "Hello there"}]
    assert final["_meta"]["crow/model"] == "main"
    assert seen[12]["used"] == 15 and seen[12]["size"] == 32768
    assert seen[13] == {"sessionUpdate": "state_update", "state": "idle", "stopReason": "end_turn"}


def test_the_model_sees_the_system_prompt_and_the_history(crow, scripted_model):
    scripted_model.script(Text(text="first answer"), Text(text="second answer"))
    agent = crow()
    sid = agent.new_session()
    agent.run_turn(sid, "first question")
    agent.run_turn(sid, "second question")
    messages = scripted_model.requests[1]["messages"]
    assert messages[0]["role"] == "system"
    assert [m["role"] for m in messages[1:]] == ["user", "assistant", "user"]
    assert messages[2]["content"] == "first answer"
    assert messages[3]["content"] == [{"type": "text", "text": "second question"}]


@pytest.mark.parametrize(
    ("reply", "stop"),
    [
        (Text(text="cut off", finish_reason="length"), "max_tokens"),
        (Text(text="", finish_reason="content_filter"), "refusal"),
        (Text(text="fine"), "end_turn"),
    ],
)
def test_the_stop_reason_is_the_true_one(crow, scripted_model, reply, stop):
    scripted_model.script(reply)
    agent = crow()
    seen = agent.run_turn(agent.new_session(), "go")
    assert seen[-1]["stopReason"] == stop


def test_a_failing_model_ends_the_turn_with_error_and_a_visible_note(crow, scripted_model):
    scripted_model.set_default(Error(status=500, message="the GPU caught fire"))
    agent = crow()
    seen = agent.run_turn(agent.new_session(), "go")
    assert seen[-1]["stopReason"] == "error"
    assert "the GPU caught fire" in seen[-1]["error"]["message"]
    assert any("the GPU caught fire" in n for n in notes(seen))
    assert len(scripted_model.requests) == 2  # retried once (attempts = 2), then gave up


def test_a_transient_failure_is_retried(crow, scripted_model):
    scripted_model.script(Error(status=429, message="slow down"), Text(text="recovered"))
    agent = crow()
    seen = agent.run_turn(agent.new_session(), "go")
    assert seen[-1]["stopReason"] == "end_turn" and text_of(seen) == "recovered"


def test_a_transient_400_is_retried(crow, scripted_model):
    scripted_model.script(
        Error(
            status=400, message="Download multimodal file timed out", type="invalid_request_error"
        ),
        Text(text="second try"),
    )
    agent = crow()
    seen = agent.run_turn(agent.new_session(), "go")
    assert text_of(seen) == "second try"


def test_a_plain_400_is_not_retried(crow, scripted_model):
    scripted_model.script(
        Error(status=400, message="unknown parameter foo", type="invalid_request_error"),
        Text(text="never"),
    )
    agent = crow()
    seen = agent.run_turn(agent.new_session(), "go")
    assert seen[-1]["stopReason"] == "error" and len(scripted_model.requests) == 1


def test_a_dropped_stream_after_output_is_an_error_not_a_silent_end(crow, scripted_model):
    scripted_model.script(Drop(after_chunks=2, text="partial text here"))
    agent = crow()
    sid = agent.new_session()
    seen = agent.run_turn(sid, "go")
    assert seen[-1]["stopReason"] == "error"
    snapshot = next(u for u in seen if u["sessionUpdate"] == "agent_message")
    assert snapshot["content"][0]["text"] == text_of(seen)  # the partial reply is kept


def test_cancel_closes_the_model_request_and_ends_with_cancelled(crow, scripted_model):
    scripted_model.script(Hang(), Text(text="after cancel"))
    agent = crow()
    sid = agent.new_session()
    agent.prompt(sid, "wait forever")
    scripted_model.wait_for_requests(1)
    started = time.monotonic()
    agent.send({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}})
    idle = agent.until_update(lambda u: u.get("stopReason"))[-1]["params"]["update"]
    assert idle["stopReason"] == "cancelled"
    assert time.monotonic() - started < 5  # a bound, not a speed claim (bench/ measures it)
    scripted_model.wait_for_disconnects(1)
    assert text_of(agent.run_turn(sid, "again")) == "after cancel"


def test_a_cancelled_partial_reply_stays_in_history(crow, scripted_model):
    scripted_model.script(
        Text(text="one two three four five six", chunks=6, delay_s=0.3), Text(text="next")
    )
    agent = crow()
    sid = agent.new_session()
    agent.prompt(sid, "count")
    agent.until_update(lambda u: u.get("sessionUpdate") == "agent_message_chunk")
    agent.send({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}})
    seen = updates(agent.until_update(lambda u: u.get("stopReason")))
    assert seen[-1]["stopReason"] == "cancelled"
    partial = [u for u in seen if u["sessionUpdate"] == "agent_message"][-1]["content"][0]["text"]
    assert partial and "one two three four five six".startswith(partial)
    agent.run_turn(sid, "go on")
    history = scripted_model.requests[1]["messages"]
    assert {"role": "assistant", "content": partial} in history


def test_a_second_prompt_while_busy_is_refused(crow, scripted_model):
    """When so configured: by default it is held (test_serve_queue)."""
    scripted_model.script(Hang())
    agent = crow(extra='[session]\nwhile_busy = "reject"\n')
    sid = agent.new_session()
    agent.prompt(sid, "one")
    busy, _ = agent.prompt(sid, "two")
    assert busy["error"]["code"] == INVALID_PARAMS
    assert busy["error"]["data"]["reason"] == "busy"


def test_fallback_takes_over_and_says_which_model_answered(crow, scripted_model):
    scripted_model.script(Error(status=503), Error(status=503), Text(text="from backup"))
    agent = crow(models={"primary": {}, "backup": {}}, fallback=["backup"])
    seen = agent.run_turn(agent.new_session(), "go")
    assert text_of(seen) == "from backup"
    assert any("primary failed" in n and "backup takes over" in n for n in notes(seen))
    final = [
        u
        for u in seen
        if u["sessionUpdate"] == "agent_message" and "crow/model" in u.get("_meta", {})
    ][-1]
    assert final["_meta"]["crow/model"] == "backup"
    usage = [u for u in seen if u["sessionUpdate"] == "usage_update"][-1]
    assert usage["_meta"]["crow/model"] == "backup"
    assert [r["model"] for r in scripted_model.requests] == ["primary", "primary", "backup"]


PIXEL = base64.b64encode(b"\x89PNG\r\n\x1a\n fake").decode()


def test_an_image_is_stripped_for_a_text_only_fallback(crow, scripted_model):
    scripted_model.script(Error(status=500), Text(text="I can only read text"))
    agent = crow(
        models={"vision": {"capabilities": ["tools", "image"]}, "text": {}},
        fallback=["text"],
        retry_attempts=1,
    )
    sid = agent.new_session()
    seen = agent.run_turn(
        sid, "what is this?", {"type": "image", "mimeType": "image/png", "data": PIXEL}
    )
    first, second = scripted_model.requests
    assert first["messages"][-1]["content"][1]["type"] == "image_url"
    parts = second["messages"][-1]["content"]
    assert all(p["type"] == "text" for p in parts) and "image omitted" in parts[1]["text"]
    assert any("cannot read image" in n for n in notes(seen))


def test_an_image_is_refused_when_no_model_takes_images(crow):
    agent = crow()
    response, _ = agent.prompt(
        agent.new_session(), {"type": "image", "mimeType": "image/png", "data": PIXEL}
    )
    assert response["error"]["code"] == INVALID_PARAMS


def test_embedded_resources_and_links_reach_the_model(crow, scripted_model):
    scripted_model.script(Text(text="ok"))
    agent = crow()
    agent.run_turn(
        agent.new_session(),
        "read these",
        {"type": "resource", "resource": {"uri": "file:///tmp/a.py", "text": "x = 1"}},
        {"type": "resource_link", "uri": "file:///tmp/b.py", "name": "b.py"},
    )
    parts = scripted_model.requests[0]["messages"][-1]["content"]
    assert "x = 1" in parts[1]["text"] and "file:///tmp/a.py" in parts[1]["text"]
    assert "b.py" in parts[2]["text"]


def test_prompt_to_an_unknown_session_is_32002(crow):
    agent = crow()
    response, _ = agent.prompt("sess_nope", "hi")
    assert response["error"]["code"] == RESOURCE_NOT_FOUND
    assert response["error"]["data"] == {"sessionId": "sess_nope"}


@pytest.mark.parametrize("model", ["fails", "answers"])
def test_cancels_that_land_while_a_turn_ends_never_lose_its_idle(crow, scripted_model, model):
    """session/cancel sent again and again while the turn runs: some land before the
    model call, some while the turn is already ending (a failed model's note, a
    cancelled turn's partial reply, the idle itself).  Whatever the outcome, every
    acknowledged prompt ends in idle."""
    if model == "fails":
        scripted_model.set_default(Error(status=500, message="no model today"))
    else:
        scripted_model.set_default(Text(text="done"))
    agent = crow()
    for n in range(5):
        sid = agent.new_session()
        params = {"sessionId": sid, "prompt": [{"type": "text", "text": "go"}]}
        cancel = {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}}
        idle_seen = threading.Event()

        def keep_cancelling(delay: float, cancel: dict, idle_seen: threading.Event) -> None:
            time.sleep(delay)  # each round starts them at another point of the turn
            while not idle_seen.is_set():
                agent.send(cancel)
                time.sleep(0.0005)

        agent.send({"jsonrpc": "2.0", "id": 70 + n, "method": "session/prompt", "params": params})
        canceller = threading.Thread(target=keep_cancelling, args=(0.002 * n, cancel, idle_seen))
        canceller.start()
        try:
            agent.until_response(70 + n)
            idle = agent.until_update(lambda u: u.get("state") == "idle")[-1]["params"]["update"]
        finally:
            idle_seen.set()
            canceller.join()
        assert idle["stopReason"] in ("cancelled", "error", "end_turn")
