"""What a person meets in their first hour with Crow, command by command: the first
run's note, config mistakes, stores that cannot be reached, library noise, Ctrl-C,
the command line's own errors, saved permissions and shell completion."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pexpect
import pytest
from fakemodel import Hang, Text, ToolCalls
from serve_support import Terminals, write_config
from test_serve_http import HttpServer

CROW = [sys.executable, "-m", "crow"]
TIMEOUT = 30


def crow(*args: str, cwd: str = "/tmp", **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CROW, *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **env},
    )


# ---- the first run ----------------------------------------------------------------------
def test_the_first_run_says_once_where_crow_keeps_things(crow_home, scripted_model):
    shutil.rmtree(crow_home)  # a machine Crow has never run on
    first = crow("sessions")
    assert first.returncode == 0, first.stderr
    said = first.stderr
    assert f"first run: Crow keeps its things in {crow_home} (CROW_HOME moves them all)" in said
    for thing in ("config.toml", "crow.db", "logs/", "memory/", "[store] url"):
        assert thing in said
    assert crow_home.is_dir() and (crow_home.stat().st_mode & 0o777) == 0o700
    assert "first run" not in crow("sessions").stderr  # once


# ---- config.toml ------------------------------------------------------------------------
def test_unknown_tables_and_keys_are_named_once_with_the_closest_known(crow_home, scripted_model):
    write_config(crow_home, scripted_model.base_url, extra='[modle]\ndefault = "x"\n')
    scripted_model.script(Text(text="fine"))
    result = crow("run", "hi")
    assert result.returncode == 0, result.stderr
    warned = [line for line in result.stderr.splitlines() if "[modle]" in line]
    # Once: the crow serve that crow run starts does not say it again.
    assert warned == [
        f"crow: {crow_home / 'config.toml'}: unknown table [modle] (did you mean [model]?): "
        "Crow ignores it"
    ]


@pytest.mark.parametrize(
    "args",
    [
        ("run", "hi"),
        ("sessions",),
        ("models",),
        ("memory", "list"),
        ("judge", "--session", "s", "--url", "http://127.0.0.1:9/acp"),
        ("store", "migrate"),
    ],
)
def test_a_broken_config_is_the_same_line_from_every_command(crow_home, args):
    (crow_home / "config.toml").write_text('[models.main]\nprovider = "nowhere"\n')
    result = crow(*args)
    assert result.returncode == 2
    assert result.stderr == (
        f"crow: {crow_home / 'config.toml'}: models.main.provider: expected one of [], "
        "got 'nowhere'\n"
    )


@pytest.mark.parametrize("args", [("run", "hi"), ("sessions",), ("chat",), ("serve",)])
def test_an_unreachable_postgresql_store_is_one_line_naming_it(crow_home, args):
    url = "postgresql://crow:s3cret@127.0.0.1:1/sessions"
    result = crow(*args, CROW_STORE_URL=url)
    assert result.returncode in (1, 7)
    assert result.stderr.count("\n") == 1, result.stderr
    said = result.stderr
    assert "cannot reach the PostgreSQL session store at 127.0.0.1:1" in said
    assert "s3cret" not in said and "crow:***@127.0.0.1" in said and "[store] url" in said


def test_a_bad_crow_store_url_is_blamed_on_the_environment(crow_home):
    result = crow("sessions", CROW_STORE_URL="mysql://me:pw@db/x")
    assert result.returncode == 2
    assert result.stderr.startswith("crow: the environment: CROW_STORE_URL: expected")
    assert "config.toml" not in result.stderr and "pw@" not in result.stderr


# ---- library noise ----------------------------------------------------------------------
def test_lancedb_and_httpx_never_reach_the_terminal(crow_home, scripted_model, tmp_path):
    """Memory (LanceDB) is loaded for recall, then the session starts a command:
    LanceDB's fork warning stays out of the person's stderr."""
    write_config(
        crow_home, scripted_model.base_url, extra='[tools]\nbuiltin = ["terminal", "memory"]\n'
    )
    assert crow("memory", "add", "how to build: make", cwd=str(tmp_path)).returncode == 0
    scripted_model.script(
        ToolCalls(calls=[("terminal__run", {"command": "echo built"})]), Text(text="done")
    )
    result = crow("run", "--yes", "how to build: make", cwd=str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "Recalled 1 memor" in result.stderr  # LanceDB was loaded before the command ran
    assert "Warning" not in result.stderr and "HTTP Request" not in result.stderr, result.stderr


# ---- Ctrl-C -------------------------------------------------------------------------------
@pytest.fixture
def terminal(crow_home: Path, tmp_path: Path) -> Iterator[Terminals]:
    env = dict(os.environ, TERM="dumb", NO_COLOR="1", CROW_HOME=str(crow_home))
    terminals = Terminals(env, tmp_path, TIMEOUT)
    yield terminals
    terminals.close()


def interrupted(child: Any) -> str:
    """Press Ctrl-C (SIGINT to the terminal's foreground group); the command leaves
    with 130, one line and no traceback.  Returns what it printed after the Ctrl-C."""
    child.sendintr()
    child.expect(pexpect.EOF)
    child.close()
    said = (child.before or "").replace("\r", "")
    assert "Traceback" not in said and "Warning" not in said, said
    assert child.exitstatus == 130, (child.exitstatus, child.signalstatus, said)
    assert said.strip().splitlines()[-1:] == ["crow: interrupted"], said
    return said


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that takes connections and never answers."""
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen(8)
        yield listening.getsockname()[1]


def test_ctrl_c_in_memory_search_leaves_in_one_line(
    crow_home, scripted_model, terminal, silent_port
):
    config = crow_home / "config.toml"
    config.write_text(f'[memory]\nembedder = "openai"\nurl = "{scripted_model.base_url}"\n')
    assert crow("memory", "add", "deploys go through staging-3").returncode == 0
    config.write_text(  # the same embedder, now at a server that never answers
        f'[memory]\nembedder = "openai"\nurl = "http://127.0.0.1:{silent_port}/v1"\n'
    )
    child = terminal.start("memory", "search", "where do deploys go?")
    child.expect(pexpect.TIMEOUT, timeout=3)  # waiting for the embedder
    interrupted(child)


def test_ctrl_c_in_models_check_leaves_in_one_line(crow_home, scripted_model, terminal):
    write_config(crow_home, scripted_model.base_url)
    scripted_model.script(Hang())
    child = terminal.start("models", "--check")
    scripted_model.wait_for_requests(1, timeout=TIMEOUT)
    interrupted(child)


def test_ctrl_c_in_the_judge_leaves_in_one_line(crow_home, scripted_model, terminal):
    write_config(crow_home, scripted_model.base_url, extra="[tools]\nbuiltin = []\n")
    server = HttpServer()
    try:
        scripted_model.script(Text(text="hello"))
        first = crow("run", "--json", "--url", server.url, "hi")
        session = first.stdout.splitlines()[-1].split('"')[3]
        child = terminal.start("judge", "--url", server.url, "--session", session)
        child.expect("watching session")
        interrupted(child)
    finally:
        server.stop()


def test_ctrl_c_in_the_conductor_leaves_in_one_line(crow_home, scripted_model, terminal):
    write_config(crow_home, scripted_model.base_url)
    child = terminal.start("conductor", "agent", f"{sys.executable} -m crow serve")
    child.expect(pexpect.TIMEOUT, timeout=2)  # the chain waits for its client's initialize
    child.sendintr()
    child.expect(pexpect.EOF)
    child.close()
    said = (child.before or "").replace("\r", "")
    assert "Traceback" not in said and child.exitstatus == 130, said
    assert len(said.strip().splitlines()) <= 1, said


def test_ctrl_c_while_crow_serve_starts_at_a_terminal_is_quiet(crow_home, terminal):
    child = terminal.start("serve")
    child.sendintr()  # at once: while it is still starting
    child.expect(pexpect.EOF)
    child.close()
    said = (child.before or "").replace("\r", "")
    assert "Traceback" not in said and "never awaited" not in said, said
