"""Prompts on a busy session (crow.agent.queue): held and inserted in order, withdrawn,
cancelled, steered into the running turn; seen by every watcher.  Raw bytes over a
real ``crow serve``: pipelined messages go in one write, as clients send them."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from typing import Any

import pytest
from crow_testing.fakemodel import Hang, Slow, Text, ToolCalls
from crow_testing.serve_support import is_idle, updates
from crow_testing.support import ROOT

from crow.acp.errors import INVALID_PARAMS, REQUEST_CANCELLED
from crow.extensions import QUEUE

PROBE = [sys.executable, str(ROOT / "tests" / "mcp_probe.py")]
PROBE_CONFIG = (
    f'[tools]\nbuiltin = []\n\n[mcp.servers.probe]\ncommand = "{PROBE[0]}"\n'
    f'args = ["{PROBE[1]}"]\ntimeout_s = 20\ntrusted = true\n'
)


def prompt_message(rid: int, sid: str, text: str, **meta: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"sessionId": sid, "prompt": [{"type": "text", "text": text}]}
    if meta:
        params["_meta"] = meta
    return {"jsonrpc": "2.0", "id": rid, "method": "session/prompt", "params": params}


def send_together(agent: Any, *messages: dict[str, Any]) -> None:
    """Several messages in one write: a client that pipelines."""
    agent.write(b"".join(json.dumps(m).encode() + b"\n" for m in messages))


def collect(agent: Any, until: Any, timeout: float = 30.0) -> list[dict[str, Any]]:
    """Every message up to the first one ``until`` accepts."""
    seen = []
    while True:
        message = agent.recv(timeout=timeout)
        seen.append(message)
        if until(message):
            return seen


def answer_to(rid: int) -> Any:
    return lambda m: m.get("id") == rid and "method" not in m


def idles(seen: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [u for u in updates(seen) if is_idle(u)]


def user_texts(seen: list[dict[str, Any]]) -> list[str]:
    return [u["content"][0]["text"] for u in updates(seen) if u["sessionUpdate"] == "user_message"]


def queues(seen: list[dict[str, Any]]) -> list[list[str]]:
    return [
        [p["preview"] for p in u["prompts"]] for u in updates(seen) if u["sessionUpdate"] == QUEUE
    ]


def until_idles(agent: Any, n: int, timeout: float = 30.0) -> list[dict[str, Any]]:
    """Every message up to the ``n``-th idle."""
    seen: list[dict[str, Any]] = []
    while len(idles(seen)) < n:
        seen.append(agent.recv(timeout=timeout))
    return seen


def index_of(seen: list[dict[str, Any]], accept: Any) -> int:
    return next(i for i, m in enumerate(seen) if accept(m))


def test_two_pipelined_prompts_are_both_answered_in_order_each_ending_in_idle(crow, scripted_model):
    scripted_model.script(Slow("first reply", chunks=3, delay_s=0.1), Text(text="second reply"))
    agent = crow()
    sid = agent.new_session()
    send_together(agent, prompt_message(1, sid, "one"), prompt_message(2, sid, "two"))
    seen = until_idles(agent, 2)
    first, second = index_of(seen, answer_to(1)), index_of(seen, answer_to(2))
    first_idle = index_of(seen, lambda m: bool(idles([m])))
    assert first < first_idle < second  # the second is answered when it is inserted
    assert seen[second]["result"]["messageId"] != seen[first]["result"]["messageId"]
    assert user_texts(seen) == ["one", "two"]
    assert [i.get("stopReason") for i in idles(seen)] == ["end_turn", "end_turn"]
    assert queues(seen) == [["two"], []]  # shown held, then gone
    held = next(u for u in updates(seen) if u["sessionUpdate"] == QUEUE)["prompts"][0]
    assert held["yours"] is True and held["from"] == "raw-test"
    assert held["messageId"] == seen[second]["result"]["messageId"]
    history = scripted_model.requests[1]["messages"]
    assert [m["content"] for m in history[1:]][-3:] == [
        [{"type": "text", "text": "one"}],
        "first reply",
        [{"type": "text", "text": "two"}],
    ]


def test_a_withdrawn_held_prompt_is_answered_cancelled_and_never_inserted(crow, scripted_model):
    scripted_model.script(Slow("only reply", chunks=4, delay_s=0.2))
    agent = crow()
    sid = agent.new_session()
    withdraw = {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 2}}
    send_together(agent, prompt_message(1, sid, "one"), prompt_message(2, sid, "two"))
    seen = collect(agent, lambda m: any(u["sessionUpdate"] == QUEUE for u in updates([m])))
    send_together(agent, withdraw)
    seen += until_idles(agent, 1)
    seen += [agent.recv()] if not any(answer_to(2)(m) for m in seen) else []
    [answer] = [m for m in seen if answer_to(2)(m)]
    assert answer["error"]["code"] == REQUEST_CANCELLED
    assert agent.nothing_within(1.0)
    assert user_texts(seen) == ["one"] and len(scripted_model.requests) == 1
    assert queues(seen) == [["two"], []]


def test_a_prompt_withdrawn_in_the_same_write_is_never_inserted(crow, scripted_model):
    """prompt, prompt, $/cancel_request of the second: all in one write."""
    scripted_model.script(Slow("only reply", chunks=4, delay_s=0.2))
    agent = crow()
    sid = agent.new_session()
    withdraw = {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 2}}
    send_together(agent, prompt_message(1, sid, "one"), prompt_message(2, sid, "two"), withdraw)
    seen = until_idles(agent, 1)
    seen += [agent.recv()] if not any(answer_to(2)(m) for m in seen) else []
    [answer] = [m for m in seen if answer_to(2)(m)]
    assert answer["error"]["code"] == REQUEST_CANCELLED
    assert "result" in next(m for m in seen if answer_to(1)(m))
    assert agent.nothing_within(1.0)
    assert user_texts(seen) == ["one"] and len(scripted_model.requests) == 1


def test_cancel_answers_every_held_prompt_and_cancels_the_turn(crow, scripted_model):
    scripted_model.script(Hang())
    agent = crow()
    sid = agent.new_session()
    cancel = {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}}
    send_together(
        agent,
        prompt_message(1, sid, "one"),
        prompt_message(2, sid, "two"),
        prompt_message(3, sid, "three"),
    )
    seen = collect(agent, lambda m: queues([m]) == [["two", "three"]])
    send_together(agent, cancel)
    seen += until_idles(agent, 1)
    while not all(any(answer_to(r)(m) for m in seen) for r in (2, 3)):
        seen.append(agent.recv())
    for rid in (2, 3):
        [answer] = [m for m in seen if answer_to(rid)(m)]
        assert answer["error"]["code"] == REQUEST_CANCELLED
    assert idles(seen)[-1]["stopReason"] == "cancelled"
    assert user_texts(seen) == ["one"]
    assert agent.nothing_within(1.0)


def test_close_answers_the_held_prompts(crow, scripted_model):
    scripted_model.script(Hang())
    agent = crow()
    sid = agent.new_session()
    close = {"jsonrpc": "2.0", "id": 9, "method": "session/close", "params": {"sessionId": sid}}
    send_together(agent, prompt_message(1, sid, "one"), prompt_message(2, sid, "two"))
    collect(agent, lambda m: queues([m]) == [["two"]])
    send_together(agent, close)
    seen = collect(agent, answer_to(9))
    while not any(answer_to(2)(m) for m in seen):
        seen.append(agent.recv())
    [answer] = [m for m in seen if answer_to(2)(m)]
    assert answer["error"]["code"] == REQUEST_CANCELLED
    assert idles(seen)[-1]["stopReason"] == "cancelled"


def test_a_steered_prompt_reaches_the_model_at_its_next_call(crow, scripted_model):
    """Steered in while a tool call runs: shown at once, answered at once, and the
    model's next request has it after the tool's result."""
    scripted_model.script(
        ToolCalls(calls=[("probe__slow", {"seconds": 1.0})]), Text(text="done, in Rust")
    )
    agent = crow(extra=PROBE_CONFIG)
    sid = agent.new_session()
    send_together(agent, prompt_message(1, sid, "write it"))
    seen = collect(
        agent,
        lambda m: any(u.get("status") == "in_progress" for u in updates([m])),
    )
    send_together(agent, prompt_message(2, sid, "use Rust instead", **{"crow/insert": "steer"}))
    seen += until_idles(agent, 1)
    steered = index_of(seen, answer_to(2))
    assert steered < index_of(seen, lambda m: bool(idles([m])))  # answered at once
    assert user_texts(seen) == ["write it", "use Rust instead"]
    assert len(idles(seen)) == 1 and idles(seen)[0]["stopReason"] == "end_turn"
    second = scripted_model.requests[1]["messages"]
    roles = [m["role"] for m in second[1:]]
    assert roles == ["user", "assistant", "tool", "user"]  # the tool's result, then it
    assert second[-1]["content"] == [{"type": "text", "text": "use Rust instead"}]


def test_a_prompt_steered_into_a_last_reply_gets_one_more_model_call(crow, scripted_model):
    scripted_model.script(Slow("almost done", chunks=5, delay_s=0.2), Text(text="and that too"))
    agent = crow()
    sid = agent.new_session()
    send_together(agent, prompt_message(1, sid, "go"))
    seen = collect(
        agent, lambda m: any(u["sessionUpdate"] == "agent_message_chunk" for u in updates([m]))
    )
    send_together(agent, prompt_message(2, sid, "also this", **{"crow/insert": "steer"}))
    seen += until_idles(agent, 1)
    assert len(scripted_model.requests) == 2
    assert scripted_model.requests[1]["messages"][-1]["content"] == [
        {"type": "text", "text": "also this"}
    ]
    assert idles(seen)[0]["stopReason"] == "end_turn"


@pytest.mark.parametrize("how", ["meta", "config"])
def test_reject_refuses_a_prompt_on_a_busy_session(crow, scripted_model, how):
    scripted_model.script(Hang())
    agent = crow(extra='[session]\nwhile_busy = "reject"\n' if how == "config" else "")
    sid = agent.new_session()
    agent.prompt(sid, "one")
    meta = {"crow/insert": "reject"} if how == "meta" else {}
    busy, _ = agent.request("session/prompt", prompt_message(0, sid, "two", **meta)["params"])
    assert busy["error"]["code"] == INVALID_PARAMS
    assert busy["error"]["data"]["reason"] == "busy"


def test_a_bad_insert_mode_or_prompt_is_refused_at_once_not_held(crow, scripted_model):
    scripted_model.script(Hang())
    agent = crow()
    sid = agent.new_session()
    agent.prompt(sid, "one")
    bad, _ = agent.request(
        "session/prompt", prompt_message(0, sid, "two", **{"crow/insert": "later"})["params"]
    )
    assert bad["error"]["code"] == INVALID_PARAMS and "crow/insert" in bad["error"]["message"]
    audio = {"type": "audio", "data": "AAAA", "mimeType": "audio/wav"}
    refused, _ = agent.request("session/prompt", {"sessionId": sid, "prompt": [audio]})
    assert refused["error"]["code"] == INVALID_PARAMS


async def test_a_client_that_attaches_sees_the_queue_as_it_is(crow_home, scripted_model):
    from crow_testing.serve_support import HttpServer, client_for, write_config

    from crow.acp import schema

    write_config(crow_home, scripted_model.base_url)
    scripted_model.script(Hang())
    server = HttpServer()
    try:
        async with asyncio.timeout(30):
            first = await client_for(server.ws_url)
            session = await first.new_session("/tmp")
            await session.prompt("one")
            text = [schema.TextContent(text="two")]
            held = asyncio.ensure_future(
                first.call(
                    "session/prompt", schema.PromptRequest(session_id=session.id, prompt=text)
                )
            )
            seen: list[Any] = []
            second = await client_for(server.ws_url)
            second.on_update(lambda _, u: seen.append(u))
            while not seen or not any(getattr(u, "session_update", "") == QUEUE for u in seen):
                await second.resume_session(session.id, "/tmp", replay=False)
                await asyncio.sleep(0.1)
            [shown] = [u for u in seen if getattr(u, "session_update", "") == QUEUE][-1:]
            prompts = (shown.model_extra or {})["prompts"]
            assert [(p["preview"], p["yours"], p["from"]) for p in prompts] == [
                ("two", False, "http-test")
            ]
            await session.cancel()
            with pytest.raises(Exception) as cancelled:
                await held
            assert getattr(cancelled.value, "code", None) == REQUEST_CANCELLED
            await first.aclose()
            await second.aclose()
    finally:
        server.stop()


# ---- several servers on one PostgreSQL store -----------------------------------------


@pytest.fixture
def shared_store(postgres_url, monkeypatch) -> str:
    monkeypatch.setenv("CROW_STORE_URL", postgres_url)
    return postgres_url


def asked(requests: list[dict[str, Any]]) -> list[str]:
    """The last user text of each model request."""
    out = []
    for request in requests:
        last = [m for m in request["messages"] if m["role"] == "user"][-1]["content"]
        out.append(last if isinstance(last, str) else last[0]["text"])
    return out


def a_turn_on_a_watched_from_b(
    crow: Any, scripted_model: Any, extra: str = ""
) -> tuple[Any, Any, str]:
    """Servers A and B on one store (``extra`` in their config); A runs the turn of
    "one" (its model was asked), and B's client watches the session."""
    a = crow(timeout_s=120.0, extra=extra)  # a hanging model is cut by the test
    sid = a.new_session()
    b = crow(write=False)
    b.resume(sid)
    send_together(a, prompt_message(1, sid, "one"))
    scripted_model.wait_for_requests(1)
    return a, b, sid


