"""``crow run`` in a real terminal: Ctrl-C is the terminal's SIGINT to the whole
foreground process group, not a signal sent to one process.

The agent ``crow run`` spawns lives in a session of its own, so the Ctrl-C reaches
only the client: the first one cancels the turn (exit 5, the agent answers
``cancelled``), and one during start-up leaves quietly (exit 130, no traceback).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pexpect
import pytest
from crow_testing.fakemodel import Error, Hang, Text
from crow_testing.serve_support import Terminals, write_config

TIMEOUT = 20


@pytest.fixture
def run(crow_home: Path, scripted_model: Any, tmp_path: Path) -> Iterator[Any]:
    env = dict(os.environ, TERM="dumb", NO_COLOR="1", CROW_HOME=str(crow_home))
    # A model call waits 60 s (the tests' 5 s could end a hang before the Ctrl-C on a
    # loaded machine: a retry, then "no scripted reply").
    extra = "[tools]\nbuiltin = []\n"
    write_config(crow_home, scripted_model.base_url, extra=extra, timeout_s=60.0)
    terminals = Terminals(env, tmp_path, TIMEOUT)
    yield lambda *args: terminals.start("run", *args)
    terminals.close()


def test_ctrl_c_at_the_terminal_cancels_the_turn_and_the_agent_says_so(run, scripted_model):
    scripted_model.script(Hang())
    child = run("wait for me")
    scripted_model.wait_for_requests(1, timeout=TIMEOUT)
    # The status line, while nothing comes: "waiting for the model" when the tool servers
    # took long enough to start to be said (and their end with them), else "working".
    child.expect(r"(working|waiting for the model)…")
    child.sendintr()  # the terminal's Ctrl-C: SIGINT to the foreground group
    child.expect("cancelling")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 5, child.before  # the agent lived to answer "cancelled"
    assert "Traceback" not in (child.before or "")


@pytest.mark.parametrize("agent", ["v1_agent.py", "v1_sdk_agent.py"])
def test_ctrl_c_cancels_the_turn_of_a_v1_agent(run, agent):
    """A v1-only agent (ACP v1's session/cancel; its prompt answers cancelled)."""
    command = f"{sys.executable} {Path(__file__).parents[1] / agent}"
    child = run("wait", "--command", command)
    for _ in range(2):  # the prompt is out, and its wait has begun (the spinner turns)
        child.expect("working…")
    child.sendintr()
    child.expect("cancelling")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 5, child.before
    assert "Traceback" not in (child.before or "")


def test_the_status_line_says_a_retry_and_is_gone_before_the_reply(
    crow_home: Path, scripted_model: Any, tmp_path: Path
) -> None:
    write_config(crow_home, scripted_model.base_url, retry_attempts=3)
    scripted_model.script(
        Error(status=503, message="loading", retry_after=1.5), Text(text="done at last")
    )
    env = dict(os.environ, TERM="dumb", NO_COLOR="1", CROW_HOME=str(crow_home))
    terminals = Terminals(env, tmp_path, TIMEOUT)
    try:
        child = terminals.start("run", "hi")
        # The wait is shown: the server's Retry-After here.
        child.expect(r"retrying main in 1\.5 s, as the server asked \(2/3\)…")
        child.expect("\x1b\\[K")  # erased, then the reply
        child.expect("done at last")
        child.expect(pexpect.EOF)
        child.close()
        assert child.exitstatus == 0, child.before
    finally:
        terminals.close()


def test_ctrl_c_during_start_up_leaves_quietly(run):
    # An agent that never answers initialize: the Ctrl-C comes while crow run starts.
    silent = f"{sys.executable} -c 'import sys; sys.stdin.read()'"
    child = run("never sent", "--command", silent)
    child.expect(pexpect.TIMEOUT, timeout=2)  # crow run is waiting for initialize
    child.sendintr()
    child.expect(pexpect.EOF)
    child.close()
    assert "Traceback" not in (child.before or ""), child.before
    assert child.exitstatus == 130


def test_crow_serve_at_a_terminal_says_what_it_is_and_leaves_on_ctrl_d(
    crow_home: Path, tmp_path: Path
) -> None:
    env = dict(os.environ, TERM="dumb", NO_COLOR="1", CROW_HOME=str(crow_home))
    terminals = Terminals(env, tmp_path, TIMEOUT)
    try:
        child = terminals.start("serve")
        child.expect("speaking ACP on stdin/stdout")
        child.expect("run crow chat")
        child.sendeof()
        child.expect(pexpect.EOF)
        child.close()
        assert child.exitstatus == 0
    finally:
        terminals.close()


def test_crow_serve_from_a_pipe_says_nothing(crow_home: Path) -> None:
    command = [sys.executable, "-m", "crow", "serve"]
    done = subprocess.run(command, input="", capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and done.stdout == "" and "crow chat" not in done.stderr


def probe_terminals(crow_home: Path, scripted_model: Any, tmp_path: Path, **env: str) -> Terminals:
    from test_serve_tools import probe_config

    write_config(crow_home, scripted_model.base_url, extra=probe_config())
    return Terminals({**os.environ, "CROW_HOME": str(crow_home), **env}, tmp_path, TIMEOUT)


def test_ctrl_c_at_a_permission_question_cancels_the_turn_and_leaves(
    crow_home, scripted_model, tmp_path
):
    from crow_testing.fakemodel import ToolCalls

    scripted_model.script(ToolCalls(calls=[("probe__touch", {"path": "a.txt"})]))
    terminals = probe_terminals(crow_home, scripted_model, tmp_path, TERM="dumb", NO_COLOR="1")
    try:
        child = terminals.start("run", "write a.txt")
        child.expect("choose 1-")
        child.sendintr()
        child.expect("cancelling")
        child.expect(pexpect.EOF)
        child.close()
        assert child.exitstatus == 5, child.before
        assert "choose 1-" not in child.before  # not asked again
        assert not (tmp_path / "a.txt").exists()
    finally:
        terminals.close()


def test_a_tool_call_is_one_line_in_place_on_a_terminal_and_three_when_piped(
    crow_home, scripted_model, tmp_path
):
    from crow_testing.fakemodel import ToolCalls

    calls = ToolCalls(calls=[("probe__echo", {"text": "x"})])
    scripted_model.script(calls, Text(text="done"), calls, Text(text="done"))
    terminals = probe_terminals(crow_home, scripted_model, tmp_path, TERM="xterm")
    terminals.env.pop("NO_COLOR", None)
    try:
        child = terminals.start("run", "look")
        child.expect(pexpect.EOF)
        child.close()
        assert child.exitstatus == 0, child.before
        shown = child.before
    finally:
        terminals.close()
    assert "\x1b[32m✓ probe: echo\x1b[0m" in shown  # coloured on a terminal
    assert "→ probe: echo" not in shown and "· probe: echo" not in shown
    piped = subprocess.run(
        [sys.executable, "-m", "crow", "run", "look"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
    )
    assert piped.returncode == 0, piped.stderr
    lines = [line for line in piped.stderr.splitlines() if "probe: echo" in line]
    assert lines == ["· probe: echo", "→ probe: echo", "✓ probe: echo"]  # plain
