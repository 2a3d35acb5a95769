"""The judge's commands in a real terminal: Ctrl-C is SIGINT to the whole
foreground process group.

``crow judge --command`` starts its agent in a session of its own: a Ctrl-C
leaves the judge at once (130, no traceback), and the agent goes with it.
``crow run --verify`` waiting for a verdict leaves on the first Ctrl-C: there is
no turn to cancel while the judge thinks.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pexpect
import pytest
from crow_testing.fakemodel import Hang, Text
from crow_testing.serve_support import Terminals, write_config

TIMEOUT = 20


@pytest.fixture
def terminals(crow_home: Path, scripted_model: Any, tmp_path: Path) -> Iterator[Terminals]:
    env = dict(os.environ, TERM="dumb", NO_COLOR="1", CROW_HOME=str(crow_home))
    write_config(crow_home, scripted_model.base_url, extra="[tools]\nbuiltin = []\n")
    opened = Terminals(env, tmp_path, TIMEOUT)
    yield opened
    opened.close()


def children_of(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue
        if f"\nPPid:\t{pid}\n" in status:
            found.append(int(entry.name))
    return found


def gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True
    return "\nState:\tZ" in state


def test_ctrl_c_leaves_crow_judge_and_its_agent(terminals, scripted_model, crow_home):
    scripted_model.script(Text(text="hi"))
    made = subprocess.run(
        [sys.executable, "-m", "crow", "run", "--json", "hi"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "CROW_HOME": str(crow_home)},
    )
    assert made.returncode == 0, made.stderr
    session_id = next(
        line.split('"sessionId": "')[1].split('"')[0] for line in made.stdout.splitlines()
    )
    agent = f"{sys.executable} -m crow serve"
    child = terminals.start("judge", "--command", agent, "--session", session_id)
    child.expect("watching session")
    [spawned] = children_of(child.pid)
    child.sendintr()
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 130, child.before
    assert "Traceback" not in (child.before or "")
    deadline = time.monotonic() + 10
    while not gone(spawned) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert gone(spawned), "the agent crow judge started outlived it"


def test_ctrl_c_while_the_judge_thinks_leaves_crow_run_verify(terminals, scripted_model):
    scripted_model.script(Text(text="I did it"), Hang())
    child = terminals.start("run", "--verify", "do it")
    scripted_model.wait_for_requests(2, timeout=TIMEOUT)  # the judge model was asked
    child.expect("the judge is checking the turn")
    child.sendintr()
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 130, child.before
    assert "Traceback" not in (child.before or "")
