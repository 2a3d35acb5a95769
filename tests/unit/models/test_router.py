"""Retry, fallback and stripping against the scripted model, in process."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest
from crow_testing.fakemodel import Drop, Error, Hang, Text

from crow.config import Config as CrowConfig
from crow.config import ModelSpec, Paths, ProviderSpec, RetryPolicy
from crow.models.errors import (
    ContextLengthExceeded,
    ModelOverloaded,
    ModelRejected,
    ModelStreamBroken,
    ModelUnreachable,
)
from crow.models.events import FallingBack, Finished, Stripped, Substituted, TextDelta
from crow.models.router import ModelRouter


def config(base_url: str, *models: ModelSpec, attempts: int = 2, timeout: float = 5.0):
    return CrowConfig(
        paths=Paths(home=Path("/nonexistent")),
        providers={"p": ProviderSpec(name="p", base_url=base_url)},
        models={m.name: m for m in models},
        chain=tuple(m.name for m in models),
        retry=RetryPolicy(attempts=attempts, backoff_s=0.01, timeout_s=timeout),
    )


def spec(name: str, *caps: str) -> ModelSpec:
    return ModelSpec(
        name=name, provider="p", model_id=f"id-{name}", capabilities=frozenset(caps or ("tools",))
    )


async def collect(router: ModelRouter, messages=None) -> list:
    messages = messages or [{"role": "user", "content": "hi"}]
    try:
        async with asyncio.timeout(10):
            return [e async for e in router.stream(router.config.chain[0], messages)]
    finally:
        await router.aclose()


async def test_text_and_usage(scripted_model):
    scripted_model.script(Text(text="hello world", chunks=2, usage=(7, 3)))
    events = await collect(ModelRouter(config(scripted_model.base_url, spec("a"))))
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "hello world"
    finished = events[-1]
    assert isinstance(finished, Finished) and finished.model == "a"
    assert (finished.usage.prompt_tokens, finished.usage.completion_tokens) == (7, 3)
    assert scripted_model.requests[0]["model"] == "id-a"


@pytest.mark.parametrize(
    "failure",
    [
        Error(status=500),
        Error(status=429),
        Error(status=503),
        Error(status=400, message="Download multimodal file timed out"),
    ],
)
async def test_transient_failures_are_retried(scripted_model, failure):
    scripted_model.script(failure, Text(text="ok"))
    events = await collect(ModelRouter(config(scripted_model.base_url, spec("a"))))
    assert isinstance(events[-1], Finished) and len(scripted_model.requests) == 2


async def test_a_hanging_model_times_out_and_counts_as_transient(scripted_model):
    scripted_model.script(Hang(), Text(text="ok"))
    router = ModelRouter(config(scripted_model.base_url, spec("a"), timeout=0.5))
    events = await collect(router)
    assert isinstance(events[-1], Finished)
    scripted_model.wait_for_disconnects(1)


async def test_fallback_after_the_attempts_run_out(scripted_model):
    scripted_model.script(Error(status=500), Error(status=500), Text(text="backup"))
    router = ModelRouter(config(scripted_model.base_url, spec("a"), spec("b")))
    events = await collect(router)
    assert any(isinstance(e, FallingBack) and e.to_model == "b" for e in events)
    assert events[-1].model == "b"


async def test_a_rejection_falls_back_without_retrying(scripted_model):
    scripted_model.script(Error(status=401, message="bad key", type="auth"), Text(text="b"))
    router = ModelRouter(config(scripted_model.base_url, spec("a"), spec("b")))
    events = await collect(router)
    assert events[-1].model == "b" and len(scripted_model.requests) == 2


async def test_the_last_error_names_every_model(scripted_model):
    scripted_model.set_default(Error(status=404, message="no such model"))
    router = ModelRouter(config(scripted_model.base_url, spec("a"), spec("b")))
    with pytest.raises(ModelRejected) as info:
        await collect(router)
    assert "a:" in info.value.message and "b:" in info.value.message


async def test_context_length_is_raised_for_compaction(scripted_model):
    scripted_model.script(Error(status=400, message="maximum context length is 8192 tokens"))
    router = ModelRouter(config(scripted_model.base_url, spec("a"), spec("b")))
    with pytest.raises(ContextLengthExceeded):
        await collect(router)
    assert len(scripted_model.requests) == 1


async def test_a_drop_after_output_is_not_retried(scripted_model):
    scripted_model.script(Drop(after_chunks=2), Text(text="never"))
    with pytest.raises(ModelStreamBroken):
        await collect(ModelRouter(config(scripted_model.base_url, spec("a"))))
    assert len(scripted_model.requests) == 1


async def test_unreachable_server():
    router = ModelRouter(config("http://127.0.0.1:9/v1", spec("a"), attempts=1))
    with pytest.raises(ModelUnreachable):
        await collect(router)


async def test_images_are_stripped_for_a_model_without_them(scripted_model):
    scripted_model.script(Error(status=500), Text(text="text only"))
    router = ModelRouter(config(scripted_model.base_url, spec("v", "image"), spec("t"), attempts=1))
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    events = await collect(router, [{"role": "user", "content": [image]}])
    assert any(isinstance(e, Stripped) and e.modalities == ("image",) for e in events)
    first, second = scripted_model.requests
    assert first["messages"][0]["content"][0]["type"] == "image_url"
    assert second["messages"][0]["content"][0]["type"] == "text"


async def test_overloaded_is_transient_and_rejected_is_not():
    assert ModelOverloaded("x").transient and not ModelRejected("x").transient


def guessing_config(next_url: str | None, attempts: int = 3) -> CrowConfig:
    """Zero config's shape: a guessed ollama that is not there, maybe a next model."""
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        nothing = f"http://127.0.0.1:{free.getsockname()[1]}/v1"
    providers = {"default": ProviderSpec(name="default", base_url=nothing, guessed=True)}
    models = {"qwen3:8b": ModelSpec(name="qwen3:8b", provider="default", model_id="qwen3:8b")}
    if next_url:
        providers["next"] = ProviderSpec(name="next", base_url=next_url)
        models["next"] = ModelSpec(name="next", provider="next", model_id="n")
    return CrowConfig(
        paths=Paths(home=Path("/nonexistent")),
        providers=providers,
        models=models,
        chain=tuple(models),
        retry=RetryPolicy(attempts=attempts, backoff_s=5.0, timeout_s=5.0),
    )


