"""The scripted chat-completions server, driven by the real openai SDK client."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest
from crow_testing import fakemodel
from crow_testing.fakemodel import Drop, Error, Hang, ScriptedModel, Slow, Text, ToolCalls

# The fixture, under its own name; importing it by name makes ruff report F811 on every test
# that takes it as a parameter (a conftest re-export avoids that).
scripted_model = fakemodel.scripted_model

LIMIT_S = 10.0
USER = [{"role": "user", "content": "hi"}]


@pytest.fixture
async def client(scripted_model: ScriptedModel) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(
        base_url=scripted_model.base_url, api_key="x", max_retries=0
    ) as client:
        yield client


async def stream_chunks(client: openai.AsyncOpenAI, **kwargs: Any) -> list[Any]:
    stream = await client.chat.completions.create(
        model="test-model", messages=USER, stream=True, **kwargs
    )
    return [chunk async for chunk in stream]


def contents(chunks: list[Any]) -> list[str]:
    return [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]


async def test_streamed_text_in_chunks_with_usage(
    scripted_model: ScriptedModel, client: openai.AsyncOpenAI
) -> None:
    scripted_model.script(Text(text="hello world", chunks=3, usage=(7, 3)))
    async with asyncio.timeout(LIMIT_S):
        chunks = await stream_chunks(client, stream_options={"include_usage": True})
    assert chunks[0].choices[0].delta.role == "assistant"
    assert contents(chunks) == ["hell", "o w", "orld"]
    assert all(c.object == "chat.completion.chunk" and c.model == "test-model" for c in chunks)
    finish = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finish[-1] == "stop" and set(finish[:-1]) == {None}
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    assert (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens) == (7, 3)
    assert chunks[-1].usage.total_tokens == 10


async def test_usage_chunk_only_when_asked_for(
    scripted_model: ScriptedModel, client: openai.AsyncOpenAI
) -> None:
    scripted_model.script(Text(text="hi", model="other-model"), Text(usage=None))
    async with asyncio.timeout(LIMIT_S):
        plain = await stream_chunks(client)
        no_usage = await stream_chunks(client, stream_options={"include_usage": True})
    assert plain[-1].choices[0].finish_reason == "stop"
    assert all(c.usage is None and c.model == "other-model" for c in plain)
    assert no_usage[-1].choices[0].finish_reason == "stop"
    assert all(c.usage is None for c in no_usage)


async def test_reasoning_streams_before_content(
    scripted_model: ScriptedModel, client: openai.AsyncOpenAI
) -> None:
    scripted_model.script(Text(text="answer", reasoning="think hard", chunks=2))
    async with asyncio.timeout(LIMIT_S):
        chunks = await stream_chunks(client)
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    # An extra field: an attribute through pydantic's extra="allow", and in model_extra.
    reasoning = [getattr(d, "reasoning_content", None) for d in deltas]
    assert [r for r in reasoning if r] == ["think", " hard"]
    assert [d.model_extra.get("reasoning_content") for d in deltas[1:3]] == ["think", " hard"]
    assert contents(chunks) == ["ans", "wer"]
    first_content = next(i for i, d in enumerate(deltas) if d.content)
    assert all(r is None for r in reasoning[first_content:])


async def test_non_streamed_text(scripted_model: ScriptedModel, client: openai.AsyncOpenAI) -> None:
    scripted_model.script(
        Text(text="whole answer", reasoning="because", finish_reason="length", usage=(3, 4))
    )
    async with asyncio.timeout(LIMIT_S):
        completion = await client.chat.completions.create(model="test-model", messages=USER)
    assert completion.object == "chat.completion"
    assert completion.model == "test-model"
    choice = completion.choices[0]
    assert choice.message.role == "assistant"
    assert choice.message.content == "whole answer"
    assert getattr(choice.message, "reasoning_content", None) == "because"
    assert choice.finish_reason == "length"
    assert completion.usage is not None and completion.usage.total_tokens == 7


async def test_streamed_tool_calls_accumulate(
    scripted_model: ScriptedModel, client: openai.AsyncOpenAI
) -> None:
    calls = [("read_file", {"path": "src/a.py", "limit": 20}), ("noop", {})]
    scripted_model.script(ToolCalls(calls=calls, text="Let me look."))
    async with asyncio.timeout(LIMIT_S):
        chunks = await stream_chunks(client)
    acc: dict[int, dict[str, Any]] = {}
    arg_deltas: dict[int, int] = {}
    for chunk in chunks:
        for tc in chunk.choices[0].delta.tool_calls or []:
            slot = acc.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
            slot["id"] = tc.id or slot["id"]
            if tc.function is not None:
                slot["name"] += tc.function.name or ""
                slot["arguments"] += tc.function.arguments or ""
                arg_deltas[tc.index] = arg_deltas.get(tc.index, 0) + 1
    assert contents(chunks) == ["Let me look."]
    assert [(acc[i]["name"], json.loads(acc[i]["arguments"])) for i in sorted(acc)] == calls
    assert [acc[i]["id"] for i in sorted(acc)] == ["call_1", "call_2"]
    assert all(n >= 2 for n in arg_deltas.values())
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


async def test_non_streamed_tool_calls(
    scripted_model: ScriptedModel, client: openai.AsyncOpenAI
) -> None:
    scripted_model.script(ToolCalls(calls=[("grep", {"pattern": "x"})]))
    async with asyncio.timeout(LIMIT_S):
        completion = await client.chat.completions.create(model="test-model", messages=USER)
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    [call] = choice.message.tool_calls or []
    assert call.id == "call_1" and call.type == "function"
    assert call.function.name == "grep"
    assert json.loads(call.function.arguments) == {"pattern": "x"}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    ("status", "exc_type"),
    [
        (400, openai.BadRequestError),
        (401, openai.AuthenticationError),
        (404, openai.NotFoundError),
        (429, openai.RateLimitError),
        (500, openai.InternalServerError),
        (503, openai.InternalServerError),
    ],
)
async def test_errors_surface_as_status_exceptions(
    scripted_model: ScriptedModel,
    client: openai.AsyncOpenAI,
    status: int,
    exc_type: type[openai.APIStatusError],
    stream: bool,
) -> None:
    scripted_model.script(
        Error(status=status, message="nope", code="some_code", type="some_type", retry_after=1.5)
    )
    async with asyncio.timeout(LIMIT_S):
        with pytest.raises(exc_type) as caught:
            await client.chat.completions.create(model="m", messages=USER, stream=stream)
    err = caught.value
    assert err.status_code == status
    assert err.body == {"message": "nope", "type": "some_type", "code": "some_code"}
    assert err.code == "some_code" and err.type == "some_type"
    assert err.response.headers["retry-after"] == "1.5"


async def test_error_without_retry_after(
    scripted_model: ScriptedModel, client: openai.AsyncOpenAI
) -> None:
    scripted_model.script(Error())
    async with asyncio.timeout(LIMIT_S):
        with pytest.raises(openai.InternalServerError) as caught:
            await client.chat.completions.create(model="m", messages=USER)
    assert "retry-after" not in caught.value.response.headers
    assert caught.value.body == {
        "message": "scripted failure",
        "type": "server_error",
        "code": None,
    }


async def test_hang_then_cancel_counts_a_disconnect(
    scripted_model: ScriptedModel, client: openai.AsyncOpenAI
) -> None:
    scripted_model.script(Hang())
    async with asyncio.timeout(LIMIT_S):
        stream = await client.chat.completions.create(model="m", messages=USER, stream=True)
        first = asyncio.Event()

        async def consume() -> None:
            first.set()
            async for _ in stream:
                pass

        task = asyncio.create_task(consume())
        await first.wait()
        await asyncio.sleep(0.2)
        assert not task.done() and scripted_model.disconnects == 0
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # Cancelling the iteration runs the SDK generator's `finally: response.aclose()`.
        assert stream.response.is_closed
        started = time.monotonic()
        await asyncio.to_thread(scripted_model.wait_for_disconnects, 1, 1.0)
    assert time.monotonic() - started < 0.5
    assert scripted_model.disconnects == 1


async def test_hang_then_close_counts_a_disconnect(
    scripted_model: ScriptedModel, client: openai.AsyncOpenAI
) -> None:
    scripted_model.script(Hang())
    async with asyncio.timeout(LIMIT_S):
        stream = await client.chat.completions.create(model="m", messages=USER, stream=True)
        await stream.close()
        await asyncio.to_thread(scripted_model.wait_for_disconnects, 1, 1.0)
    assert scripted_model.disconnects == 1


async def test_hang_with_client_timeout(
    scripted_model: ScriptedModel, client: openai.AsyncOpenAI
) -> None:
    scripted_model.script(Hang())
    async with asyncio.timeout(LIMIT_S):
        stream = await client.chat.completions.create(
            model="m", messages=USER, stream=True, timeout=0.3
        )
        with pytest.raises(openai.APITimeoutError):
            async for _ in stream:
                pass
        await asyncio.to_thread(scripted_model.wait_for_disconnects, 1, 1.0)


async def test_slow_stream_cancelled_midway_counts_a_disconnect(
    scripted_model: ScriptedModel, client: openai.AsyncOpenAI
) -> None:
    scripted_model.script(Slow(text="abcdefghij", chunks=10, delay_s=0.1))
    async with asyncio.timeout(LIMIT_S):
        stream = await client.chat.completions.create(model="m", messages=USER, stream=True)
        got = []
        async for chunk in stream:
            if chunk.choices[0].delta.content:
                got.append(chunk.choices[0].delta.content)
                if len(got) == 2:
                    break
        await stream.close()
        await asyncio.to_thread(scripted_model.wait_for_disconnects, 1, 1.0)
    assert got == ["a", "b"]


async def test_drop_raises_mid_stream(
    scripted_model: ScriptedModel, client: openai.AsyncOpenAI
) -> None:
    scripted_model.script(Drop(after_chunks=2))
    got = []
    async with asyncio.timeout(LIMIT_S):
        stream = await client.chat.completions.create(model="m", messages=USER, stream=True)
        # httpx2.RemoteProtocolError (incomplete chunked read), wrapped by the SDK.
        with pytest.raises(openai.APIConnectionError) as caught:
            async for chunk in stream:
                got.append(chunk.choices[0].delta.content)
    assert not isinstance(caught.value, openai.APITimeoutError)
    assert "".join(g for g in got if g) == "partial text here"
    assert len([g for g in got if g]) == 2
    assert scripted_model.disconnects == 0


async def test_drop_non_streamed(scripted_model: ScriptedModel, client: openai.AsyncOpenAI) -> None:
    scripted_model.script(Drop())
    async with asyncio.timeout(LIMIT_S):
        with pytest.raises(openai.APIConnectionError):
            await client.chat.completions.create(model="m", messages=USER)
        # The next request on a fresh connection works.
        scripted_model.script(Text(text="again"))
        completion = await client.chat.completions.create(model="m", messages=USER)
    assert completion.choices[0].message.content == "again"


async def test_requests_recorded_before_the_reply(
    scripted_model: ScriptedModel, client: openai.AsyncOpenAI
) -> None:
    scripted_model.script(Hang())
    async with asyncio.timeout(LIMIT_S):
        stream = await client.chat.completions.create(
            model="test-model",
            messages=USER,
            stream=True,
            stream_options={"include_usage": True},
            tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}],
        )
        # Still hanging: the request is already there.
        await asyncio.to_thread(scripted_model.wait_for_requests, 1, 1.0)
        [body] = scripted_model.requests
        assert body["model"] == "test-model"
        assert body["messages"] == USER
        assert body["stream"] is True
        assert body["stream_options"] == {"include_usage": True}
        assert body["tools"][0]["function"]["name"] == "f"
        await stream.close()


async def test_fifo_then_default_then_500(
    scripted_model: ScriptedModel, client: openai.AsyncOpenAI
) -> None:
    scripted_model.script(Text(text="one"), Text(text="two"))
    scripted_model.set_default(Text(text="default"))

    async def ask() -> str | None:
        completion = await client.chat.completions.create(model="m", messages=USER)
        return completion.choices[0].message.content

    async with asyncio.timeout(LIMIT_S):
        answers = [await ask() for _ in range(4)]
        scripted_model.set_default(None)
        with pytest.raises(openai.InternalServerError) as caught:
            await ask()
        scripted_model.script(Text(text="three"))
        answers.append(await ask())
    assert answers == ["one", "two", "default", "default", "three"]
    assert caught.value.body == {"message": "no scripted reply"}
    assert len(scripted_model.requests) == 6


async def test_models_and_unknown_paths(
    scripted_model: ScriptedModel, client: openai.AsyncOpenAI
) -> None:
    async with asyncio.timeout(LIMIT_S):
        models = await client.models.list()
        assert [m.id for m in models.data] == ["scripted"]

        def fetch(path: str) -> tuple[int, Any]:
            try:
                with urllib.request.urlopen(scripted_model.base_url + path, timeout=5) as resp:
                    return resp.status, json.load(resp)
            except urllib.error.HTTPError as err:
                with err:
                    return err.code, json.load(err)

        status, body = await asyncio.to_thread(fetch, "/nowhere")
    assert status == 404 and "error" in body
    assert scripted_model.requests == []


async def test_concurrent_requests(
    scripted_model: ScriptedModel, client: openai.AsyncOpenAI
) -> None:
    scripted_model.set_default(Slow(text="abcd", chunks=4, delay_s=0.1))
    started = time.monotonic()
    async with asyncio.timeout(LIMIT_S):
        results = await asyncio.gather(*(stream_chunks(client) for _ in range(6)))
    elapsed = time.monotonic() - started
    assert all("".join(contents(chunks)) == "abcd" for chunks in results)
    assert elapsed < 6 * 0.3  # overlapping, not one after another
    assert len(scripted_model.requests) == 6


async def test_keep_alive_connection_is_reused(
    scripted_model: ScriptedModel, client: openai.AsyncOpenAI
) -> None:
    scripted_model.set_default(Text(text="x", chunks=1))
    async with asyncio.timeout(LIMIT_S):
        for _ in range(3):
            await stream_chunks(client)
            await client.chat.completions.create(model="m", messages=USER)
    assert len(scripted_model.requests) == 6
    assert scripted_model.disconnects == 0


async def test_stop_is_prompt_with_hanging_requests() -> None:
    model = ScriptedModel().start()
    model.set_default(Hang())
    async with (
        asyncio.timeout(LIMIT_S),
        openai.AsyncOpenAI(base_url=model.base_url, api_key="x", max_retries=0) as client,
    ):
        streams = [
            await client.chat.completions.create(model="m", messages=USER, stream=True)
            for _ in range(3)
        ]
        started = time.monotonic()
        await asyncio.to_thread(model.stop)
        assert time.monotonic() - started < 1.0
        for stream in streams:
            with pytest.raises(openai.APIConnectionError):
                async for _ in stream:
                    pass
    assert model.disconnects == 0  # the server went away, not the client
    model.stop()  # idempotent


def test_wait_for_requests_times_out() -> None:
    with ScriptedModel() as model:
        assert model.base_url.startswith("http://127.0.0.1:")
        assert model.base_url.endswith("/v1")
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            model.wait_for_requests(1, timeout=0.2)
        with pytest.raises(TimeoutError):
            model.wait_for_disconnects(1, timeout=0.2)
        assert time.monotonic() - started < 1.0


def test_stop_without_start() -> None:
    model = ScriptedModel()
    model.stop()


async def test_server_is_quiet(
    capfd: pytest.CaptureFixture[str], scripted_model: ScriptedModel, client: openai.AsyncOpenAI
) -> None:
    scripted_model.script(Drop(), Slow(chunks=20, delay_s=0.02), Error(status=400), Text())
    async with asyncio.timeout(LIMIT_S):
        stream = await client.chat.completions.create(model="m", messages=USER, stream=True)
        with pytest.raises(openai.APIConnectionError):
            async for _ in stream:
                pass
        stream = await client.chat.completions.create(model="m", messages=USER, stream=True)
        await stream.__anext__()
        await stream.close()
        await asyncio.to_thread(scripted_model.wait_for_disconnects, 1, 1.0)
        with pytest.raises(openai.BadRequestError):
            await client.chat.completions.create(model="m", messages=USER)
        await client.chat.completions.create(model="m", messages=USER)
    out, err = capfd.readouterr()
    assert out == "" and err == ""
    assert scripted_model.errors == []
