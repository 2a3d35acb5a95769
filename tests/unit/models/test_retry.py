"""Waits between attempts: the server's Retry-After, else full jitter capped at 8 s."""

from __future__ import annotations

import asyncio
import email.utils
import time
from pathlib import Path

import pytest
from crow_testing.fakemodel import Error, Text

from crow.config import Config, ModelSpec, Paths, ProviderSpec, RetryPolicy
from crow.models import router as router_module
from crow.models.errors import retry_after_s
from crow.models.events import Retrying
from crow.models.router import MAX_BACKOFF_S, ModelRouter, retry_delay

NOW = 1_800_000_000.0


@pytest.mark.parametrize(
    ("milliseconds", "value", "expected"),
    [
        (None, "7", 7.0),
        (None, "1.5", 1.5),
        (None, "-3", 0.0),
        ("250", "7", 0.25),  # retry-after-ms first, as the openai SDK reads them
        ("nan", "2", 2.0),
        (None, email.utils.formatdate(NOW + 12, usegmt=True), 12.0),
        (None, email.utils.formatdate(NOW - 60, usegmt=True), 0.0),  # already past
        (None, "Wed, 21 Oct 2015 07:28:00 -0000", 0.0),
        (None, "soon", None),
        (None, "inf", None),
        (None, None, None),
    ],
)
def test_retry_after_is_seconds_or_an_http_date(milliseconds, value, expected):
    assert retry_after_s(milliseconds, value, now=NOW) == expected


def test_without_a_hint_the_wait_is_full_jitter_up_to_a_doubling_cap(monkeypatch):
    limits: list[tuple[float, float]] = []
    monkeypatch.setattr(
        router_module.random, "uniform", lambda low, high: limits.append((low, high)) or high
    )
    policy = RetryPolicy(attempts=9, backoff_s=0.5)
    waits = [retry_delay(policy, failures, None) for failures in range(1, 8)]
    assert waits == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0, 8.0]  # capped at MAX_BACKOFF_S
    assert all(low == 0 for low, _ in limits)  # full jitter: anywhere from nothing
    assert max(waits) == MAX_BACKOFF_S


def test_jittered_waits_differ():
    waits = {retry_delay(RetryPolicy(backoff_s=4.0), 3, None) for _ in range(50)}
    assert len(waits) > 40 and all(0 <= w <= MAX_BACKOFF_S for w in waits)


def test_the_servers_hint_wins_up_to_a_minute():
    policy = RetryPolicy(backoff_s=0.5)
    assert retry_delay(policy, 1, 30.0) == 30.0
    assert retry_delay(policy, 1, 0.0) == 0.0
    assert retry_delay(policy, 1, 3600.0) <= 0.5  # a quota reset an hour away: not waited


@pytest.mark.parametrize("header", [0.3, "HTTP-DATE"], ids=["seconds", "http-date"])
async def test_a_429_waits_what_its_retry_after_says(scripted_model, header):
    if header == "HTTP-DATE":  # whole seconds: at least one second from now
        header = email.utils.formatdate(time.time() + 2, usegmt=True)
    scripted_model.script(
        Error(status=429, message="slow down", retry_after=header), Text(text="ok")
    )
    config = Config(
        paths=Paths(home=Path("/nonexistent")),
        providers={"p": ProviderSpec(name="p", base_url=scripted_model.base_url)},
        models={"a": ModelSpec(name="a", provider="p", model_id="m")},
        chain=("a",),
        retry=RetryPolicy(attempts=2, backoff_s=0.01, timeout_s=5.0),
    )
    router = ModelRouter(config)
    try:
        async with asyncio.timeout(20):
            events = [e async for e in router.stream("a", [{"role": "user", "content": "hi"}])]
    finally:
        await router.aclose()
    [retry] = [e for e in events if isinstance(e, Retrying)]
    assert retry.asked and retry.attempt == 2
    if isinstance(header, float):
        assert retry.delay_s == header
    else:
        assert 0.5 < retry.delay_s <= 2.0
