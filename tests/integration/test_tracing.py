"""OpenTelemetry spans of a turn, under the trace a client sent in ``_meta`` (issue #34).

The agent runs in this process (the spans go to the SDK's in-memory exporter)
and is reached over an in-process ACP connection; the model is the scripted
server and the tool a real built-in MCP server.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from crow_testing.fakemodel import Text, ToolCalls
from crow_testing.serve_support import write_config

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)

from crow.acp import ClientSide, schema
from crow.acp.transports.memory import memory_pair
from crow.config import load_config
from crow.observe import tracing
from crow.serve.stdio import serve_connection, start_agent

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    spans = InMemorySpanExporter()
    tracing.enable(spans)
    yield spans
    tracing.disable()


async def _turn(tmp_path, meta) -> None:
    agent = start_agent(load_config())
    ours, theirs = memory_pair()
    serving = asyncio.create_task(serve_connection(agent, theirs))
    client = ClientSide(ours, info=schema.Implementation(name="trace-test", version="1"))
    await client.__aenter__()
    try:
        await client.initialize()
        session = await client.new_session(str(tmp_path))
        await session.wait(await session.prompt("read notes.txt", meta=meta))
    finally:
        await client.aclose()
        await agent.shutdown()
        serving.cancel()
        await agent.store.aclose()


def test_a_turn_is_a_span_under_the_clients_traceparent(
    exporter, crow_home, scripted_model, tmp_path
):
    write_config(crow_home, scripted_model.base_url)
    (tmp_path / "notes.txt").write_text("hello\n")
    scripted_model.script(ToolCalls(calls=[("fs__read", {"path": "notes.txt"})]), Text(text="ok"))
    meta = {"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"}
    asyncio.run(asyncio.wait_for(_turn(tmp_path, meta), 60))

    spans = exporter.get_finished_spans()
    [turn] = [s for s in spans if s.name == "crow.turn"]
    assert format(turn.context.trace_id, "032x") == TRACE_ID
    assert turn.parent is not None and format(turn.parent.span_id, "016x") == PARENT_ID
    assert turn.attributes["crow.stop_reason"] == "end_turn"
    children = [
        s for s in spans if s.parent is not None and s.parent.span_id == turn.context.span_id
    ]
    names = [s.name for s in children]
    assert names.count("crow.model") == 2  # the tool call, then the answer
    assert names.count("crow.tool") == 1 and names.count("crow.store.append") >= 3
    [tool] = [s for s in children if s.name == "crow.tool"]
    assert tool.attributes["server"] == "fs" and tool.attributes["tool"] == "read"
    # Nothing of the turn is outside the client's trace.
    assert {format(s.context.trace_id, "032x") for s in spans if s.name.startswith("crow.")} == {
        TRACE_ID
    }


def test_without_a_traceparent_a_turn_starts_its_own_trace(
    exporter, crow_home, scripted_model, tmp_path
):
    write_config(crow_home, scripted_model.base_url, extra="[tools]\nbuiltin = []\n")
    scripted_model.script(Text(text="ok"))
    asyncio.run(asyncio.wait_for(_turn(tmp_path, None), 60))
    [turn] = [s for s in exporter.get_finished_spans() if s.name == "crow.turn"]
    assert turn.parent is None


def test_a_streaming_model_call_leaves_the_turn_current_for_its_writes(
    exporter, crow_home, scripted_model, tmp_path
):
    """The model's span covers a stream's yields without becoming the current span:
    the writes made while it streams are the turn's children, not the model call's."""
    write_config(crow_home, scripted_model.base_url, extra="[tools]\nbuiltin = []\n")
    scripted_model.script(Text(text="one two three four", chunks=4))
    asyncio.run(asyncio.wait_for(_turn(tmp_path, None), 60))
    spans = exporter.get_finished_spans()
    [turn] = [s for s in spans if s.name == "crow.turn"]
    leaves = [s for s in spans if s.name in ("crow.model", "crow.store.append")]
    assert len(leaves) >= 4
    assert all(s.parent is not None and s.parent.span_id == turn.context.span_id for s in leaves)
