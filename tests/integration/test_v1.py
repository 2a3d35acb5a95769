"""ACP v1 clients on ``crow serve`` (issue 7, ACP-V2.md §3.3, §12): dual stack.

The official Python v1 client (the ``acp`` package's ``ClientSideConnection``)
drives a real ``crow serve`` with the scripted model and the MCP probe; a
session moves between v1 and v2 clients both ways; ``[acp] v2 = false`` leaves
v1 only.  The TypeScript SDK's v1 client is in tests/interop/test_v1_ts.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import tempfile
from collections.abc import AsyncIterator
from typing import Any

import acp
import pytest
from acp import schema as v1
from acp.client.connection import ClientSideConnection
from crow_testing.fakemodel import Error, Slow, Text, ToolCalls
from crow_testing.serve_support import CROW_SERVE, write_config
from crow_testing.support import RawAgent
from test_serve_tools import probe_config

from crow.acp import ClientSide, MessageTransport, schema, spawn
from crow.acp.errors import (
    INTERNAL_ERROR,
    INVALID_REQUEST,
    RESOURCE_NOT_FOUND,
    UNSUPPORTED_PROTOCOL_VERSION,
)

V1_INFO = v1.Implementation(name="crow-v1-test", version="0")
V2_INFO = schema.Implementation(name="crow-v2-test", version="0")
WAIT_S = 30


class V1Client:
    """The ``acp`` Client interface: records every update, answers permission questions."""

    def __init__(self, answer: str | None = "allow_once") -> None:
        self.answer = answer
        self.updates: list[tuple[str, Any]] = []
        self.questions: list[dict[str, Any]] = []
        self.changed = asyncio.Event()

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append((session_id, update))
        self.changed.set()

    async def until(self, predicate: Any) -> None:
        """Wait (the caller bounds it) until ``predicate()`` holds."""
        while not predicate():
            self.changed.clear()
            await self.changed.wait()

    async def request_permission(
        self, options: list[Any], session_id: str, tool_call: Any, **kwargs: Any
    ) -> v1.RequestPermissionResponse:
        self.questions.append({"toolCall": tool_call, "options": options, "meta": kwargs})
        if self.answer is None:
            return v1.RequestPermissionResponse(outcome=v1.DeniedOutcome(outcome="cancelled"))
        return v1.RequestPermissionResponse(
            outcome=v1.AllowedOutcome(outcome="selected", option_id=self.answer)
        )

    def kinds(self, session_id: str) -> list[str]:
        return [u.session_update for sid, u in self.updates if sid == session_id]

    def of(self, session_id: str, kind: str) -> list[Any]:
        return [u for sid, u in self.updates if sid == session_id and u.session_update == kind]

    def text(self, session_id: str, kind: str = "agent_message_chunk") -> str:
        return "".join(
            u.content.text for u in self.of(session_id, kind) if u.content.type == "text"
        )


@contextlib.asynccontextmanager
async def v1_client(client: V1Client, *args: str) -> AsyncIterator[ClientSideConnection]:
    """``crow serve`` spawned by the official v1 client, initialized as v1.

    The agent's stderr is kept: it must hold no traceback when the client is done.
    """
    with tempfile.TemporaryFile() as stderr:
        async with (
            asyncio.timeout(WAIT_S),
            acp.spawn_agent_process(
                client,
                sys.executable,
                "-m",
                "crow",
                "serve",
                *args,
                env=dict(os.environ),
                transport_kwargs={"stderr": stderr},
            ) as (conn, process),
        ):
            init = await conn.initialize(protocol_version=1, client_info=V1_INFO)
            assert init.protocol_version == 1
            yield conn
        assert process.returncode == 0
        stderr.seek(0)
        logged = stderr.read().decode()
        assert "Traceback" not in logged and "ERROR" not in logged, logged


def prompt(text: str) -> list[Any]:
    return [v1.TextContentBlock(type="text", text=text)]


def user_texts(request: dict[str, Any]) -> list[str]:
    """The user messages the model saw, as text."""
    return [
        "".join(p["text"] for p in m["content"] if p["type"] == "text")
        for m in request["messages"]
        if m["role"] == "user"
    ]


@pytest.fixture
def no_acp_errors(caplog: pytest.LogCaptureFixture) -> Any:
    """The v1 client logs (and drops) every message it cannot validate: none allowed."""
    yield
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, [r.getMessage() for r in errors]


async def test_a_v1_client_runs_turns_with_tool_calls_and_a_v2_client_resumes_them(
    crow_home, scripted_model, no_acp_errors
):
    write_config(crow_home, scripted_model.base_url, extra=probe_config())
    scripted_model.script(
        ToolCalls(calls=[("probe__echo", {"text": "ping"})]),
        Text(text="pong", chunks=2),
        ToolCalls(calls=[("probe__touch", {"path": "v1.txt"})]),
        Text(text="written"),
    )
    client = V1Client(answer="allow_once")
    async with v1_client(client) as conn:
        new = await conn.new_session(cwd="/tmp", mcp_servers=[])
        sid = new.session_id
        model = next(o for o in new.config_options if o.id == "model")
        assert model.current_value == "main" and model.category == "model"

        response = await conn.prompt(session_id=sid, prompt=prompt("use the tool"))
        assert response.stop_reason == "end_turn"
        assert client.text(sid) == "pong"
        assert client.of(sid, "user_message_chunk") == []  # its own prompt is not echoed
        [started] = client.of(sid, "tool_call")
        assert started.kind == "read" and started.status == "pending"
        assert started.raw_input == {"text": "ping"} and started.title
        progress = [
            u for u in client.of(sid, "tool_call_update") if u.tool_call_id == started.tool_call_id
        ]
        assert [u.status for u in progress if u.status] == ["in_progress", "completed"]
        echoed = [c.content.text for u in progress for c in u.content or [] if c.type == "content"]
        assert "ping" in echoed
        assert not client.questions  # a read tool runs without asking

        response = await conn.prompt(session_id=sid, prompt=prompt("write it"))
        assert response.stop_reason == "end_turn"
        [question] = client.questions
        touch = client.of(sid, "tool_call")[-1]
        assert question["toolCall"].tool_call_id == touch.tool_call_id
        assert {o.kind for o in question["options"]} >= {"allow_once", "reject_once"}
        assert question["meta"]["crow/title"].startswith("Allow")
        updates = [
            u for u in client.of(sid, "tool_call_update") if u.tool_call_id == touch.tool_call_id
        ]
        diffs = [c for u in updates for c in u.content or [] if c.type == "diff"]
        assert diffs[-1].path == "/tmp/probe/v1.txt"
        assert diffs[-1].old_text is None and diffs[-1].new_text == "new\n"
        assert updates[-1].status == "completed"
        assert client.text(sid).endswith("written")
        kinds = set(client.kinds(sid))
        assert {"available_commands_update", "session_info_update", "usage_update"} <= kinds

    transport = await spawn([*CROW_SERVE])
    async with asyncio.timeout(WAIT_S), ClientSide(transport, info=V2_INFO) as v2:
        await v2.initialize()
        session = await v2.resume_session(sid, "/tmp", replay=True)
        projection = session.projection
        assert projection.text("user") == "use the toolwrite it"
        assert projection.text() == "pongwritten"
        calls = list(projection.tool_calls.values())
        assert [c.status for c in calls] == ["completed", "completed"]
        assert calls[0].fields["raw_input"] == {"text": "ping"}
        assert projection.state == "idle" and projection.stop_reason == "end_turn"
        scripted_model.script(Text(text="and over v2"))
        turn = await session.run("go on")
        assert turn.stop_reason == "end_turn"
        assert user_texts(scripted_model.requests[-1])[-2:] == ["write it", "go on"]


async def test_a_session_made_over_v2_loads_over_v1_with_its_history(
    crow_home, scripted_model, no_acp_errors
):
    write_config(
        crow_home,
        scripted_model.base_url,
        extra=probe_config(extra='[permissions]\nexecute = "allow"\n'),
    )
    scripted_model.script(
        ToolCalls(
            calls=[("probe__echo", {"text": "hello"}), ("probe__shell", {"command": "make"})]
        ),
        Text(text="done twice", chunks=3),
    )
    transport = await spawn([*CROW_SERVE])
    async with asyncio.timeout(WAIT_S), ClientSide(transport, info=V2_INFO) as v2:
        await v2.initialize()
        session = await v2.new_session("/tmp")
        assert (await session.run("run both")).stop_reason == "end_turn"
        sid = session.id

    client = V1Client()
    async with v1_client(client) as conn:
        loaded = await conn.load_session(cwd="/tmp", session_id=sid, mcp_servers=[])
        assert [o.id for o in loaded.config_options] == ["model"]
        assert client.text(sid, "user_message_chunk") == "run both"
        assert client.text(sid) == "done twice"
        started = client.of(sid, "tool_call")
        assert sorted(c.kind for c in started) == ["execute", "read"]
        shell = next(c for c in started if c.kind == "execute")
        shown = [
            c.content.text
            for u in client.of(sid, "tool_call_update")
            if u.tool_call_id == shell.tool_call_id
            for c in u.content or []
        ]
        assert "line 2 of make" in shown[-1] and "exit code 3" in shown[-1]
        assert "$ make" in shown[-1]

        scripted_model.script(Text(text="continued over v1"))
        response = await conn.prompt(session_id=sid, prompt=prompt("and now"))
        assert response.stop_reason == "end_turn"
        assert client.text(sid).endswith("continued over v1")
        assert user_texts(scripted_model.requests[-1]) == ["run both", "and now"]
        listed = await conn.list_sessions(cwd="/tmp")
        assert sid in [s.session_id for s in listed.sessions]


async def test_v1_cancel_answers_the_prompt_with_cancelled(
    crow_home, scripted_model, no_acp_errors
):
    write_config(crow_home, scripted_model.base_url, extra="[tools]\nbuiltin = []\n")
    scripted_model.script(Slow("a slow reply that gets cancelled", chunks=20, delay_s=0.2))
    client = V1Client()
    async with v1_client(client) as conn:
        sid = (await conn.new_session(cwd="/tmp", mcp_servers=[])).session_id
        running = asyncio.create_task(conn.prompt(session_id=sid, prompt=prompt("go")))
        await client.until(lambda: client.of(sid, "agent_message_chunk"))
        await conn.cancel(session_id=sid)
        assert (await running).stop_reason == "cancelled"


async def test_a_failed_turn_is_a_v1_prompt_error_after_its_note(
    crow_home, scripted_model, no_acp_errors
):
    write_config(
        crow_home, scripted_model.base_url, retry_attempts=1, extra="[tools]\nbuiltin = []\n"
    )
    scripted_model.script(Error(status=500, message="the model is down"))
    client = V1Client()
    async with v1_client(client) as conn:
        sid = (await conn.new_session(cwd="/tmp", mcp_servers=[])).session_id
        with pytest.raises(acp.RequestError) as failed:
            await conn.prompt(session_id=sid, prompt=prompt("hello?"))
        assert failed.value.code == INTERNAL_ERROR
        assert failed.value.data["stopReason"] == "error"
        assert "model" in str(failed.value)
        notes = [u for u in client.of(sid, "agent_message_chunk") if u.field_meta]
        assert notes and notes[-1].field_meta["crow/notice"] == "error"


async def test_v1_config_option_switches_the_model(crow_home, scripted_model, no_acp_errors):
    write_config(
        crow_home,
        scripted_model.base_url,
        models={"main": {}, "other": {}},
        extra="[tools]\nbuiltin = []\n",
    )
    client = V1Client()
    async with v1_client(client) as conn:
        sid = (await conn.new_session(cwd="/tmp", mcp_servers=[])).session_id
        changed = await conn.set_config_option(config_id="model", session_id=sid, value="other")
        assert changed.config_options[0].current_value == "other"
        [update] = client.of(sid, "config_option_update")
        assert update.config_options[0].current_value == "other"
        with pytest.raises(acp.RequestError) as refused:
            await conn.set_config_option(config_id="model", session_id="sess_nope", value="x")
        assert refused.value.code == RESOURCE_NOT_FOUND


def test_v2_off_refuses_v2_and_the_same_connection_initializes_as_v1(crow_home, scripted_model):
    """ACP-V2.md §3.3-§3.4: -32022 {requested, supported}; the connection stays usable."""
    write_config(crow_home, scripted_model.base_url, extra="[acp]\nv2 = false\n")
    agent = RawAgent([*CROW_SERVE])
    try:
        early, _ = agent.request("session/new", {"cwd": "/tmp"})
        assert early["error"]["code"] == INVALID_REQUEST
        refused = agent.initialize()
        assert refused["error"]["code"] == UNSUPPORTED_PROTOCOL_VERSION
        assert refused["error"]["data"] == {"requested": 2, "supported": [1]}
        accepted, _ = agent.request("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        result = accepted["result"]
        assert result["protocolVersion"] == 1
        assert result["agentCapabilities"]["loadSession"] is True
        assert result["agentInfo"]["name"] == "crow"
        again, _ = agent.request("initialize", {"protocolVersion": 1})
        assert again["error"]["code"] == INVALID_REQUEST
        created, _ = agent.request("session/new", {"cwd": "/tmp", "mcpServers": []})
        assert created["result"]["sessionId"].startswith("sess_")
    finally:
        agent.close()


def test_a_dual_stack_agent_answers_each_version_in_its_own_shape(crow_home, scripted_model):
    write_config(crow_home, scripted_model.base_url)
    for version, key in ((1, "agentCapabilities"), (2, "capabilities"), (7, "capabilities")):
        agent = RawAgent([*CROW_SERVE])
        try:
            params = {"protocolVersion": version, "info": {"name": "t", "version": "1"}}
            response, _ = agent.request("initialize", params)
            assert response["result"]["protocolVersion"] == min(version, 2)
            assert key in response["result"]
        finally:
            agent.close()
    agent = RawAgent([*CROW_SERVE])
    try:
        for bad, code in ((0, UNSUPPORTED_PROTOCOL_VERSION), ("1", -32602), (None, -32602)):
            response, _ = agent.request("initialize", {"protocolVersion": bad})
            assert response["error"]["code"] == code
        assert agent.initialize()["result"]["protocolVersion"] == 2
    finally:
        agent.close()


@pytest.mark.parametrize("scheme", ["http", "ws"])
async def test_a_v1_client_over_http_and_websocket(crow_home, scripted_model, scheme):
    """The v1 client over Crow's network transports (frames adapted for the acp package)."""
    from crow_testing.serve_support import HttpServer

    from crow.acp.transports.http_client import connect_url

    write_config(crow_home, scripted_model.base_url, extra="[tools]\nbuiltin = []\n")
    scripted_model.script(Text(text="Hello over the network", chunks=3))
    server = HttpServer()
    try:
        url = server.url if scheme == "http" else server.ws_url
        client = V1Client()
        async with asyncio.timeout(WAIT_S):
            conn = ClientSideConnection(client, MessageTransport(await connect_url(url)))
            try:
                init = await conn.initialize(protocol_version=1, client_info=V1_INFO)
                assert init.protocol_version == 1
                sid = (await conn.new_session(cwd="/tmp", mcp_servers=[])).session_id
                response = await conn.prompt(session_id=sid, prompt=prompt("hi"))
                assert response.stop_reason == "end_turn"
                assert client.text(sid) == "Hello over the network"
            finally:
                await conn.close()
    finally:
        server.stop()


