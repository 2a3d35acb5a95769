"""The TypeScript SDK's default (ACP v1) client drives ``crow serve`` (issue 7).

tests/interop/ts/drive_v1.mjs uses ``@agentclientprotocol/sdk``'s default
entrypoint (stable v1) and validates every message in both directions against
the SDK's own v1 zod schemas: initialize(1) → new → prompt with tool calls and a
permission question → load (history replayed as v1 updates) → close.  Then a
crow.acp v2 client resumes the same session.
"""

from __future__ import annotations

import asyncio
import sys

import pytest
from crow_testing.fakemodel import Text, ToolCalls
from crow_testing.serve_support import CROW_SERVE, write_config
from crow_testing.support import ROOT
from test_serve_tools import probe_config
from test_ts_sdk import run_driver

from crow.acp import ClientSide, schema, spawn

TS_DIR = ROOT / "tests" / "interop" / "ts"

pytestmark = pytest.mark.interop


def drive_v1(command: str, prompt: str, permission: str = "allow") -> dict:
    report, result = run_driver(
        "drive_v1.mjs", "--command", command, "--prompt", prompt, "--permission", permission
    )
    assert result.returncode == 0
    return report


def test_the_ts_sdk_v1_client_runs_a_turn_with_tool_calls(crow_home, scripted_model):
    write_config(
        crow_home,
        scripted_model.base_url,
        extra=probe_config(extra='[permissions]\nexecute = "allow"\nedit = "ask"\n'),
    )
    scripted_model.script(
        ToolCalls(
            calls=[
                ("probe__echo", {"text": "hello"}),
                ("probe__shell", {"command": "make"}),
                ("probe__touch", {"path": "ts.txt"}),
            ]
        ),
        Text(text="all done", chunks=3, reasoning="thinking"),
    )
    report = drive_v1(f"{sys.executable} -m crow serve", "use the tools")
    assert report["initialize"]["agentInfo"]["name"] == "crow"
    assert report["stopReason"] == "end_turn" and report["agentText"] == "all done"
    live = report["liveUpdates"]
    started = {u["toolCallId"]: u for u in live if u["sessionUpdate"] == "tool_call"}
    assert sorted(u["kind"] for u in started.values()) == ["edit", "execute", "read"]
    finals = {
        u["toolCallId"]: u["status"]
        for u in live
        if u["sessionUpdate"] == "tool_call_update" and u.get("status")
    }
    assert sorted(finals.values()) == ["completed", "completed", "completed"]
    [question] = report["permissionRequests"]
    edit = next(i for i, u in started.items() if u["kind"] == "edit")
    assert question["toolCall"]["toolCallId"] == edit
    diffs = [
        c
        for u in live
        if u["sessionUpdate"] == "tool_call_update"
        for c in u.get("content") or []
        if c["type"] == "diff"
    ]
    assert diffs[-1] == {"type": "diff", "path": "/tmp/probe/ts.txt", "newText": "new\n"}
    assert "agent_thought_chunk" in {u["sessionUpdate"] for u in live}

    replayed = report["loadUpdates"]
    kinds = [u["sessionUpdate"] for u in replayed]
    assert "user_message_chunk" in kinds and "tool_call" in kinds
    user = "".join(
        u["content"]["text"] for u in replayed if u["sessionUpdate"] == "user_message_chunk"
    )
    assert user == "use the tools"
    replayed_text = "".join(
        u["content"]["text"] for u in replayed if u["sessionUpdate"] == "agent_message_chunk"
    )
    assert replayed_text == "all done"
    assert report["loadResponse"]["configOptions"][0]["id"] == "model"

    asyncio.run(_resume_over_v2(report["sessionId"], str(TS_DIR)))


async def _resume_over_v2(session_id: str, cwd: str) -> None:
    transport = await spawn([*CROW_SERVE])
    info = schema.Implementation(name="crow-v2-after-ts", version="0")
    async with asyncio.timeout(30), ClientSide(transport, info=info) as client:
        await client.initialize()
        session = await client.resume_session(session_id, cwd, replay=True)
        assert session.projection.text("user") == "use the tools"
        assert session.projection.text() == "all done"
        assert len(session.projection.tool_calls) == 3
        await session.close()


def test_the_ts_sdk_v1_client_rejecting_a_permission(crow_home, scripted_model):
    write_config(crow_home, scripted_model.base_url, extra=probe_config())
    scripted_model.script(
        ToolCalls(calls=[("probe__touch", {"path": "no.txt"})]), Text(text="fine, I won't")
    )
    report = drive_v1(f"{sys.executable} -m crow serve", "write", permission="reject")
    assert report["stopReason"] == "end_turn"
    finals = [
        u["status"]
        for u in report["liveUpdates"]
        if u["sessionUpdate"] == "tool_call_update" and u.get("status")
    ]
    assert finals[-1] == "failed"
    assert "rejected" in scripted_model.requests[1]["messages"][-1]["content"]


def test_the_ts_sdk_v1_client_sees_a_recalled_memory(crow_home, scripted_model):
    """A v1 client gets the recall as a v1 tool_call (kind search) with its content."""
    from test_memory import crow_memory, memory_config

    write_config(crow_home, scripted_model.base_url, extra=memory_config(scripted_model.base_url))
    added = crow_memory("add", "the staging host is staging-3", "--scope", "global")
    assert added.returncode == 0, added.stderr
    scripted_model.set_default(Text(text="staging-3"))
    report = drive_v1(f"{sys.executable} -m crow serve", "which staging host?")
    assert report["stopReason"] == "end_turn" and report["agentText"] == "staging-3"
    [call] = [u for u in report["liveUpdates"] if u["sessionUpdate"] == "tool_call"]
    assert call["title"] == "Recalled 1 memory" and call["kind"] == "search"
    assert call["status"] == "completed"
    assert "staging-3" in call["content"][0]["content"]["text"]
    assert "tool_call" in [u["sessionUpdate"] for u in report["loadUpdates"]]