async def test_a_guessed_server_that_is_not_there_is_passed_at_once(scripted_model):
    scripted_model.script(Text(text="from the next model"))
    router = ModelRouter(guessing_config(scripted_model.base_url))
    started = asyncio.get_running_loop().time()
    events = await collect(router)
    assert asyncio.get_running_loop().time() - started < 2.5  # no 5 s backoff: no retry
    [moved] = [e for e in events if isinstance(e, FallingBack)]
    assert moved.guessed and moved.reason.startswith("no model server at http://127.0.0.1:")
    assert events[-1].model == "next"


async def test_nothing_found_names_the_three_ways_to_a_model():
    with pytest.raises(ModelUnreachable) as info:
        await collect(ModelRouter(guessing_config(None)))
    said = info.value.message
    assert "ollama pull qwen3:8b" in said and "OPENAI_BASE_URL" in said
    assert "crow-cli[local]" in said


def guessed_at(url: str) -> CrowConfig:
    """Zero config's guessed ollama, but at the scripted server."""
    return CrowConfig(
        paths=Paths(home=Path("/nonexistent")),
        providers={"default": ProviderSpec(name="default", base_url=url, guessed=True)},
        models={"qwen3:8b": ModelSpec(name="qwen3:8b", provider="default", model_id="qwen3:8b")},
        chain=("qwen3:8b",),
        retry=RetryPolicy(attempts=1, backoff_s=0.01, timeout_s=5.0),
    )


async def test_a_guessed_ollama_without_the_default_model_uses_one_it_has(scripted_model):
    scripted_model.tags = ["llama3.2:latest", "phi4:latest"]
    scripted_model.script(Text(text="hi from llama"))
    events = await collect(ModelRouter(guessed_at(scripted_model.base_url)))
    [swapped] = [e for e in events if isinstance(e, Substituted)]
    assert (swapped.model, swapped.model_id) == ("qwen3:8b", "llama3.2:latest")
    assert scripted_model.requests[0]["model"] == "llama3.2:latest"


@pytest.mark.parametrize("tags", [["qwen3:8b", "phi4:latest"], [], None])
async def test_a_guessed_ollama_with_the_default_or_telling_nothing_is_asked_for_it(
    scripted_model, tags
):
    scripted_model.tags = tags  # None: /api/tags is 404, a server that is not ollama
    scripted_model.script(Text(text="ok"))
    events = await collect(ModelRouter(guessed_at(scripted_model.base_url)))
    assert not [e for e in events if isinstance(e, Substituted)]
    assert scripted_model.requests[0]["model"] == "qwen3:8b"