async def test_the_python_sdks_http_client_loads_and_resumes_a_session(crow_home, scripted_model):
    """The ``acp`` package's own streamable HTTP client (0.12) sends ``session/load`` and
    ``session/resume`` without ``Acp-Session-Id`` and reads their answers on the
    connection's stream; it opens a session's stream once a message names it."""
    from acp.http import create_http_stream
    from crow_testing.serve_support import HttpServer

    write_config(crow_home, scripted_model.base_url, extra="[tools]\nbuiltin = []\n")
    scripted_model.script(Text(text="first", chunks=2), Text(text="second", chunks=2))
    server = HttpServer()
    headers = {"Authorization": f"Bearer {server.token}"}

    @contextlib.asynccontextmanager
    async def connected(client: V1Client) -> AsyncIterator[ClientSideConnection]:
        conn = acp.connect_to_agent(client, create_http_stream(server.bare_url, headers=headers))
        try:
            init = await conn.initialize(protocol_version=1, client_info=V1_INFO)
            assert init.agent_capabilities.load_session
            yield conn
        finally:
            await conn.close()

    try:
        async with asyncio.timeout(WAIT_S):
            made = V1Client()
            async with connected(made) as conn:
                sid = (await conn.new_session(cwd="/tmp", mcp_servers=[])).session_id
                response = await conn.prompt(session_id=sid, prompt=prompt("one"))
                assert response.stop_reason == "end_turn" and made.text(sid) == "first"
            loaded = V1Client()
            async with connected(loaded) as conn:
                await conn.load_session(session_id=sid, cwd="/tmp", mcp_servers=[])
                await loaded.until(lambda: loaded.text(sid) == "first")  # the replay
                assert loaded.text(sid, "user_message_chunk") == "one"
                response = await conn.prompt(session_id=sid, prompt=prompt("two"))
                assert response.stop_reason == "end_turn"
                assert loaded.text(sid) == "firstsecond"
            resumed = V1Client()
            async with connected(resumed) as conn:
                await conn.resume_session(session_id=sid, cwd="/tmp", mcp_servers=[])
                assert resumed.updates == []  # resume replays nothing
                await conn.close_session(session_id=sid)
    finally:
        server.stop()