def test_prompts_held_on_two_servers_are_inserted_in_arrival_order(
    crow, scripted_model, shared_store
):
    """A runs the turn; B's client holds "two", then A's client holds "three": after
    A's idle, B inserts "two" (it came first), then A inserts "three"."""
    scripted_model.script(
        Slow("one done", chunks=6, delay_s=0.3), Text(text="two done"), Text(text="three done")
    )
    a, b, sid = a_turn_on_a_watched_from_b(crow, scripted_model)
    send_together(b, prompt_message(2, sid, "two"))
    collect(b, lambda m: ["two"] in queues([m]))
    send_together(a, prompt_message(3, sid, "three"))
    seen_a = collect(a, lambda m: ["two", "three"] in queues([m]))
    assert [
        p["yours"]
        for p in next(
            u for u in updates(seen_a) if u["sessionUpdate"] == QUEUE and len(u["prompts"]) == 2
        )["prompts"]
    ] == [False, True]
    seen_b = collect(b, answer_to(2), timeout=60)
    seen_a += collect(a, answer_to(3), timeout=60)
    while len(idles(seen_a)) < 3:  # "one", "two" (B's turn, seen through the store), "three"
        seen_a.append(a.recv(timeout=60))
    assert asked(scripted_model.requests) == ["one", "two", "three"]
    # B looked at A's turn while "two" waited, and left it alone: A was alive.
    assert [u["stopReason"] for u in idles(seen_a)] == ["end_turn"] * 3
    assert "result" in seen_b[-1] and "result" in seen_a[index_of(seen_a, answer_to(3))]
    assert user_texts(seen_a)[-2:] == ["two", "three"]


