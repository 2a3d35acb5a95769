"""Model calls over the aiohttp transport: what each failure becomes, and what is sent."""

from __future__ import annotations

import asyncio
import base64
import socket
from pathlib import Path

import pytest
from crow_testing.fakemodel import Drop, Hang, StreamError, Text

from crow.config import Config as CrowConfig
from crow.config import ModelSpec, Paths, ProviderSpec, RetryPolicy
from crow.models.client import ModelClient
from crow.models.errors import ModelStreamBroken, ModelUnreachable
from crow.models.events import Finished, TextDelta

SPEC = ModelSpec(name="m", provider="p", model_id="id-m", capabilities=frozenset({"tools"}))


def client(base_url: str, timeout: float = 5.0) -> ModelClient:
    return ModelClient(
        CrowConfig(
            paths=Paths(home=Path("/nonexistent")),
            providers={"p": ProviderSpec(name="p", base_url=base_url, api_key="sk-test")},
            models={"m": SPEC},
            chain=("m",),
            retry=RetryPolicy(attempts=1, backoff_s=0.01, timeout_s=timeout),
        )
    )


async def events(model: ModelClient) -> list:
    try:
        async with asyncio.timeout(10):
            return [e async for e in model.stream(SPEC, [{"role": "user", "content": "hi"}])]
    finally:
        await model.aclose()


def free_port() -> int:
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        return int(free.getsockname()[1])


async def test_a_reply_streams_and_the_key_is_sent_as_bearer(scripted_model):
    scripted_model.script(Text(text="one two three", chunks=3))
    got = await events(client(scripted_model.base_url))
    assert "".join(e.text for e in got if isinstance(e, TextDelta)) == "one two three"
    assert isinstance(got[-1], Finished)
    assert scripted_model.headers[0]["authorization"] == "Bearer sk-test"


async def test_deltas_that_arrive_together_say_more_follows_but_the_last(scripted_model):
    """What one network read brings is marked, so the turn logs it in one transaction;
    deltas that arrive apart are each the last of their read."""
    scripted_model.script(
        Text(text="a b c", chunks=3, together=True), Text(text="x y", chunks=2, delay_s=0.05)
    )
    together = [
        e for e in await events(client(scripted_model.base_url)) if isinstance(e, TextDelta)
    ]
    assert "".join(e.text for e in together) == "a b c"
    assert [e.more for e in together] == [True, True, False]
    apart = [e for e in await events(client(scripted_model.base_url)) if isinstance(e, TextDelta)]
    assert [e.more for e in apart] == [False, False]


async def test_an_error_event_after_deltas_in_the_same_read_breaks_the_stream(scripted_model):
    scripted_model.script(StreamError(text="half done", chunks=2, message="out of memory"))
    model, got = client(scripted_model.base_url), []
    with pytest.raises(ModelStreamBroken, match=r"out of memory.*after part of the reply"):
        try:
            async for event in model.stream(SPEC, [{"role": "user", "content": "hi"}]):
                got.append(event)
        finally:
            await model.aclose()
    assert "".join(e.text for e in got if isinstance(e, TextDelta)) == "half done"


async def test_connections_are_kept_alive_between_calls(scripted_model):
    scripted_model.script(Text(text="a"), Text(text="b"))
    model = client(scripted_model.base_url)
    for _ in range(2):
        async for _event in model.stream(SPEC, [{"role": "user", "content": "hi"}]):
            pass
    await model.aclose()
    first, second = scripted_model.ports
    assert first == second


async def test_a_refused_connection_is_unreachable_not_a_timeout():
    with pytest.raises(ModelUnreachable) as info:
        await events(client(f"http://127.0.0.1:{free_port()}/v1"))
    assert "cannot reach the model server" in info.value.message
    assert "timed out" not in info.value.message


async def test_a_server_that_stops_sending_times_out(scripted_model):
    scripted_model.script(Hang())
    with pytest.raises(ModelUnreachable) as info:
        await events(client(scripted_model.base_url, timeout=0.5))
    assert "timed out" in info.value.message
    scripted_model.wait_for_disconnects(1)


async def test_a_dropped_stream_after_output_is_broken(scripted_model):
    scripted_model.script(Drop(after_chunks=2))
    with pytest.raises(ModelStreamBroken):
        await events(client(scripted_model.base_url))


async def test_credentials_in_the_base_url_go_as_basic_auth(scripted_model):
    scripted_model.script(Text(text="ok"))
    url = scripted_model.base_url.replace("http://", "http://user:pa%20ss@", 1)
    got = await events(client(url))
    assert isinstance(got[-1], Finished)
    expected = base64.b64encode(b"user:pa ss").decode()
    assert scripted_model.headers[0]["authorization"] == f"Basic {expected}"


async def test_leaving_a_stream_early_closes_its_connection(scripted_model):
    scripted_model.script(Text(text="x" * 50, chunks=50, delay_s=0.05))
    model = client(scripted_model.base_url)
    async for event in model.stream(SPEC, [{"role": "user", "content": "hi"}]):
        if isinstance(event, TextDelta):
            break
    await model.aclose()
    scripted_model.wait_for_disconnects(1)


@pytest.mark.parametrize(
    ("environment", "url", "proxy"),
    [
        ({}, "http://models.example:8000/v1", None),
        ({"HTTP_PROXY": "http://proxy:3128"}, "http://models.example:8000/v1", "http://proxy:3128"),
        ({"HTTPS_PROXY": "http://proxy:3128"}, "http://models.example:8000/v1", None),
        ({"HTTPS_PROXY": "http://proxy:3128"}, "https://api.example/v1", "http://proxy:3128"),
        (
            {"HTTP_PROXY": "http://proxy:3128", "NO_PROXY": "models.example"},
            "http://models.example:8000/v1",
            None,
        ),
    ],
)
def test_the_proxy_is_found_once_as_the_environment_says(monkeypatch, environment, url, proxy):
    from crow.models.transport import proxy_for

    for name in ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    assert proxy_for(url) == proxy


async def test_model_calls_go_through_the_proxy_the_environment_names(scripted_model, monkeypatch):
    """The scripted model stands in for the proxy: the request arrives there, asking
    for the model server's absolute URL (which the scripted model has no route for)."""
    from crow.models.errors import ModelRejected

    monkeypatch.setenv("HTTP_PROXY", scripted_model.base_url.removesuffix("/v1"))
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    with pytest.raises(ModelRejected, match=r"no route for http://models\.invalid:9/v1/chat"):
        await events(client("http://models.invalid:9/v1"))


async def test_an_error_answer_is_told_on_one_short_line(scripted_model):
    from crow_testing.fakemodel import Error

    from crow.models.errors import ModelOverloaded
    from crow.models.transport import ERROR_TEXT_CHARS

    scripted_model.script(Error(status=503, message="Service\n\n  unavailable: " + "x" * 5000))
    with pytest.raises(ModelOverloaded) as failure:
        await events(client(scripted_model.base_url))
    message = failure.value.message
    assert "503 Service unavailable: xxx" in message and "\n" not in message
    assert len(message) < ERROR_TEXT_CHARS + 50 and message.endswith("…")
