"""README's "Trying it", walked in order on a fresh home, as a new user would.

Each line of the section's code block is run as written (``crow`` is this
Python's ``python -m crow``), in its order, against the scripted model server
standing in for ollama (``OLLAMA_HOST``): ``crow init`` finds it and writes its
model, and every later command uses that config.  Three things are adapted, and
only these: the port of ``crow serve --http`` is a free one; ``crow chat`` reads
its prompt from a pipe (the interactive REPL has its own tests); ``crow judge``
gets ``--once`` (judge the next prompt, then exit) and ``ID`` is the session the
line before it attached to.  A line the walk does not know fails the test: the
section and this walk change together.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from crow_testing.fakemodel import Text, ToolCalls
from crow_testing.support import ROOT

TIMEOUT = 120


def trying_it() -> list[str]:
    """The commands of README's "Trying it" block, comments dropped."""
    text = (ROOT / "README.md").read_text()
    block = text.split("## Trying it\n", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    return [line.split("  #")[0].strip() for line in block.splitlines() if line.strip()]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def passes(reason: str) -> ToolCalls:
    return ToolCalls(calls=[("verdict", {"pass": True, "reasons": [reason]})])


class Walk:
    """Runs README lines with this test's environment, in a project folder."""

    def __init__(self, project: Path, env: dict[str, str]) -> None:
        self.project, self.env = project, env
        self.session = ""  # the last session a crow run said it used
        self.servers: list[subprocess.Popen[str]] = []

    def argv(self, line: str) -> list[str]:
        words = shlex.split(line)
        assert words[0] == "crow", line
        return [sys.executable, "-m", "crow", *words[1:]]

    def run(self, line: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            self.argv(line),
            input=stdin,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            cwd=self.project,
            env=self.env,
            stdin=None if stdin is not None else subprocess.DEVNULL,
        )
        found = re.search(r"crow: session (sess_\w+)", done.stderr)
        self.session = found.group(1) if found else self.session
        return done

    def start(self, line: str) -> subprocess.Popen[str]:
        process = subprocess.Popen(
            self.argv(line),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            cwd=self.project,
            env=self.env,
        )
        self.servers.append(process)
        return process

    def close(self) -> None:
        for process in self.servers:
            if process.poll() is None:
                process.terminate()
            try:
                process.communicate(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.communicate()


@pytest.fixture
def walk(crow_home: Path, scripted_model: Any, tmp_path: Path) -> Any:
    shutil.rmtree(crow_home)  # a fresh home: Crow never ran here
    project = tmp_path / "project"
    project.mkdir()
    (project / "test_ok.py").write_text("def test_ok():\n    assert True\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "OPENAI_"))}
    env.pop("CROW_MODEL", None)
    env["OLLAMA_HOST"] = scripted_model.base_url.removesuffix("/v1")
    scripted_model.tags = ["qwen3:8b"]
    walking = Walk(project, env)
    yield walking
    walking.close()


def test_trying_it_in_order_on_a_fresh_home(walk, crow_home, scripted_model):
    lines = trying_it()
    port = free_port()
    url = ""
    for line in lines:
        line = line.replace("127.0.0.1:8765", f"127.0.0.1:{port}")
        what = " ".join(shlex.split(line)[:2])
        if what == "crow init":
            done = walk.run(line)
            assert done.returncode == 0, done.stderr
            assert f"first run: Crow keeps its things in {crow_home}" in done.stderr
            assert '[models."qwen3:8b"]' in (crow_home / "config.toml").read_text()
        elif what == "crow run" and "--url" not in line and "--verify" not in line:
            scripted_model.script(Text(text="A TaskGroup runs tasks and waits for them all."))
            done = walk.run(line)
            assert done.returncode == 0, done.stderr
            assert done.stdout == "A TaskGroup runs tasks and waits for them all.\n"
            assert scripted_model.requests[-1]["model"] == "qwen3:8b"
        elif what == "crow chat":
            scripted_model.script(Text(text="Hello from chat."))
            done = walk.run(line, stdin="hello\n")
            assert done.returncode == 0, done.stderr
            assert "Hello from chat." in done.stdout
        elif what == "crow sessions":
            done = walk.run(line)
            assert done.returncode == 0, done.stderr
            assert len(done.stdout.splitlines()) == 3  # the header, run's, chat's
        elif what == "crow models":
            done = walk.run(line)
            assert done.returncode == 0, done.stderr
            assert any(
                row.startswith("qwen3:8b") and row.endswith("ready")
                for row in done.stdout.splitlines()
            ), done.stdout
        elif what == "crow serve":
            server = walk.start(line)
            assert server.stderr is not None
            for said in server.stderr:
                if found := re.search(r"serving ACP at (http://\S+)", said):
                    url = found.group(1)
                    break
            assert url.startswith(f"http://127.0.0.1:{port}/acp"), url
        elif what == "crow run" and "--url" in line:
            scripted_model.script(Text(text="hello from the server"))
            done = walk.run(line)  # the token: from $CROW_HOME/run/, as the README says
            assert done.returncode == 0, done.stderr
            assert done.stdout == "hello from the server\n"
            attached = walk.session  # the ID of the judge's line below
        elif what == "crow memory" and " add " in line:
            done = walk.run(line)
            assert done.returncode == 0, done.stderr
            assert done.stdout.startswith("mem_")
        elif what == "crow memory" and " search " in line:
            done = walk.run(line)
            assert done.returncode == 0, done.stderr
            assert "Deploys go through staging-3 first" in done.stdout
        elif what == "crow run" and "--verify" in line:
            scripted_model.script(Text(text="The test passes now."), passes("pytest -q passed"))
            done = walk.run(line)
            assert done.returncode == 0, done.stdout + done.stderr
            assert "✓ verified" in done.stderr
        elif what == "crow judge":
            judge = walk.start(line.replace("--session ID", f"--session {attached}") + " --once")
            assert judge.stderr is not None
            first = judge.stderr.readline()
            assert "watching session" in first, first + judge.communicate(timeout=30)[1]
            scripted_model.script(Text(text="Added a test."), passes("the test passes"))
            again = walk.run(
                f'crow run --url {url.split("?")[0]} --session {attached} "add a test"'
            )
            assert again.returncode == 0, again.stderr
            out, err = judge.communicate(timeout=TIMEOUT)
            assert judge.returncode == 0, err
            assert out.startswith("✓ verified"), out + err
        else:
            raise AssertionError(f"README's Trying it has a line this walk does not know: {line}")
    assert lines[0] == "crow init"