def test_a_server_killed_with_prompts_held_leaves_the_others_theirs(
    crow, scripted_model, shared_store
):
    """A runs the turn and holds its client's "zero"; B holds "two".  A is killed: its
    turn is closed as interrupted, its held prompt (whose request died with it) is
    dropped, and B inserts "two"."""
    scripted_model.script(Hang(), Text(text="two done"))
    a, b, sid = a_turn_on_a_watched_from_b(crow, scripted_model)
    send_together(a, prompt_message(2, sid, "zero"))
    collect(a, lambda m: ["zero"] in queues([m]))
    send_together(b, prompt_message(3, sid, "two"))
    collect(b, lambda m: ["zero", "two"] in queues([m]))
    a.proc.send_signal(signal.SIGKILL)
    a.proc.wait(timeout=10)
    seen = collect(b, answer_to(3), timeout=60)
    seen += until_idles(b, 1, timeout=60)
    assert "result" in seen[index_of(seen, answer_to(3))]
    assert asked(scripted_model.requests) == ["one", "two"]
    assert [] in queues(seen)


#: A sweep for dead servers' turns this rarely: none comes within a test's waits.
RARE_SWEEP_S = 120.0


def test_a_prompt_held_behind_a_killed_servers_turn_goes_in_before_the_next_sweep(
    crow, scripted_model, shared_store
):
    """A runs the turn, B holds "two" behind it, and A is killed: B sees A dead and
    closes its turn (interrupted) then and there, and inserts "two", without waiting
    for its sweep (minutes away here; every 5 s by default)."""
    scripted_model.script(Hang(), Text(text="two done"))
    extra = f"[server]\norphan_sweep_s = {RARE_SWEEP_S}\n"
    a, b, sid = a_turn_on_a_watched_from_b(crow, scripted_model, extra)
    send_together(b, prompt_message(2, sid, "two"))
    collect(b, lambda m: ["two"] in queues([m]))
    a.proc.send_signal(signal.SIGKILL)
    a.proc.wait(timeout=10)
    seen = collect(b, answer_to(2), timeout=RARE_SWEEP_S / 4)  # generous, yet well before
    seen += until_idles(b, 1)
    assert "result" in seen[index_of(seen, answer_to(2))]
    assert [u["stopReason"] for u in idles(seen)] == ["error", "end_turn"]  # A's, then "two"
    assert asked(scripted_model.requests) == ["one", "two"]
