"""Chains in a real terminal: Ctrl-C is SIGINT to the whole foreground group.

The components run in sessions of their own, so the Ctrl-C reaches only the
conductor (or the client in front of it), never a proxy or the agent directly:
``crow run`` through a chain cancels the turn hop by hop, and a conductor at a
terminal leaves at once and takes its components with it.
"""

from __future__ import annotations

import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import pexpect
from crow_testing.fakemodel import Hang
from crow_testing.serve_support import Terminals, write_config
from crow_testing.support import ROOT
from test_conductor import _alive, _descendants

TIMEOUT = 20
PASS = shlex.join([sys.executable, str(ROOT / "examples" / "arrow_proxy.py"), "--prefix", ""])
SERVE = shlex.join([sys.executable, "-m", "crow", "serve"])
ECHO = shlex.join([sys.executable, str(ROOT / "examples" / "echo_agent.py")])


def test_ctrl_c_in_crow_run_cancels_the_turn_through_the_chain(
    crow_home: Path, scripted_model: Any, tmp_path: Path
) -> None:
    # A model call waits 60 s (the tests' 5 s could end the hang before the Ctrl-C on
    # a loaded machine: a retry, then "no scripted reply").
    extra = "[tools]\nbuiltin = []\n"
    write_config(crow_home, scripted_model.base_url, extra=extra, timeout_s=60.0)
    env = dict(os.environ, TERM="dumb", NO_COLOR="1", CROW_HOME=str(crow_home))
    terminals = Terminals(env, tmp_path, TIMEOUT)
    scripted_model.script(Hang())
    chain = shlex.join([sys.executable, "-m", "crow", "conductor", "agent", PASS, SERVE])
    try:
        child = terminals.start("run", "--command", chain, "wait for me")
        scripted_model.wait_for_requests(1, timeout=TIMEOUT)
        child.expect(r"(working|waiting for the model)…")  # the status line: the turn runs
        child.sendintr()
        child.expect("cancelling")
        child.expect(pexpect.EOF)
        child.close()
        assert child.exitstatus == 5, child.before  # the agent answered "cancelled"
    finally:
        terminals.close()


def test_ctrl_c_at_a_conductor_ends_it_and_its_components(crow_home: Path, tmp_path: Path) -> None:
    env = dict(os.environ, TERM="dumb", NO_COLOR="1", CROW_HOME=str(crow_home))
    terminals = Terminals(env, tmp_path, TIMEOUT)
    try:
        child = terminals.start("conductor", "agent", PASS, ECHO)
        child.sendline(
            json_line(
                {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "initialize",
                    "params": {"protocolVersion": 2, "info": {"name": "t", "version": "1"}},
                }
            )
        )
        child.expect('"result"')  # the answer, not the terminal's echo of the line
        components = _descendants(child.pid)
        assert len(components) >= 2
        child.sendintr()
        child.expect(pexpect.EOF)
        child.close()
        assert child.exitstatus == 130, child.before
        assert "Traceback" not in (child.before or "")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(_alive(pid) for pid in components):
            time.sleep(0.05)
        assert not [pid for pid in components if _alive(pid)]
    finally:
        terminals.close()


def json_line(message: dict[str, Any]) -> str:
    import json

    return json.dumps(message, separators=(",", ":"))
