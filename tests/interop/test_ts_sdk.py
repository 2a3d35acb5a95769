"""crow.acp against the official TypeScript SDK, in both directions.

- The SDK's v2 client (tests/interop/ts/drive_agent.mjs, every message validated
  by the SDK's own schemas) drives examples/echo_agent.py through initialize →
  new → prompt → idle → resume with replay → close.
- crow.acp's client drives the SDK's echo agent (tests/interop/ts/echo_agent.mjs).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from crow_testing.support import ROOT

from crow.acp import ClientSide, schema, spawn

TS_DIR = ROOT / "tests" / "interop" / "ts"
ECHO_AGENT = f"{sys.executable} {ROOT / 'examples' / 'echo_agent.py'}"
TS_ECHO_AGENT = f"node {TS_DIR / 'echo_agent.mjs'}"
CLIENT_INFO = schema.Implementation(name="crow-interop", version="0")

pytestmark = pytest.mark.interop


def run_driver(script: str, *arguments: str) -> tuple[dict, subprocess.CompletedProcess[str]]:
    """Run one of tests/interop/ts's drivers; its JSON report (which must say ok)."""
    result = subprocess.run(
        ["node", str(TS_DIR / script), *arguments],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=TS_DIR,
    )
    report = json.loads(result.stdout)
    assert report["ok"], f"{report.get('error')}\n{result.stderr}"
    return report, result


def drive(command: str, prompt: str, *options: str) -> dict:
    report, result = run_driver(
        "drive_agent.mjs", "--command", command, "--prompt", prompt, *options
    )
    assert result.returncode == 0
    return report


@pytest.mark.parametrize("chunks", ["1", "3"])
def test_the_ts_sdk_client_drives_crows_echo_agent(chunks):
    report = drive(f"{ECHO_AGENT} --chunks {chunks}", "hello from the TS SDK")
    assert report["initialize"]["protocolVersion"] == 2
    assert report["stopReason"] == "end_turn"
    assert report["agentText"] == "Echo: hello from the TS SDK"
    live = report["liveUpdates"]
    user = next(u for u in live if u["sessionUpdate"] == "user_message")
    assert user["messageId"] == report["promptResponse"]["messageId"]
    kinds = [u["sessionUpdate"] for u in report["replayUpdates"]]
    assert kinds == ["user_message", "agent_message", "state_update"]
    replay_ids = [u["messageId"] for u in report["replayUpdates"][:2]]
    live_agent = next(u for u in live if u["sessionUpdate"] == "agent_message")
    assert replay_ids == [user["messageId"], live_agent["messageId"]]


async def test_crows_client_drives_the_ts_sdk_echo_agent():
    transport = await spawn(f"{TS_ECHO_AGENT} --chunks 4", cwd=str(TS_DIR))
    async with ClientSide(transport, info=CLIENT_INFO) as client:
        init = await client.initialize()
        assert init.protocol_version == 2 and init.capabilities.session is not schema.UNSET
        session = await client.new_session(os.getcwd())
        turn = await session.run("hello from crow")
        assert turn.stop_reason == "end_turn"
        assert session.projection.text() == "Echo: hello from crow"
        user_id = session.last_prompt_response.message_id
        assert session.projection.messages[user_id].text == "hello from crow"

        listed = await client.list_sessions(cwd=os.getcwd())
        assert session.id in [s.session_id for s in listed.sessions]

        live = [(m.message_id, m.role, m.text) for m in session.projection.messages.values()]
        resumed = await client.resume_session(session.id, os.getcwd(), replay=True)
        replayed = [(m.message_id, m.role, m.text) for m in resumed.projection.messages.values()]
        assert replayed == live
        assert resumed.projection.state == "idle"
        await resumed.close()


async def test_crows_client_cancels_a_ts_sdk_agent_turn():
    transport = await spawn(f"{TS_ECHO_AGENT} --chunks 40 --delay-ms 50", cwd=str(TS_DIR))
    async with ClientSide(transport, info=CLIENT_INFO) as client:
        await client.initialize()
        session = await client.new_session(os.getcwd())
        turn = await session.prompt("a long reply to cancel")
        while not session.projection.text():
            await client.next_update(session.id)
        await session.cancel()
        await session.wait(turn)
        assert turn.stop_reason == "cancelled"
        assert len(session.projection.text()) < len("Echo: a long reply to cancel")


