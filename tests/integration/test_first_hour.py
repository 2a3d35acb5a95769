"""What a person meets in their first hour with Crow, command by command: the first
run's note, config mistakes, stores that cannot be reached, library noise, Ctrl-C,
the command line's own errors, saved permissions and shell completion."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pexpect
import pytest
from crow_testing.fakemodel import Hang, Text, ToolCalls
from crow_testing.serve_support import HttpServer, Terminals, write_config
from test_serve_tools import probe_config

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


def ctrl_c(child: Any) -> str:
    """Press Ctrl-C (SIGINT to the terminal's foreground group); the command leaves
    with 130 and no traceback or warning.  Returns what it printed after the Ctrl-C."""
    child.sendintr()
    child.expect(pexpect.EOF)
    child.close()
    said = (child.before or "").replace("\r", "")
    assert "Traceback" not in said and "Warning" not in said, said
    assert child.exitstatus == 130, (child.exitstatus, child.signalstatus, said)
    return str(said)


def interrupted(child: Any) -> str:
    """``ctrl_c``, and the command says so in one line."""
    said = ctrl_c(child)
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
        missing = crow("judge", "--url", server.url, "--session", "nope", "--once")
        assert (missing.returncode, missing.stderr) == (
            10,
            "crow judge: no session nope (crow sessions lists them)\n",
        )
        child = terminal.start("judge", "--url", server.url, "--session", session[:9])
        child.expect("watching session")
        interrupted(child)
    finally:
        server.stop()


def test_a_judge_stopped_by_sigterm_can_be_started_again_at_once(crow_home, scripted_model):
    """A supervisor stops crow judge with SIGTERM: its HTTP connection is closed on
    the way out, so the judge started again is not refused as a second one (it was,
    until the server expired the dead connection a minute later)."""
    write_config(crow_home, scripted_model.base_url, extra="[tools]\nbuiltin = []\n")
    server = HttpServer()
    judges: list[subprocess.Popen[str]] = []
    try:
        scripted_model.script(Text(text="hello"))
        first = crow("run", "--json", "--url", server.url, "hi")
        session = first.stdout.splitlines()[-1].split('"')[3]
        for _ in range(2):
            judge = subprocess.Popen(
                [*CROW, "judge", "--url", server.url, "--session", session],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
            judges.append(judge)
            assert judge.stderr is not None
            said = judge.stderr.readline()
            assert "watching session" in said, said + judge.stderr.read()
            judge.terminate()
            assert judge.wait(timeout=TIMEOUT) == 143
            assert judge.stderr.read() == ""  # quietly
    finally:
        for judge in judges:
            if judge.poll() is None:
                judge.kill()
            if judge.stderr is not None:
                judge.stderr.close()
        server.stop()


def test_ctrl_c_in_the_conductor_leaves_in_one_line(crow_home, scripted_model, terminal):
    write_config(crow_home, scripted_model.base_url)
    child = terminal.start("conductor", "agent", f"{sys.executable} -m crow serve")
    child.expect(pexpect.TIMEOUT, timeout=2)  # the chain waits for its client's initialize
    said = ctrl_c(child)
    assert len(said.strip().splitlines()) <= 1, said


def test_ctrl_c_while_crows_modules_load_leaves_in_one_line(crow_home, scripted_model, terminal):
    """Ctrl-C as soon as Crow's own code runs: while the command's modules load, it
    leaves as anywhere else, not with the traceback of the import it interrupted.
    (Earlier the interpreter is still starting: what it says then is Python's.)"""
    write_config(crow_home, scripted_model.base_url)
    scripted_model.script(Hang())  # (a Ctrl-C that comes late finds the check waiting)
    child = terminal.start("models", "--check", python=["-X", "importtime"])
    child.expect(r"\|\s+crow\.[\w.]+\r?\n")  # the first of Crow's modules: the rest load now
    interrupted(child)


def test_ctrl_c_while_crow_serve_starts_at_a_terminal_is_quiet(crow_home, terminal):
    child = terminal.start("serve")
    child.expect("speaking ACP")  # said at a terminal, as the agent's layers load and start
    ctrl_c(child)  # at once: while it is still starting (no "never awaited" warning)


def test_ctrl_c_stops_crow_serve_http_closes_the_store_and_leaves_with_130(crow_home, terminal):
    child = terminal.start("serve", "--http", "127.0.0.1:0")
    child.expect(r"serving ACP at (http://\S+)/acp")
    healthz = httpx.get(f"{child.match.group(1)}/healthz", timeout=TIMEOUT)
    assert healthz.status_code == 200  # serving, its store open
    ctrl_c(child)  # a graceful stop, quietly
    assert not (crow_home / "crow.db-wal").exists()  # the store was closed, not cut off
    assert not list((crow_home / "run").glob("*.json"))  # clients no longer find it


def test_ctrl_c_again_leaves_crow_serve_http_without_waiting_for_its_turns(
    crow_home, scripted_model, terminal
):
    write_config(crow_home, scripted_model.base_url, extra="[tools]\nbuiltin = []\n")
    scripted_model.script(Hang())
    child = terminal.start("serve", "--http", "127.0.0.1:0")
    child.expect(r"serving ACP at (http://\S+)")
    running = subprocess.Popen(
        [*CROW, "run", "--url", child.match.group(1), "wait for me"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        scripted_model.wait_for_requests(1, timeout=TIMEOUT)  # a turn runs
        child.sendintr()  # a graceful stop: the turn gets [server] shutdown_grace_s (30 s)
        child.expect(pexpect.TIMEOUT, timeout=1)
        child.sendintr()
        child.expect(pexpect.EOF, timeout=10)  # (a bound well under the grace)
        child.close()
        assert child.exitstatus == 130, (child.exitstatus, child.signalstatus)
        assert "Traceback" not in (child.before or ""), child.before
    finally:
        running.kill()
        running.wait()


def test_sigterm_stops_crow_serve_http_closes_the_store_and_ends_by_the_signal(
    crow_home, scripted_model
):
    """With a turn running for a client on an SSE stream: the stream ends at once
    (uvicorn waited 3 s for it, then cancelled it with two tracebacks on stderr)."""
    grace = "[tools]\nbuiltin = []\n[server]\nshutdown_grace_s = 1\n"
    write_config(crow_home, scripted_model.base_url, extra=grace)
    scripted_model.script(Hang())
    server = HttpServer(env={"CROW_HOME": str(crow_home)})
    running = subprocess.Popen(
        [*CROW, "run", "--url", server.url, "wait for me"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        scripted_model.wait_for_requests(1, timeout=TIMEOUT)  # a turn runs, streamed
        server.process.terminate()
        assert server.process.stderr is not None
        said = server.process.stderr.read()
        assert server.process.wait(timeout=TIMEOUT) == -signal.SIGTERM
    finally:
        server.stop()
        running.kill()
        running.wait()
    assert "Traceback" not in said and "ERROR" not in said, said
    assert not (crow_home / "crow.db-wal").exists()


# ---- saved permissions --------------------------------------------------------------------
def test_permissions_lists_and_forgets_saved_answers(crow_home, scripted_model):
    empty = crow("permissions")
    assert empty.returncode == 0 and empty.stdout == "" and "no saved answers" in empty.stderr
    (crow_home / "permissions.toml").write_text(
        '[tools]\n"fs__write_file" = "allow"\n"terminal__run" = "deny"\n"web__fetch" = "allow"\n'
    )
    listed = crow("permissions")
    assert listed.stdout.splitlines() == [
        "TOOL            ANSWER",
        "fs__write_file  allow",
        "terminal__run   deny",
        "web__fetch      allow",
    ]
    forgot = crow("permissions", "forget", "terminal__run", "nope")
    assert forgot.returncode == 1 and forgot.stdout == "forgot terminal__run\n"
    assert forgot.stderr == "crow permissions: no saved answer for nope\n"
    assert [json.loads(line) for line in crow("permissions", "--json").stdout.splitlines()] == [
        {"tool": "fs__write_file", "decision": "allow"},
        {"tool": "web__fetch", "decision": "allow"},
    ]
    assert crow("permissions", "forget").returncode == 2  # TOOL... or --all
    assert crow("permissions", "forget", "--all").stdout.splitlines() == [
        "forgot fs__write_file",
        "forgot web__fetch",
    ]
    assert crow("permissions").stdout == ""


def test_a_forgotten_answer_is_asked_again(crow_home, scripted_model):
    """What crow serve decides follows the file: a saved "allow" runs the tool
    without asking, and once forgotten the same call needs --yes again."""
    write_config(crow_home, scripted_model.base_url, extra=probe_config())
    (crow_home / "permissions.toml").write_text('[tools]\n"probe__touch" = "allow"\n')
    scripted_model.script(ToolCalls(calls=[("probe__touch", {"path": "a"})]), Text(text="done"))
    assert crow("run", "touch it").returncode == 0
    assert crow("permissions", "forget", "probe__touch").returncode == 0
    scripted_model.script(ToolCalls(calls=[("probe__touch", {"path": "a"})]))
    assert crow("run", "touch it").returncode == 6  # a permission was needed


# ---- the command line -----------------------------------------------------------------------
def test_an_unknown_option_shows_the_commands_own_usage():
    for args, usage in (
        (("run", "hi", "--frobnicate"), "usage: crow run "),
        (("memory", "search", "q", "--frobnicate"), "usage: crow memory search "),
    ):
        result = crow(*args)
        assert result.returncode == 2 and result.stderr.startswith(usage), result.stderr
        assert result.stderr.endswith("error: unrecognized arguments: --frobnicate\n")


def test_json_after_the_subcommand_and_mcp_help_names_itself(crow_home, scripted_model):
    config = crow_home / "config.toml"
    config.write_text(f'[memory]\nembedder = "openai"\nurl = "{scripted_model.base_url}"\n')
    assert crow("memory", "add", "deploys go through staging-3").returncode == 0
    found = crow("memory", "search", "where do deploys go?", "--json")
    assert found.returncode == 0, found.stderr
    assert json.loads(found.stdout.splitlines()[0])["text"] == "deploys go through staging-3"
    for server in ("fs", "terminal", "web", "memory"):
        helped = crow("mcp", server, "--help")
        assert helped.stdout.startswith(f"usage: crow mcp {server} "), helped.stdout


@pytest.mark.parametrize("command", ["run", "chat", "sessions", "judge"])
def test_a_url_without_a_scheme_is_a_usage_error_with_the_fix(command):
    args = {"run": ["hi"], "judge": ["--session", "s"]}.get(command, [])
    result = crow(command, "--url", "127.0.0.1:8765", *args)
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == (
        f"crow {command}: error: --url 127.0.0.1:8765 has no scheme: give "
        "http://127.0.0.1:8765/acp (or ws://, https://, wss://)"
    )


def test_a_busy_port_is_one_line_and_exit_3(crow_home, scripted_model):
    write_config(crow_home, scripted_model.base_url)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = crow("serve", "--http", f"127.0.0.1:{port}")
    assert result.returncode == 3
    assert result.stderr == (
        f"crow: 127.0.0.1:{port} is already in use (another crow serve?): stop it, or pick "
        "another port (--http HOST:0 takes a free one)\n"
    )


# ---- shell completion ---------------------------------------------------------------------
def complete_in_bash(script: str, *words: str) -> list[str]:
    """What bash's completion of ``crow WORDS`` offers, with ``script`` loaded."""
    line = " ".join(("crow", *words))
    program = (
        f"{script}\n"
        f"COMP_WORDS=(crow {' '.join(words)}); COMP_CWORD={len(words)}; "
        f'COMP_LINE="{line}"; COMP_POINT={len(line)}\n'
        f'$(complete -p crow | sed -E "s/.* -F ([^ ]+) .*/\\1/") crow "{words[-1]}" '
        f'"{words[-2] if len(words) > 1 else "crow"}"\n'
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    done = subprocess.run(["bash", "-c", program], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_bash_completion_from_the_parser_itself():
    script = crow("completion", "bash")
    assert script.returncode == 0, script.stderr
    assert complete_in_bash(script.stdout, "ru") == ["run"]
    assert complete_in_bash(script.stdout, "se") == ["serve", "sessions"]
    assert complete_in_bash(script.stdout, "sessions", "--li") == ["--limit"]
    assert complete_in_bash(script.stdout, "memory", "se") == ["search"]
    assert complete_in_bash(script.stdout, "completion", "") == ["bash", "zsh", "fish"]


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed")
def test_the_zsh_script_parses(tmp_path):
    script = tmp_path / "_crow"
    script.write_text(crow("completion", "zsh").stdout)
    assert subprocess.run(["zsh", "-n", str(script)], timeout=30).returncode == 0


@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed")
def test_fish_completes_a_subcommand(tmp_path):
    script = tmp_path / "crow.fish"
    script.write_text(crow("completion", "fish").stdout)
    offered = subprocess.run(
        ["fish", "-c", f"source {script}; complete -C 'crow sessio'"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert offered.stdout.split("\t")[0] == "sessions", offered.stdout + offered.stderr
