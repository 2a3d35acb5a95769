"""AgentSide and ClientSide against each other, in memory (ACP-V2.md §3, §5, §7)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

import crow.acp
from crow.acp import AgentSide, ClientSide, SessionNotFound, schema
from crow.acp.errors import UnsupportedProtocolVersion
from crow.acp.transports.memory import memory_pair

AGENT_INFO = schema.Implementation(name="test-agent", version="1")
CLIENT_INFO = schema.Implementation(name="test-client", version="1")


class PermissionAgent:
    """Asks permission in every turn; the outcome decides the stop reason."""

    def __init__(self, agent: AgentSide) -> None:
        self.agent = agent
        self.outcomes: list[Any] = []
        agent.handle("session/new", self.new)
        agent.handle("session/prompt", self.prompt)
        agent.handle("session/close", self.close)
        agent.handle("session/cancel", self.cancel)
        self.turns: dict[str, asyncio.Task[None]] = {}

    async def new(self, params: schema.NewSessionRequest) -> schema.NewSessionResponse:
        return schema.NewSessionResponse(session_id="s1")

    async def close(self, params: schema.CloseSessionRequest) -> None:
        if params.session_id != "s1":
            raise SessionNotFound(params.session_id)

    async def prompt(self, params: schema.PromptRequest) -> schema.PromptResponse:
        self.turns[params.session_id] = self.agent.spawn(self.turn(params.session_id))
        return schema.PromptResponse(message_id="u1")

    async def cancel(self, params: schema.CancelSessionNotification) -> None:
        pass  # the client answers the pending permission with "cancelled"

    async def turn(self, sid: str) -> None:
        send = self.agent.send_update
        await send(sid, {"sessionUpdate": "user_message", "messageId": "u1", "content": []})
        await send(sid, {"sessionUpdate": "state_update", "state": "running"})
        await send(sid, {"sessionUpdate": "state_update", "state": "requires_action"})
        answer = await self.agent.request_permission(
            schema.RequestPermissionRequest(
                session_id=sid,
                title="Run it?",
                options=[schema.PermissionOption(option_id="yes", name="Yes", kind="allow_once")],
            )
        )
        self.outcomes.append(answer.outcome)
        stop = "end_turn" if getattr(answer.outcome, "option_id", None) == "yes" else "cancelled"
        await send(sid, {"sessionUpdate": "state_update", "state": "idle", "stopReason": stop})


@contextlib.asynccontextmanager
async def connected(on_permission=None) -> AsyncIterator[tuple[PermissionAgent, ClientSide]]:
    agent_t, client_t = memory_pair()
    agent = AgentSide(
        agent_t,
        info=AGENT_INFO,
        capabilities=schema.AgentCapabilities(session=schema.SessionCapabilities()),
    )
    logic = PermissionAgent(agent)
    serving = asyncio.create_task(agent.serve())
    async with asyncio.timeout(5):
        async with ClientSide(client_t, info=CLIENT_INFO, on_permission=on_permission) as client:
            yield logic, client
        await serving


async def test_initialize_and_a_turn_with_an_approved_permission():
    async def approve(request: schema.RequestPermissionRequest) -> schema.RequestPermissionResponse:
        assert request.title == "Run it?"
        return schema.RequestPermissionResponse(
            outcome=schema.SelectedPermissionOutcome(option_id="yes")
        )

    async with connected(approve) as (logic, client):
        init = await client.initialize()
        assert init.protocol_version == 2 and init.info.name == "test-agent"
        session = await client.new_session("/tmp")
        turn = await session.run("go")
        assert turn.stop_reason == "end_turn"
        assert logic.outcomes[0].outcome == "selected"


async def test_cancel_answers_the_pending_permission_with_cancelled():
    asked = asyncio.Event()

    async def never(request: schema.RequestPermissionRequest) -> schema.RequestPermissionResponse:
        asked.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async with connected(never) as (logic, client):
        await client.initialize()
        session = await client.new_session("/tmp")
        turn = await session.prompt("go")
        await asked.wait()
        assert session.projection.state == "requires_action"
        await session.cancel()
        await session.wait(turn)
        assert turn.stop_reason == "cancelled"
        assert logic.outcomes[0].outcome == "cancelled"


async def test_a_headless_client_answers_cancelled():
    async with connected() as (_logic, client):
        await client.initialize()
        session = await client.new_session("/tmp")
        assert (await session.run("go")).stop_reason == "cancelled"


async def test_closing_an_unknown_session_counts_as_success():
    async with connected() as (_, client):
        await client.initialize()
        await client.close_session("nope")  # -32002 from the agent: treated as closed


async def test_requests_before_initialize_fail_and_v1_is_refused():
    async with connected() as (_, client):
        with pytest.raises(crow.acp.InvalidRequest):
            await client.new_session("/tmp")
        with pytest.raises(UnsupportedProtocolVersion) as info:
            await client.peer.request("initialize", {"protocolVersion": 1})
        assert info.value.data == {"requested": 1, "supported": [2]}


async def test_waiting_on_a_turn_ends_when_the_agent_goes_away():
    async with connected() as (logic, client):
        await client.initialize()
        session = await client.new_session("/tmp")
        turn = session.projection.begin_turn()
        await logic.agent.peer.aclose()
        with pytest.raises(ConnectionError):
            await session.wait(turn)


def test_public_api_is_what_the_package_defines():
    exported = set(crow.acp.__all__)
    assert exported == {name for name in dir(crow.acp) if not name.startswith("_")} - {
        "agent",
        "client",
        "connection",
        "errors",
        "jsonrpc",
        "projection",
        "router",
        "transports",
        "v1_client",
    }
    assert crow.acp.__all__ == sorted(crow.acp.__all__, key=lambda n: (not n.isupper(), n))
