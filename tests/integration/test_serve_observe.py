"""Watching ``crow serve --http``: /healthz, /readyz, /metrics, JSON log lines (issue #34).

A real server on the scripted model; /metrics is read by prometheus_client's own
parser, as a Prometheus server would read it.
"""

from __future__ import annotations

import asyncio
import json
import stat
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
from crow_testing.fakemodel import Text, ToolCalls
from crow_testing.serve_support import HttpServer, client_for, write_config
from prometheus_client.parser import text_string_to_metric_families


def base(server: HttpServer) -> str:
    return server.bare_url.removesuffix("/acp")


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a scrape, by name and labels."""
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def scrape(server: HttpServer, **headers: str) -> httpx2.Response:
    return httpx2.get(f"{base(server)}/metrics", headers=headers, timeout=10)


@pytest.fixture
def server(crow_home, scripted_model) -> Iterator[HttpServer]:
    write_config(crow_home, scripted_model.base_url)
    running = HttpServer()
    yield running
    running.stop()


# ---- the probes -----------------------------------------------------------------------
def test_the_probes_answer_without_the_token_and_say_nothing_else(server):
    for path in ("/healthz", "/readyz"):
        answer = httpx2.get(f"{base(server)}{path}", timeout=10)
        assert answer.status_code == 200, (path, answer.text)
        assert answer.json() == {"status": "ok"}
        assert answer.headers["cache-control"] == "no-store"
    assert httpx2.post(f"{base(server)}/healthz", timeout=10).status_code == 405
    # /acp still asks for the token: the probes opened nothing else.
    assert httpx2.get(server.bare_url, timeout=10).status_code == 401


def test_the_probes_keep_the_host_and_origin_checks(server):
    url = f"{base(server)}/healthz"
    assert httpx2.get(url, headers={"Host": "evil.example"}, timeout=10).status_code == 403
    assert (
        httpx2.get(url, headers={"Origin": "https://evil.example"}, timeout=10).status_code == 403
    )


# ---- /metrics -------------------------------------------------------------------------
def test_metrics_need_the_token(server):
    assert scrape(server).status_code == 401
    assert scrape(server, Authorization="Bearer wrong").status_code == 401
    answer = scrape(server, Authorization=f"Bearer {server.token}")
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain; version=0.0.4")


def test_metrics_count_sessions_turns_models_tools_and_the_store(server, scripted_model, tmp_path):
    (tmp_path / "notes.txt").write_text("hello\n")
    scripted_model.script(
        ToolCalls(calls=[("fs__read", {"path": "notes.txt"})]),
        Text(text="read it"),
    )

    async def one_turn() -> dict[Any, float]:
        client = await client_for(server.ws_url)
        try:
            session = await client.new_session(str(tmp_path))
            await session.run("read notes.txt")
            # Scraped while the WebSocket is open and the session loaded.
            return samples(scrape(server, Authorization=f"Bearer {server.token}").text)
        finally:
            await client.aclose()

    seen = asyncio.run(asyncio.wait_for(one_turn(), 60))
    assert seen[("crow_prompts_total", (("stop_reason", "end_turn"),))] == 1
    assert seen[("crow_live_sessions", ())] >= 1
    assert seen[("crow_running_turns", ())] == 0
    assert seen[("crow_connections", (("transport", "websocket"),))] == 1
    assert seen[("crow_model_call_seconds_count", (("model", "main"),))] == 2
    assert seen[("crow_tool_call_seconds_count", (("server", "fs"),))] == 1
    assert ("crow_tool_errors_total", (("server", "fs"),)) not in seen
    assert seen[("crow_store_append_seconds_count", ())] > 0
    assert seen[("process_resident_memory_bytes", ())] > 10 * 1024 * 1024
    after = samples(scrape(server, Authorization=f"Bearer {server.token}").text)
    assert after[("crow_connections", (("transport", "websocket"),))] == 0


def test_model_errors_are_counted_by_model_and_kind(server, scripted_model, tmp_path):
    from crow_testing.fakemodel import Error

    scripted_model.script(Error(status=400, message="bad request"))

    async def failing_turn() -> None:
        client = await client_for(server.url)
        try:
            session = await client.new_session(str(tmp_path))
            await session.run("this fails")
        finally:
            await client.aclose()

    asyncio.run(asyncio.wait_for(failing_turn(), 60))
    seen = samples(scrape(server, Authorization=f"Bearer {server.token}").text)
    assert seen[("crow_prompts_total", (("stop_reason", "error"),))] == 1
    errors = {labels: v for (name, labels), v in seen.items() if name == "crow_model_errors_total"}
    assert sum(errors.values()) >= 1
    assert all(dict(labels)["model"] == "main" for labels in errors)


def test_metrics_public_opens_metrics_only(crow_home, scripted_model):
    write_config(crow_home, scripted_model.base_url, extra="[server]\nmetrics_public = true\n")
    running = HttpServer()
    try:
        assert scrape(running).status_code == 200
        assert httpx2.get(running.bare_url, timeout=10).status_code == 401
    finally:
        running.stop()


# ---- log lines ------------------------------------------------------------------------
def test_json_log_lines_and_a_log_file_that_rotates_and_stays_private(crow_home, scripted_model):
    from crow_testing.fakemodel import Error

    extra = '[server]\nlog_format = "json"\nlog_max_mib = 0.001\nlog_backups = 2\n'
    write_config(crow_home, scripted_model.base_url, extra=extra)
    # Each failed attempt is an INFO line: a retry, then the model's failure.
    scripted_model.script(*[Error(status=500) for _ in range(24)])
    running = HttpServer("--log-level", "INFO")
    try:
        asyncio.run(asyncio.wait_for(_failing_turns(running, 12), 60))
    finally:
        running.stop()
    logs = crow_home / "logs"
    files = sorted(p.name for p in logs.iterdir())
    assert files == ["crow.log", "crow.log.1", "crow.log.2"], files  # two backups kept
    lines = []
    for path in logs.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
        lines += path.read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert all({"time", "level", "logger", "message", "pid"} <= r.keys() for r in records)
    assert any("model main failed" in r["message"] for r in records)
    assert not any(running.token in line for line in lines)  # masked, as in text lines


async def _failing_turns(server: HttpServer, turns: int) -> None:
    client = await client_for(server.ws_url)
    try:
        session = await client.new_session("/tmp")
        for _ in range(turns):
            await session.run("this fails")
    finally:
        await client.aclose()


# ---- tracing without its extra --------------------------------------------------------
def test_tracing_without_the_otel_extra_is_refused_in_one_line(crow_home, scripted_model):
    import importlib.util
    import subprocess
    import sys

    try:
        installed = importlib.util.find_spec("opentelemetry.exporter.otlp.proto.http") is not None
    except ModuleNotFoundError:  # a parent package is missing too
        installed = False
    if installed:
        pytest.skip("the otel extra is installed: tracing would start")
    write_config(crow_home, scripted_model.base_url, extra="[server]\ntracing = true\n")
    done = subprocess.run(
        [sys.executable, "-m", "crow", "serve", "--http", "127.0.0.1:0"],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2, done.stderr
    assert "pip install 'crow-cli[otel]'" in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
