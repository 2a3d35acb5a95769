"""The runnable quickstart pair: one_shot_client.py driving echo_agent.py over stdio."""

from __future__ import annotations

import subprocess
import sys

import pytest
from crow_testing.support import ROOT

CLIENT = [sys.executable, str(ROOT / "examples" / "one_shot_client.py")]
AGENT = f"{sys.executable} {ROOT / 'examples' / 'echo_agent.py'}"


def run_client(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(CLIENT + list(args), capture_output=True, text=True, timeout=60)


def test_one_shot_client_prints_the_reply_and_the_stop_reason():
    result = run_client("--command", f"{AGENT} --chunks 4", "Hello from ACP v2")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "Prompt accepted; waiting for session output and completion...",
        "Echo: Hello from ACP v2",
        "Session is idle: end_turn",
    ]


@pytest.mark.parametrize(
    "command",
    [
        f"{sys.executable} -c 'import sys; sys.exit(3)'",
        "/nonexistent/agent --stdio",
    ],
)
def test_one_shot_client_reports_an_agent_that_cannot_start(command):
    result = run_client("--command", command, "hi")
    assert result.returncode == 1
    assert result.stderr.startswith("error:") and result.stderr.count("\n") == 1
    assert result.stdout == ""
