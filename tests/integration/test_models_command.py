"""``crow models``: the chain, each model's origin and state; ``--check`` calls it."""

from __future__ import annotations

import socket
import subprocess
import sys

from fakemodel import Error, Text
from serve_support import write_config


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
    main, vision = listed.stdout.splitlines()
    assert main.split()[:2] == ["main", "config"] and main.endswith("ready")
    assert "image, tools" in vision
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
    main, footnote = listed.stdout.splitlines()
    assert "reasoning, tools; 40960*" in main
    assert footnote == "* as the server describes the model (ollama /api/show)"
