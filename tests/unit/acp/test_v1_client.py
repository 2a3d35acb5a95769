"""The client's v1 dialect, update by update (crow.acp.v1_client, ACP-V2.md §12)."""

from __future__ import annotations

from typing import Any

import pytest

from crow.acp import SessionProjection
from crow.acp.v1_client import NotInV1, V1Agent

ANSWER = {
    "protocolVersion": 1,
    "agentCapabilities": {
        "loadSession": True,
        "promptCapabilities": {"image": True},
        "mcpCapabilities": {"http": True},
        "_meta": {"crow/verify": True},
    },
    "agentInfo": {"name": "gemini-cli", "version": "0.9"},
}


def note(update: dict[str, Any]) -> dict[str, Any]:
    return {"sessionId": "s", "update": update}


def text(kind: str, words: str, **extra: Any) -> dict[str, Any]:
    return note({"sessionUpdate": kind, "content": {"type": "text", "text": words}, **extra})


def test_the_v1_initialize_answer_reads_as_v2():
    answer = V1Agent(ANSWER).initialize_response()
    assert answer.protocol_version == 1
    assert (answer.info.name, answer.info.version) == ("gemini-cli", "0.9")
    wire = answer.to_wire()["capabilities"]
    assert wire["session"]["prompt"] == {"image": {}}
    assert set(wire["session"]["mcp"]) == {"stdio", "http"}
    assert wire["_meta"] == {"crow/verify": True}


def test_chunks_without_ids_are_one_message_per_run_of_a_role():
    v1 = V1Agent(ANSWER)
    projection = SessionProjection("s")
    v1.begin_turn("s")
    for params in (
        text("agent_thought_chunk", "hmm"),
        text("agent_message_chunk", "Hello, "),
        text("agent_message_chunk", "world"),
        note({"sessionUpdate": "tool_call", "toolCallId": "t1", "title": "ls", "kind": "read"}),
        text("agent_message_chunk", "Done."),
        text("agent_message_chunk", "!", messageId="given"),
    ):
        translated = v1.update(params)
        assert translated is not None
        projection.apply(translated[1])
    messages = [(m.role, m.text) for m in projection.messages.values()]
    assert messages == [
        ("thought", "hmm"),
        ("agent", "Hello, world"),
        ("agent", "Done."),
        ("agent", "!"),
    ]
    assert projection.tool_calls["t1"].title == "ls"


def test_plans_commands_and_usage_take_their_v2_forms_and_modes_go():
    v1 = V1Agent(ANSWER)
    plan = v1.update(
        note(
            {
                "sessionUpdate": "plan",
                "entries": [{"content": "a", "priority": "high", "status": "pending"}],
            }
        )
    )
    assert plan is not None and plan[1].plan.plan_id == "plan"
    commands = v1.update(
        note(
            {
                "sessionUpdate": "available_commands_update",
                "availableCommands": [
                    {"name": "web", "description": "search", "input": {"hint": "query"}}
                ],
            }
        )
    )
    assert commands is not None
    [command] = commands[1].available_commands
    assert (command.name, command.input.hint) == ("web", "query")
    usage = v1.update(note({"sessionUpdate": "usage_update", "used": 5, "size": 100}))
    assert usage is not None and usage[1].used == 5
    assert v1.update(note({"sessionUpdate": "current_mode_update", "currentModeId": "x"})) is None


def test_a_permission_question_carries_its_tool_call():
    request, update = V1Agent(ANSWER).permission(
        {
            "sessionId": "s",
            "toolCall": {"toolCallId": "t1", "title": "rm -rf build", "kind": "execute"},
            "options": [{"optionId": "ok", "name": "Allow", "kind": "allow_once"}],
        }
    )
    assert request.title == "rm -rf build" and request.subject.tool_call.tool_call_id == "t1"
    assert update.tool_call_id == "t1" and update.kind == "execute"


def test_mcp_servers_take_their_v1_shape_and_acp_ones_have_none():
    v1 = V1Agent(ANSWER)
    stdio = {"type": "stdio", "name": "fs", "command": "/bin/fs"}
    params = v1.session_params({"cwd": "/tmp", "mcpServers": [stdio], "_meta": {"k": 1}})
    assert params == {
        "cwd": "/tmp",
        "mcpServers": [{"name": "fs", "command": "/bin/fs", "args": [], "env": []}],
        "_meta": {"k": 1},
    }
    acp_server = {"type": "acp", "name": "m", "serverId": "x"}
    with pytest.raises(NotInV1):
        v1.session_params({"cwd": "/tmp", "mcpServers": [acp_server]})
