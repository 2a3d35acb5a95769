"""Shared fixtures: a temp CROW_HOME (and ~/.agents) for every test, raw-bytes agents."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from crow_testing import fakemodel
from crow_testing.fakemodel import ScriptedModel
from crow_testing.support import ECHO_AGENT, RawAgent

scripted_model = fakemodel.scripted_model  # the fixture, for every test

# A suite started in the background by a shell without job control (``bash .ci/run &``)
# inherits SIGINT ignored, and so would every agent it starts: the tests that press
# Ctrl-C need it back.  (A Python handler here: exec gives the children the default.)
signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def crow_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "crow-home"
    # Made, as after a first run: the first-run note is tested where it belongs
    # (tests/integration/test_first_hour.py), not in every test's stderr.
    home.mkdir(mode=0o700)
    monkeypatch.setenv("CROW_HOME", str(home))
    # The user's own ~/.agents/AGENTS.md must not reach a test's system prompt.
    monkeypatch.setenv("CROW_AGENTS_DIR", str(tmp_path / "agents"))
    return home


@pytest.fixture
def echo_agent() -> Iterator[RawAgent]:
    agent = RawAgent(ECHO_AGENT)
    yield agent
    agent.close()


@pytest.fixture
def make_agent() -> Iterator[Any]:
    agents: list[RawAgent] = []

    def make(*args: str) -> RawAgent:
        agent = RawAgent(ECHO_AGENT + list(args))
        agents.append(agent)
        return agent

    yield make
    for agent in agents:
        agent.close()


@pytest.fixture
def crow(crow_home: Path, scripted_model: ScriptedModel) -> Iterator[Any]:
    """Start ``crow serve`` subprocesses configured for the scripted model."""
    from crow_testing.serve_support import CrowProcess, write_config

    processes: list[CrowProcess] = []

    def start(*args: str, write: bool = True, **config: Any) -> CrowProcess:
        if write:
            write_config(crow_home, scripted_model.base_url, **config)
        process = CrowProcess(*args)
        processes.append(process)
        return process

    yield start
    for process in processes:
        process.close()


# ---- PostgreSQL (the store's second backend) -------------------------------------------
# .ci/run starts a throwaway cluster and sets CROW_TEST_PG_URL (a maintenance database
# URL) and CROW_REQUIRE_PG=1, so there a missing server fails the tests, never skips them.
PG_ADMIN_URL = os.environ.get("CROW_TEST_PG_URL")


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A URL of a new, empty database, dropped after the test."""
    if not PG_ADMIN_URL:
        if os.environ.get("CROW_REQUIRE_PG") == "1":
            pytest.fail("CROW_REQUIRE_PG=1 but CROW_TEST_PG_URL is not set")
        pytest.skip("no PostgreSQL: set CROW_TEST_PG_URL (bash .ci/run starts one)")
    import uuid

    import psycopg

    name = f"crow_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    base, _, _ = PG_ADMIN_URL.rpartition("/")
    yield f"{base}/{name}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
