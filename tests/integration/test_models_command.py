"""``crow models``: the chain, each model's origin and state; ``--check`` calls it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest
from fakemodel import Error, Text
from serve_support import write_config

from crow.extras import embedded_available


def crow_models(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "crow", "models", *args], capture_output=True, text=True, timeout=60
    )


def dead_url() -> str:
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{free.getsockname()[1]}/v1"


def test_each_model_of_the_chain_is_listed_with_its_state(crow_home, scripted_model):
    models = {"main": {}, "vision": {"capabilities": ["image", "tools"]}}
    write_config(crow_home, scripted_model.base_url, models=models, fallback=["vision"])
    listed = crow_models()
    assert listed.returncode == 0, listed.stderr
    header, main, vision = listed.stdout.splitlines()
    assert header.split() == ["NAME", "FROM", "WHERE", "CAN", "CONTEXT", "STATE"]
    assert main.split()[:2] == ["main", "config"] and main.endswith("ready")
    assert "image, tools" in vision
    assert all(len(line) <= 100 for line in listed.stdout.splitlines())
    assert scripted_model.requests == []  # listing generates nothing


def test_check_makes_one_real_call_and_reports_its_time(crow_home, scripted_model):
    write_config(crow_home, scripted_model.base_url)
    scripted_model.script(Text(text="OK"))
    checked = crow_models("--check")
    assert checked.returncode == 0, checked.stderr
    assert "answered in" in checked.stdout
    assert scripted_model.requests[0]["max_tokens"] == 1


def test_check_reports_the_exact_error_and_exits_1(crow_home, scripted_model):
    write_config(crow_home, scripted_model.base_url, retry_attempts=1)
    scripted_model.script(Error(status=404, message="model 'main' not found, try pulling it first"))
    checked = crow_models("--check", "main")
    assert checked.returncode == 1
    assert "404 model 'main' not found, try pulling it first" in checked.stdout


def test_an_unreachable_server_and_a_base_url_without_v1_are_told(crow_home, scripted_model):
    write_config(crow_home, dead_url())
    assert crow_models().stdout.rstrip().endswith("unreachable (ConnectError)")
    write_config(crow_home, scripted_model.base_url.removesuffix("/v1"))
    assert "is /v1 missing from the base URL?" in crow_models().stdout


def test_checking_an_unknown_model_is_a_usage_error(crow_home, scripted_model):
    write_config(crow_home, scripted_model.base_url)
    refused = crow_models("--check", "nope")
    assert refused.returncode == 2
    assert refused.stderr == "crow: no model nope (these are: main)\n"


def test_what_the_server_says_is_listed_and_marked(crow_home, scripted_model):
    write_config(crow_home, scripted_model.base_url)
    scripted_model.show = {
        "capabilities": ["completion", "tools", "thinking"],
        "model_info": {"qwen3.context_length": 40960},
    }
    listed = crow_models()
    assert listed.returncode == 0, listed.stderr
    _, main, footnote = listed.stdout.splitlines()
    assert "reasoning, tools* " in main and " 40960* " in main
    assert footnote == "* as the server describes the model (ollama /api/show)"


def test_the_mark_is_only_on_what_the_server_said(crow_home, scripted_model):
    """config.toml declares the capabilities: only the context is the server's."""
    models = {"main": {"capabilities": ["tools"]}}
    write_config(crow_home, scripted_model.base_url, models=models)
    scripted_model.show = {
        "capabilities": ["completion", "vision"],
        "model_info": {"qwen3.context_length": 40960},
    }
    listed = crow_models()
    _, main, _ = listed.stdout.splitlines()
    assert " tools  " in main and "tools*" not in main and "40960*" in main
    [row] = [json.loads(line) for line in crow_models("--json").stdout.splitlines()]
    assert row["capabilities"] == ["tools"] and row["serverSaid"] == ["context_window"]
    assert row["contextWindow"] == 40960 and row["state"] == "ready"


def test_a_long_error_goes_below_its_model_whole_and_every_line_fits(crow_home, scripted_model):
    write_config(crow_home, scripted_model.base_url, retry_attempts=1)
    scripted_model.script(Error(status=500, message="the server is unwell " * 12))
    checked = crow_models("--check")
    assert checked.returncode == 1
    lines = checked.stdout.splitlines()
    assert all(len(line) <= 100 for line in lines), lines
    assert lines[2].startswith("    ") and "the server is unwell" in lines[2]
    assert " ".join(checked.stdout.split()).count("the server is unwell") == 12


@pytest.mark.skipif(
    not embedded_available() and os.environ.get("CROW_REQUIRE_LOCAL") != "1",
    reason="the local extra is not installed (pip install -e '.[local]')",
)
def test_zero_config_check_checks_the_embedded_model_and_passes(crow_home, monkeypatch):
    for var in ("OPENAI_BASE_URL", "CROW_MODEL", "OPENAI_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("OLLAMA_HOST", dead_url().removesuffix("/v1"))
    checked = crow_models("--check")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    guess, embedded = checked.stdout.split("\n", 1)[1].split("smollm2-135m")
    assert "a guess (nothing configured), not checked" in guess
    assert "embedded" in embedded and "answered in" in embedded
