"""Capability discovery: what ollama, an OpenAI-compatible server and llama.cpp
say of a model, merged under what config.toml declared; and the router using it."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest
from crow_testing.fakemodel import Text

from crow.config import Config as CrowConfig
from crow.config import ModelSpec, Paths, ProviderSpec, RetryPolicy
from crow.models.discovery import Finding, discover, merge
from crow.models.events import Finished, Stripped
from crow.models.router import ModelRouter

#: What ``ollama show`` answers for a small vision model with tools (trimmed).
OLLAMA_SHOW = {
    "capabilities": ["completion", "vision", "tools"],
    "model_info": {"general.architecture": "gemma3", "gemma3.context_length": 131072},
    "parameters": 'stop "<end_of_turn>"\ntemperature 1',
}


def spec(*, declared: tuple[str, ...] = (), caps: tuple[str, ...] = ("tools",)) -> ModelSpec:
    return ModelSpec(
        name="m",
        provider="p",
        model_id="scripted",
        capabilities=frozenset(caps),
        declared=frozenset(declared),
    )


def config(base_url: str, model: ModelSpec) -> CrowConfig:
    return CrowConfig(
        paths=Paths(home=Path("/nonexistent")),
        providers={"p": ProviderSpec(name="p", base_url=base_url)},
        models={model.name: model},
        chain=(model.name,),
        retry=RetryPolicy(attempts=1, backoff_s=0.01, timeout_s=5),
    )


async def test_ollama_says_capabilities_and_the_models_own_context(scripted_model):
    scripted_model.show = OLLAMA_SHOW
    found = await discover(scripted_model.base_url, "gemma3:4b")
    assert found == Finding(
        source="ollama /api/show",
        capabilities={"tools": True, "image": True, "audio": False, "reasoning": False},
        context_window=131072,
    )
    assert scripted_model.asked == ["POST /api/show"]  # ollama answered: nothing more asked


async def test_ollama_num_ctx_beats_the_models_own_context(scripted_model):
    scripted_model.show = {**OLLAMA_SHOW, "parameters": "num_ctx 8192\ntemperature 1"}
    found = await discover(scripted_model.base_url, "gemma3:4b")
    assert found is not None and found.context_window == 8192


async def test_vllm_gives_the_context_in_its_model_list(scripted_model):
    scripted_model.listed = [{"id": "other"}, {"id": "scripted", "max_model_len": 16384}]
    found = await discover(scripted_model.base_url, "scripted")
    assert found == Finding(source="/v1/models", context_window=16384)
    assert scripted_model.asked == ["POST /api/show", "GET /v1/models", "GET /props"]


async def test_llama_cpp_props_say_the_running_context_and_modalities(scripted_model):
    scripted_model.listed = [{"id": "scripted", "meta": {"n_ctx_train": 131072}}]
    scripted_model.props = {
        "default_generation_settings": {"n_ctx": 4096},
        "modalities": {"vision": True, "audio": False},
    }
    found = await discover(scripted_model.base_url, "scripted")
    assert found == Finding(
        source="/v1/models, llama.cpp /props",
        capabilities={"image": True, "audio": False},
        context_window=4096,
    )


async def test_a_server_that_says_nothing_gives_an_empty_finding(scripted_model):
    scripted_model.listed = []
    assert await discover(scripted_model.base_url, "scripted") == Finding(source="")


async def test_nothing_listening_is_none_so_it_is_asked_again():
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    assert await discover(f"http://127.0.0.1:{port}/v1", "m") is None


@pytest.mark.parametrize(
    ("declared", "caps", "window"),
    [
        ((), {"tools", "image"}, 131072),  # the server's word
        (("capabilities",), {"tools", "reasoning"}, 131072),  # config's capabilities stay
        (("capabilities", "context_window"), {"tools", "reasoning"}, 32768),  # all config's
    ],
)
def test_config_toml_beats_the_server(declared, caps, window):
    configured = spec(declared=declared, caps=("tools", "reasoning"))
    found = Finding(
        source="ollama /api/show",
        capabilities={"tools": True, "image": True, "audio": False, "reasoning": False},
        context_window=131072,
    )
    merged = merge(configured, found)
    assert (merged.capabilities, merged.context_window) == (frozenset(caps), window)
    assert merged.discovered == "ollama /api/show"


async def test_the_router_strips_nothing_a_discovered_vision_model_reads(scripted_model):
    scripted_model.show = OLLAMA_SHOW
    scripted_model.script(Text(text="a cat"))
    router = ModelRouter(config(scripted_model.base_url, spec()))
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    messages = [{"role": "user", "content": [{"type": "text", "text": "what?"}, image]}]
    try:
        async with asyncio.timeout(10):
            events = [e async for e in router.stream("m", messages)]
    finally:
        await router.aclose()
    assert not [e for e in events if isinstance(e, Stripped)]
    assert isinstance(events[-1], Finished)
    assert scripted_model.requests[0]["messages"][0]["content"][1] == image
    assert router.spec("m").context_window == 131072


async def test_the_router_offers_no_tools_to_a_model_its_server_says_lacks_them(scripted_model):
    scripted_model.show = {"capabilities": ["completion"], "model_info": {}}
    scripted_model.script(Text(text="ok"), Text(text="ok"))
    router = ModelRouter(config(scripted_model.base_url, spec()))
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    try:
        for _ in range(2):
            async with asyncio.timeout(10):
                [
                    e
                    async for e in router.stream(
                        "m", [{"role": "user", "content": "hi"}], tools=tools
                    )
                ]
    finally:
        await router.aclose()
    assert all("tools" not in request for request in scripted_model.requests)
    assert scripted_model.asked.count("POST /api/show") == 1  # asked once per process
