"""Which loop ``crow.runtime.event_loop.run`` picks from ``CROW_EVENT_LOOP``."""

from __future__ import annotations

import asyncio
import logging

import pytest

from crow.runtime import event_loop


def loop_run_by(monkeypatch: pytest.MonkeyPatch, value: str | None) -> str:
    if value is None:
        monkeypatch.delenv(event_loop.EVENT_LOOP_ENV, raising=False)
    else:
        monkeypatch.setenv(event_loop.EVENT_LOOP_ENV, value)
    seen: list[str] = []

    async def main() -> None:
        seen.append(type(asyncio.get_running_loop()).__module__.split(".")[0])

    event_loop.run(main())
    return seen[0]


def test_uvloop_by_default_and_asyncio_when_asked(monkeypatch):
    assert loop_run_by(monkeypatch, None) == "uvloop"
    assert loop_run_by(monkeypatch, "uvloop") == "uvloop"
    assert loop_run_by(monkeypatch, "asyncio") == "asyncio"


def test_an_unknown_loop_is_said_and_uvloop_runs(monkeypatch, caplog):
    caplog.set_level(logging.WARNING, logger="crow.agent")
    assert loop_run_by(monkeypatch, "asynco") == "uvloop"
    assert "CROW_EVENT_LOOP='asynco' is neither uvloop nor asyncio" in caplog.text
