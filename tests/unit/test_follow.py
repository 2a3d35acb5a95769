"""crow chat's following of a session, update by update (crow.client.follow): whose a
prompt is, how a turn's end is said once, and the background work an agent lists."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from crow.acp import SessionProjection, schema
from crow.client.follow import Follow, Sent
from crow.client.paint import Paint
from crow.client.verifying import Verdicts
from crow.extensions import FROM, QUEUE, TURN_ENDED


class Sink:
    in_place = True

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.text = ""
        self.tools: dict[str, str] = {}

    def write(self, text: str) -> None:
        self.text += text

    def line(self, text: str) -> None:
        self.lines.append(text)

    def show_tool(self, key: str, title: str | None) -> None:
        if title is None:
            self.tools.pop(key, None)
        else:
            self.tools[key] = title


def following(*, show_mine: bool = True) -> tuple[Follow, Sink, SessionProjection]:
    sink = Sink()
    follow = Follow(sink, Paint(False), Verdicts("s", None), show_mine=show_mine)
    projection = SessionProjection("s")
    follow.attach(SimpleNamespace(id="s", projection=projection))  # type: ignore[arg-type]
    return follow, sink, projection


def feed(follow: Follow, projection: SessionProjection, *updates: dict[str, Any]) -> None:
    for wire in updates:
        update = schema.adapter(schema.SessionUpdate).validate_python(wire)
        projection.apply(update)
        follow.update(update)


def user(message_id: str, text: str, **meta: Any) -> dict[str, Any]:
    update: dict[str, Any] = {
        "sessionUpdate": "user_message",
        "messageId": message_id,
        "content": [{"type": "text", "text": text}],
    }
    if meta:
        update["_meta"] = meta
    return update


def state(name: str, **fields: Any) -> dict[str, Any]:
    return {"sessionUpdate": "state_update", "state": name, **fields}


def test_prompts_are_marked_yours_theirs_or_the_judges():
    follow, sink, projection = following()
    follow.sending.append(Sent("mine, before its answer"))
    feed(
        follow,
        projection,
        user("m1", "from an editor"),
        user("m2", "mine, before its answer"),
        user("m3", "go on", **{FROM: "judge"}),
    )
    assert sink.lines == ["them> from an editor", "you> mine, before its answer", "judge> go on"]
    assert follow.mine == {"m2"}


def test_the_agents_queue_says_which_held_prompts_are_yours():
    follow, sink, projection = following(show_mine=False)
    held = [
        {"messageId": "m9", "from": "crow", "preview": "later", "yours": True},
        {"messageId": "m8", "from": "zed", "preview": "theirs", "yours": False},
    ]
    feed(follow, projection, {"sessionUpdate": QUEUE, "prompts": held})
    feed(follow, projection, user("m9", "later"), user("m8", "theirs"))
    assert sink.lines == ["them> theirs"]  # yours: in a pipe's input already


def test_a_turns_end_is_said_once_and_a_tool_call_in_flight_is_live():
    follow, sink, projection = following()
    feed(
        follow,
        projection,
        user("m1", "go"),
        state("running"),
        {
            "sessionUpdate": "tool_call_update",
            "toolCallId": "t",
            "title": "ls",
            "status": "pending",
        },
    )
    assert sink.tools == {"t": "ls"} and follow.busy
    feed(
        follow,
        projection,
        {"sessionUpdate": "tool_call_update", "toolCallId": "t", "status": "completed"},
        {"sessionUpdate": TURN_ENDED, "stopReason": "cancelled"},
        state("idle", stopReason="cancelled"),
    )
    assert sink.lines == ["them> go", "✓ ls", "[cancelled]"]
    assert sink.tools == {} and not follow.busy


def test_an_agent_without_turn_ended_gets_its_end_said_from_the_idle():
    follow, sink, projection = following()
    feed(follow, projection, state("running"), state("idle", stopReason="max_tokens"))
    feed(follow, projection, state("idle", stopReason="max_tokens"))  # a repeated snapshot
    assert sink.lines == ["[max_tokens]"]


def test_background_work_is_named_while_it_runs():
    follow, _, projection = following()
    feed(
        follow,
        projection,
        {"sessionUpdate": "tool_call_update", "toolCallId": "t", "title": "npm test"},
        {"sessionUpdate": "terminal_update", "terminalId": "x", "command": "make watch"},
        state(
            "idle",
            stopReason="end_turn",
            background=[
                {"type": "tool_call", "toolCallId": "t"},
                {"type": "terminal", "terminalId": "x"},
            ],
        ),
    )
    assert follow.background == ["npm test", "make watch"]
    feed(follow, projection, state("idle", background=[]))
    assert follow.background == []