def test_the_ts_sdk_client_drives_crow_serve(crow_home, scripted_model):
    from crow_testing.fakemodel import Text
    from crow_testing.serve_support import write_config

    write_config(crow_home, scripted_model.base_url)
    scripted_model.set_default(Text(text="Hello from the model", chunks=3, reasoning="hmm"))
    report = drive(f"{sys.executable} -m crow serve", "hello crow")
    assert report["initialize"]["info"]["name"] == "crow"
    assert report["stopReason"] == "end_turn"
    assert report["agentText"] == "Hello from the model"
    # Notices (the turn waiting for its tool servers) come and go with timing.
    live = [u for u in report["liveUpdates"] if u["sessionUpdate"] != "notice"]
    kinds = [u["sessionUpdate"] for u in live]
    assert kinds[kinds.index("user_message") :] == [
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
    ]
    user = live[kinds.index("user_message")]
    assert user["messageId"] == report["promptResponse"]["messageId"]
    replay_ids = [u.get("messageId") for u in report["replayUpdates"]]
    assert user["messageId"] in replay_ids
    assert report["replayUpdates"][-1]["sessionUpdate"] == "state_update"


def test_the_ts_sdk_validates_the_tool_call_surface(crow_home, scripted_model):
    """Tool calls, a permission request, a diff and a display terminal, as the SDK sees them."""
    from crow_testing.fakemodel import Text, ToolCalls
    from crow_testing.serve_support import write_config
    from test_serve_tools import probe_config

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
                ("probe__touch", {"path": "x.txt"}),
            ]
        ),
        Text(text="all done"),
    )
    report = drive(f"{sys.executable} -m crow serve", "use the tools")
    assert report["stopReason"] == "end_turn" and report["agentText"] == "all done"
    live = report["liveUpdates"]
    kinds = {u["sessionUpdate"] for u in live}
    assert {
        "tool_call_update",
        "tool_call_content_chunk",
        "terminal_update",
        "terminal_output_chunk",
    } <= kinds
    states = [u["state"] for u in live if u["sessionUpdate"] == "state_update"]
    assert "requires_action" in states  # the edit asked; the headless SDK client said no
    finals = {
        u["toolCallId"]: u["status"]
        for u in live
        if u["sessionUpdate"] == "tool_call_update" and u.get("status")
    }
    assert sorted(finals.values()) == ["completed", "completed", "failed"]


def test_the_ts_sdk_validates_a_turn_that_recalls_a_memory(crow_home, scripted_model):
    """The recalled memories arrive as an ordinary (completed, kind search) tool call."""
    from crow_testing.fakemodel import Text
    from crow_testing.serve_support import write_config
    from test_memory import crow_memory, memory_config

    write_config(crow_home, scripted_model.base_url, extra=memory_config(scripted_model.base_url))
    added = crow_memory("add", "the staging host is staging-3", "--scope", "global")
    assert added.returncode == 0, added.stderr
    scripted_model.set_default(Text(text="staging-3"))
    report = drive(f"{sys.executable} -m crow serve", "which staging host?")
    assert report["stopReason"] == "end_turn" and report["agentText"] == "staging-3"
    [recall] = [u for u in report["liveUpdates"] if u["sessionUpdate"] == "tool_call_update"]
    assert recall["title"] == "Recalled 1 memory" and recall["kind"] == "search"
    assert "staging-3" in recall["content"][0]["content"]["text"]
    assert recall in report["replayUpdates"]


