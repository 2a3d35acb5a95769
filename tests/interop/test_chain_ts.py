"""crow conductor between the official TypeScript SDK's client and agent.

The SDK's v2 client validates every message it gets through a chain (initialize →
new → prompt → idle → resume with replay → close); the SDK's v1 client runs a turn
with tool calls and a permission question through a chain in front of crow serve.
"""

from __future__ import annotations

import json
import shlex
import sys

import pytest
from crow_testing.fakemodel import Text, ToolCalls
from crow_testing.serve_support import write_config
from crow_testing.support import ROOT
from test_serve_tools import probe_config
from test_ts_sdk import TS_ECHO_AGENT, drive, run_driver
from test_v1_ts import drive_v1

pytestmark = pytest.mark.interop

PASS = shlex.join([sys.executable, str(ROOT / "examples" / "arrow_proxy.py"), "--prefix", ""])
ARROW = shlex.join([sys.executable, str(ROOT / "examples" / "arrow_proxy.py")])


def conductor(*components: str) -> str:
    """The chain's command line, as the drivers' JSON argv (its words hold spaces)."""
    return json.dumps([sys.executable, "-m", "crow", "conductor", "agent", *components])


@pytest.mark.parametrize(("proxies", "prefix"), [([], ""), ([PASS], ""), ([ARROW, ARROW], ">>")])
def test_the_ts_sdk_client_drives_the_ts_echo_agent_through_a_chain(proxies, prefix):
    report = drive(conductor(*proxies, f"{TS_ECHO_AGENT} --chunks 3"), "through the chain")
    assert report["initialize"]["protocolVersion"] == 2
    assert report["stopReason"] == "end_turn"
    assert report["agentText"] == prefix + "Echo: through the chain"
    kinds = [u["sessionUpdate"] for u in report["replayUpdates"]]
    assert "user_message" in kinds and kinds[-1] == "state_update"


def test_the_ts_sdk_v1_client_runs_a_tool_turn_through_a_chain(crow_home, scripted_model):
    write_config(
        crow_home,
        scripted_model.base_url,
        extra=probe_config(extra='[permissions]\nexecute = "allow"\nedit = "ask"\n'),
    )
    scripted_model.script(
        ToolCalls(calls=[("probe__echo", {"text": "hi"}), ("probe__touch", {"path": "c.txt"})]),
        Text(text="chained", chunks=2),
    )
    serve = shlex.join([sys.executable, "-m", "crow", "serve"])
    report = drive_v1(conductor(PASS, serve), "use the tools")
    assert report["initialize"]["protocolVersion"] == 1
    assert report["stopReason"] == "end_turn" and report["agentText"] == "chained"
    [question] = report["permissionRequests"]
    assert question["toolCall"]["toolCallId"]
    kinds = {u["sessionUpdate"] for u in report["loadUpdates"]}
    assert {"user_message_chunk", "tool_call", "agent_message_chunk"} <= kinds


def test_crow_proxy_memory_in_front_of_an_agent_that_takes_no_mcp_servers(crow_home):
    """The TS SDK's echo agent advertises no capabilities.session.mcp: the memory proxy
    passes its sessions through unchanged (with one more server the agent refused
    session/new and the chain failed) and says once that memory is unavailable."""
    memory = shlex.join([sys.executable, "-m", "crow", "proxy", "memory"])
    report, result = run_driver(
        "drive_agent.mjs",
        *("--command", conductor(memory, f"{TS_ECHO_AGENT} --chunks 2")),
        *("--prompt", "no memory here"),
    )
    assert report["stopReason"] == "end_turn"
    assert report["agentText"] == "Echo: no memory here"
    said = [line for line in result.stderr.splitlines() if "memory is not available" in line]
    assert len(said) == 1, result.stderr
