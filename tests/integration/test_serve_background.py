"""Work that goes on outside the turn: ``state_update.background`` (crow.agent.background)."""

from __future__ import annotations

from typing import Any

from crow_testing.fakemodel import Text, ToolCalls
from crow_testing.serve_support import is_idle, updates

TERMINAL = '[tools]\nbuiltin = ["terminal"]\n\n[permissions]\nexecute = "allow"\n'


def states(seen: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The state updates among ``seen`` (updates, not messages)."""
    return [u for u in seen if u["sessionUpdate"] == "state_update"]


def until(agent: Any, accept: Any, timeout: float = 30.0) -> list[dict[str, Any]]:
    seen = []
    while True:
        message = agent.recv(timeout=timeout)
        seen.append(message)
        if message.get("method") == "session/update" and accept(message["params"]["update"]):
            return seen


def test_a_process_started_to_run_on_is_listed_until_it_ends(crow, scripted_model):
    scripted_model.script(
        ToolCalls(calls=[("terminal__start", {"command": "sleep 1.5; exit 3"})]),
        Text(text="it runs"),
    )
    agent = crow(extra=TERMINAL)
    sid = agent.new_session()
    seen = agent.run_turn(sid, "start the job")
    [terminal] = [u for u in seen if u["sessionUpdate"] == "terminal_update"]
    listed = {"type": "terminal", "terminalId": terminal["terminalId"]}
    assert states(seen)[-1]["state"] == "idle" and states(seen)[-1]["background"] == [listed]
    assert not any("exitStatus" in u for u in seen if u["sessionUpdate"] == "terminal_update")
    later = updates(until(agent, lambda u: u.get("background") == []))
    [ended] = [u for u in later if u["sessionUpdate"] == "terminal_update"]
    assert ended["terminalId"] == terminal["terminalId"]
    assert ended["exitStatus"] == {"exitCode": 3}
    last = later[-1]
    assert is_idle(last) and last["stopReason"] == "end_turn"  # a snapshot, not a new turn
    # Once listed, every state update says what runs, nothing included.
    scripted_model.script(Text(text="hello"))
    again = agent.run_turn(sid, "hi")
    assert [u["background"] for u in states(again)] == [[], []]
    _, replayed = agent.resume(sid, replayFrom={"type": "start"})
    assert states(replayed)[-1]["background"] == []


def test_the_judge_at_work_is_listed_until_its_verdict(crow, scripted_model):
    pass_ = ToolCalls(calls=[("verdict", {"pass": True, "reasons": ["fine"]})])
    scripted_model.script(Text(text="done"), pass_)
    agent = crow(extra="[tools]\nbuiltin = []\n")
    response, _ = agent.request("session/new", {"cwd": "/tmp", "_meta": {"crow/verify": True}})
    sid = response["result"]["sessionId"]
    seen = agent.run_turn(sid, "do it")
    seen += updates(until(agent, lambda u: "crow/verdict" in (u.get("_meta") or {})))
    seen += updates(until(agent, lambda u: u.get("background") == []))
    [opened] = [u for u in seen if u.get("status") == "in_progress" and u.get("kind") == "think"]
    user = next(u for u in seen if u["sessionUpdate"] == "user_message")
    assert opened["_meta"]["crow/judging"] == user["messageId"]
    listed = {"type": "tool_call", "toolCallId": opened["toolCallId"]}
    assert listed in [i for s in states(seen) for i in s.get("background", [])]
    closed = [u for u in seen if u.get("toolCallId") == opened["toolCallId"]][-1]
    assert closed["status"] == "completed"
    assert states(seen)[-1]["background"] == []


def test_only_the_sessions_judge_may_say_it_judges(crow, scripted_model):
    """A client (the agent's own, or one being judged) cannot make the session show a
    judge at work: ``_crow/judging`` is refused unless it comes from the judge."""
    scripted_model.script(Text(text="done"))
    agent = crow(extra="[tools]\nbuiltin = []\n")
    sid = agent.new_session()
    seen = agent.run_turn(sid, "do it")
    user = next(u for u in seen if u["sessionUpdate"] == "user_message")
    params = {"sessionId": sid, "turnMessageId": user["messageId"]}
    refused, later = agent.request("_crow/judging", params)
    assert refused["error"]["code"] == -32602
    assert refused["error"]["data"]["reason"] == "notJudge"
    assert agent.nothing_within(0.5)
    assert not [u for u in updates(later) if u["sessionUpdate"] == "tool_call_update"]