def test_the_ts_sdk_validates_a_judged_turn_and_still_sees_it_complete(crow_home, scripted_model):
    """The verdict is one more agent_message, after the worker's idle: the SDK client
    takes the idle as the turn's end, then sees the verdict, live and replayed."""
    from crow_testing.fakemodel import Text, ToolCalls
    from crow_testing.serve_support import write_config

    write_config(crow_home, scripted_model.base_url, extra='[tools]\nbuiltin = ["fs"]\n')
    verdict = ("verdict", {"pass": True, "reasons": ["it said hello"]})
    scripted_model.script(Text(text="hello"), ToolCalls(calls=[verdict]))
    report = drive(f"{sys.executable} -m crow serve", "say hello", "--verify")
    assert report["stopReason"] == "end_turn" and report["agentText"] == "hello"
    assert report["initialize"]["capabilities"]["_meta"]["crow/verify"] is True
    [posted] = [u for u in report["afterIdleUpdates"] if u["sessionUpdate"] == "agent_message"]
    assert posted["content"] == [{"type": "text", "text": "✓ verified: it said hello"}]
    meta = posted["_meta"]["crow/verdict"]
    user = next(u for u in report["liveUpdates"] if u["sessionUpdate"] == "user_message")
    assert meta["verdict"] == "pass" and meta["turnMessageId"] == user["messageId"]
    assert meta["judgeSessionId"].startswith("sess_") and meta["final"] is True
    assert posted in report["replayUpdates"]
    # The judge at work, listed as background work (its tool call), as the SDK parsed it.
    judging = [i for u in report["afterIdleUpdates"] for i in u.get("background") or []]
    assert judging and judging[0]["type"] == "tool_call"


def test_crow_run_drives_the_ts_sdk_echo_agent():
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "crow",
            "run",
            "--command",
            f"{TS_ECHO_AGENT} --chunks 3",
            "hello from crow run",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=TS_DIR,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Echo: hello from crow run\n"


@pytest.mark.parametrize("transport", ["http", "ws"])
def test_the_ts_sdk_http_and_websocket_clients_drive_crow_serve_http(
    crow_home, scripted_model, transport
):
    from crow_testing.fakemodel import Text
    from crow_testing.serve_support import HttpServer, write_config

    write_config(crow_home, scripted_model.base_url, extra="[tools]\nbuiltin = []\n")
    scripted_model.set_default(Text(text="Hello over the wire", chunks=3))
    server = HttpServer()
    try:
        url = server.url if transport == "http" else server.ws_url
        report, _ = run_driver(
            "drive_http.mjs",
            *("--url", url, "--transport", transport, "--prompt", "hello"),
            *("--unknown-session", "sess_nobody_has"),
        )
        # A session the agent does not know: a JSON-RPC error, and the connection lives
        # on (the TS client closes its transport on an HTTP 404).
        assert report["unknownSession"] == {
            "code": -32002,
            "data": {"sessionId": "sess_nobody_has"},
        }
        assert report["stopReason"] == "end_turn"
        assert report["agentText"] == "Hello over the wire"
        user = next(u for u in report["liveUpdates"] if u["sessionUpdate"] == "user_message")
        assert user["messageId"] == report["promptResponse"]["messageId"]
        assert user["messageId"] in [u.get("messageId") for u in report["replayUpdates"]]
    finally:
        server.stop()


def test_the_ts_sdk_validates_held_prompts_and_background_work(crow_home, scripted_model):
    """Two prompts at once (the second held, shown in ``_crow/queue``, inserted after
    the first's idle) and a process left running by a tool, listed in
    ``state_update.background`` until it ends: every message valid to the SDK."""
    from crow_testing.fakemodel import Slow, Text, ToolCalls
    from crow_testing.serve_support import write_config

    from crow.extensions import QUEUE

    write_config(
        crow_home,
        scripted_model.base_url,
        extra='[tools]\nbuiltin = ["terminal"]\n\n[permissions]\nexecute = "allow"\n',
    )
    scripted_model.script(
        ToolCalls(calls=[("terminal__start", {"command": "sleep 1; exit 0"})]),
        Slow("it runs", chunks=4, delay_s=0.2),
        Text(text="second done"),
    )
    report, result = run_driver(
        "drive_queue.mjs",
        "--command",
        f"{sys.executable} -m crow serve",
        "--prompt",
        "start the job",
        "--prompt",
        "then this",
        "--until-background-empty",
    )
    assert result.returncode == 0
    first, second = report["answers"]
    assert first["messageId"] != second["messageId"]
    updates = report["updates"]
    queued = [u for u in updates if u["sessionUpdate"] == QUEUE]
    assert [[p["preview"] for p in u["prompts"]] for u in queued] == [["then this"], []]
    assert queued[0]["prompts"][0]["messageId"] == second["messageId"]
    listed = [u["background"] for u in updates if u.get("background")]
    assert listed and listed[0][0]["type"] == "terminal"
    ended = [u for u in updates if u["sessionUpdate"] == "terminal_update" and "exitStatus" in u]
    assert ended and ended[-1]["exitStatus"] == {"exitCode": 0}
