"""``crow init`` writes a config for what this machine has, and it works at once."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest
from crow_testing.fakemodel import Text

from crow.config import Paths, load_config
from crow.extras import embedded_available

needs_local = pytest.mark.skipif(
    not embedded_available() and os.environ.get("CROW_REQUIRE_LOCAL") != "1",
    reason="the local extra is not installed (pip install -e '.[local]')",
)


def crow(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "crow", *args],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        env=env,
    )


@pytest.fixture
def clean_env(monkeypatch):
    for var in ("OPENAI_BASE_URL", "CROW_MODEL", "OPENAI_API_KEY", "OLLAMA_HOST"):
        monkeypatch.delenv(var, raising=False)


def nothing_listening(monkeypatch) -> str:
    """OLLAMA_HOST at a port where nothing listens: "nothing running" for sure."""
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        host = f"127.0.0.1:{free.getsockname()[1]}"
    monkeypatch.setenv("OLLAMA_HOST", host)
    return host


@needs_local
def test_init_with_nothing_running_then_run_answers_on_the_embedded_model(
    crow_home, clean_env, monkeypatch
):
    nothing_listening(monkeypatch)
    written = crow("init")
    assert written.returncode == 0, written.stderr
    assert str(crow_home / "config.toml") in written.stdout
    assert load_config(Paths(home=crow_home)).chain == ("smollm2-135m",)
    answered = crow("run", "What is the capital of France? Answer in one word.")
    assert answered.returncode == 0, answered.stderr
    assert answered.stdout.strip()
    assert "cannot reach" not in answered.stderr


def test_init_names_the_models_of_an_ollama_server_and_run_uses_them(
    crow_home, clean_env, monkeypatch, scripted_model
):
    monkeypatch.setenv("OLLAMA_HOST", scripted_model.base_url.removesuffix("/v1"))
    scripted_model.tags = ["gemma3:270m", "qwen3:8b"]
    written = crow("init")
    assert written.returncode == 0, written.stderr
    text = (crow_home / "config.toml").read_text()
    assert '[models."gemma3:270m"]' in text and '[models."qwen3:8b"]' in text
    config = load_config(Paths(home=crow_home))
    assert config.chain[0] == "gemma3:270m"
    assert config.providers["ollama"].base_url == scripted_model.base_url
    assert written.stderr.splitlines()[-1] == (
        f"crow: the models, in the order they are tried: {', '.join(config.chain)} "
        "(crow models --check asks each)"
    )
    if embedded_available():
        assert config.chain[-1] == "smollm2-135m"  # the last fallback
    scripted_model.script(Text(text="from ollama"))
    answered = crow("run", "hi")
    assert answered.returncode == 0, answered.stderr
    assert answered.stdout == "from ollama\n"
    assert scripted_model.requests[0]["model"] == "gemma3:270m"


def test_init_takes_a_model_by_name_and_says_what_ollama_lacks(
    crow_home, clean_env, monkeypatch, scripted_model
):
    monkeypatch.setenv("OLLAMA_HOST", scripted_model.base_url.removesuffix("/v1"))
    scripted_model.tags = ["gemma3:270m"]
    written = crow("init", "--model", "llama3:8b")
    assert written.returncode == 0
    assert "crow: ollama has no llama3:8b yet: ollama pull llama3:8b" in written.stderr
    config = load_config(Paths(home=crow_home))
    assert config.chain[0] == "llama3:8b" and "gemma3:270m" in config.models
    again = crow("init")
    assert again.returncode == 1 and "--force" in again.stderr


@needs_local
def test_init_and_run_take_the_embedded_model_by_name(
    crow_home, clean_env, monkeypatch, scripted_model
):
    monkeypatch.setenv("OLLAMA_HOST", scripted_model.base_url.removesuffix("/v1"))
    scripted_model.tags = ["gemma3:270m"]
    assert crow("init", "--model", "smollm2-135m").returncode == 0
    assert load_config(Paths(home=crow_home)).chain == ("smollm2-135m", "gemma3:270m")
    answered = crow("run", "--model", "smollm2-135m", "Say hello.")
    assert answered.returncode == 0, answered.stderr
    assert scripted_model.requests == []  # the embedded model answered, not ollama


@needs_local
def test_a_gguf_model_declared_by_hand_is_offered_no_tools(crow_home, clean_env, tmp_path):
    """A local model without ``capabilities`` gets no tools: asked to use them, a small
    model answers in text instead of calling them turn after turn (exit 8 before)."""
    from crow.models.local import embedded_path

    (crow_home / "config.toml").write_text(
        '[providers.mine]\nkind = "local"\n\n'
        f'[models.tiny]\nprovider = "mine"\nid = "{embedded_path()}"\n'
        "context_window = 8192\nmax_output_tokens = 48\n\n"
        '[tools]\nbuiltin = ["fs", "terminal"]\n'
    )
    (tmp_path / "notes.txt").write_text("hello\n")
    answered = subprocess.run(
        [sys.executable, "-m", "crow", "run", "--json", "List the files here with your tools."],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
    )
    assert answered.returncode in (0, 4), answered.stderr  # end_turn, or its 48 tokens
    kinds = {
        line.split('"sessionUpdate": "')[1].split('"')[0]
        for line in answered.stdout.splitlines()[:-1]
    }
    assert "tool_call" not in kinds and "agent_message_chunk" in kinds
