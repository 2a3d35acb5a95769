"""Crow's client in front of v1-only agents (ACP-V2.md §3.3): it offers 2, the agent
answers 1, and the connection goes on in v1, shown as v2.

Two real v1 agents: tests/v1_agent.py (raw JSON lines, standard library only) and
tests/v1_sdk_agent.py (on the official Python SDK), as subprocesses over stdio; the
line client (crow run, crow sessions, crow judge) and ClientSide itself drive them.
"""

from __future__ import annotations

import asyncio
import shlex
import subprocess
import sys
from typing import Any

import pytest
from crow_testing.support import ROOT

from crow.acp import ClientSide, schema, spawn
from crow.acp.v1_client import NotInV1

STDLIB = shlex.join([sys.executable, str(ROOT / "tests" / "v1_agent.py")])
SDK = shlex.join([sys.executable, str(ROOT / "tests" / "v1_sdk_agent.py")])
AGENTS = pytest.mark.parametrize("agent", [STDLIB, SDK], ids=["stdlib", "python-sdk"])
INFO = schema.Implementation(name="v1-test", version="0")


def crow(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "crow", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd="/tmp",
        stdin=subprocess.DEVNULL,
    )


@AGENTS
def test_crow_run_drives_a_v1_agent_through_a_turn(agent: str) -> None:
    ran = crow("run", "--command", agent, "hello v1")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == "Echo: hello v1\n"
    assert "✓ read notes" in ran.stderr  # its tool call, shown as any other
    assert "Traceback" not in ran.stderr


@AGENTS
@pytest.mark.parametrize(("flag", "chosen"), [("--yes", "allow"), ("--no", "reject")])
def test_crow_run_answers_a_v1_permission_question(agent: str, flag: str, chosen: str) -> None:
    ran = crow("run", "--command", agent, flag, "ask")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == f"you chose {chosen}\n"


def test_crow_run_without_a_flag_refuses_a_v1_question_and_says_which_flag() -> None:
    ran = crow("run", "--command", STDLIB, "ask")
    assert ran.returncode == 6, ran.stderr
    assert "pass --yes to allow it" in ran.stderr and "rm -rf build" in ran.stderr


def test_a_v1_turn_that_fails_ends_in_error_with_the_agents_reason() -> None:
    ran = crow("run", "--command", STDLIB, "fail")
    assert ran.returncode == 1
    assert "the v1 agent broke" in ran.stderr and "Traceback" not in ran.stderr


def test_verify_against_a_v1_agent_says_it_has_no_v1_form() -> None:
    ran = crow("run", "--command", STDLIB, "--verify", "hello")
    assert ran.returncode == 2
    [said] = [line for line in ran.stderr.splitlines() if line.startswith("crow: --verify")]
    assert "ACP v1" in said and "crow proxy judge" in said


def test_crow_sessions_lists_a_v1_agents_sessions_or_says_it_cannot() -> None:
    listed = crow("sessions", "--command", STDLIB)
    assert listed.returncode == 0, listed.stderr
    unlisted = crow("sessions", "--command", f"{STDLIB} --no-list")
    assert unlisted.returncode != 0
    assert "does not list its sessions" in unlisted.stderr and "Traceback" not in unlisted.stderr


def test_crow_judge_against_a_v1_agent_says_so_in_one_line() -> None:
    judged = crow("judge", "--command", STDLIB, "--session", "v1-nope", "--once")
    assert judged.returncode != 0
    assert "ACP v1" in judged.stderr and "Traceback" not in judged.stderr


@AGENTS
async def test_a_v1_session_is_projected_cancelled_and_loaded_as_v2(agent: str) -> None:
    transport = await spawn(agent)
    async with asyncio.timeout(30), ClientSide(transport, info=INFO) as client:
        answered = await client.initialize()
        assert answered.protocol_version == 1 and client.v1 is not None
        session = await client.new_session("/tmp")
        turn = await session.run("hello")
        assert turn.stop_reason == "end_turn"
        projection = session.projection
        assert projection.text() == "Echo: hello"
        [call] = projection.tool_calls.values()
        assert (call.title, call.kind, call.status) == ("read notes", "read", "completed")
        [plan] = projection.plans.values()
        assert [e.content for e in plan.entries] == ["echo it"]
        waiting = await session.prompt("wait")
        await session.cancel()
        await session.wait(waiting)
        assert waiting.stop_reason == "cancelled"
        loaded = await client.resume_session(session.id, "/tmp", replay=True)
        assert loaded.projection.text() == "Echo: hello"  # the replay rebuilt it
        with pytest.raises(NotInV1):
            await client.resume_session(session.id, "/tmp", replay_after=3)


@AGENTS
async def test_a_v1_permission_question_reaches_on_permission_as_v2(agent: str) -> None:
    asked: list[Any] = []

    async def allow(request: schema.RequestPermissionRequest) -> Any:
        asked.append(request)
        return schema.RequestPermissionResponse(
            outcome=schema.SelectedPermissionOutcome(option_id="allow")
        )

    transport = await spawn(agent)
    async with asyncio.timeout(30), ClientSide(transport, info=INFO, on_permission=allow) as client:
        await client.initialize()
        session = await client.new_session("/tmp")
        turn = await session.run("ask")
    assert turn.stop_reason == "end_turn" and session.projection.text() == "you chose allow"
    [question] = asked
    assert question.title == "rm -rf build"
    assert question.subject.tool_call.tool_call_id == "call-1"
    assert [o.kind for o in question.options] == ["allow_once", "reject_once"]
    assert session.projection.tool_calls["call-1"].status == "completed"
