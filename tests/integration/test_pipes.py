"""Every command that writes to stdout leaves quietly and at once when its reader
goes away (``crow run --json … | head -1``), and a turn it started is cancelled."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from crow_testing.fakemodel import Slow, Text
from crow_testing.serve_support import HttpServer, write_config

CROW = [sys.executable, "-m", "crow"]
EXIT_READER_GONE = 141  # 128 + SIGPIPE: what a shell says of a process SIGPIPE ended
LEAVE_S = 10  # crow must be gone well within this once its reader is


def start(*args: str, stdout: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*CROW, *args],
        stdout=stdout,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )


def head_1(*args: str, until: str = "") -> tuple[str, subprocess.Popen[str]]:
    """``crow ARGS | head -1``: read one line (the first with ``until`` in it), then
    close the pipe."""
    process = start(*args, stdout=subprocess.PIPE)
    assert process.stdout is not None
    first = process.stdout.readline()
    while first and until not in first:
        first = process.stdout.readline()
    process.stdout.close()
    return first, process


def left_quietly(process: subprocess.Popen[str]) -> str:
    """Wait for the exit; it is EXIT_READER_GONE with no traceback.  Returns stderr."""
    assert process.stderr is not None
    try:
        process.wait(timeout=LEAVE_S)
    except subprocess.TimeoutExpired:
        process.kill()
        raise AssertionError(
            f"crow went on after its reader left: {process.stderr.read()}"
        ) from None
    stderr = process.stderr.read()
    process.stderr.close()
    assert process.returncode == EXIT_READER_GONE, stderr
    assert "Traceback" not in stderr and "BrokenPipe" not in stderr, stderr
    return stderr


def closed_pipe() -> int:
    """The write end of a pipe whose reader is already gone."""
    read, write = os.pipe()
    os.close(read)
    return write


def run_closed(*args: str) -> str:
    write = closed_pipe()
    try:
        process = start(*args, stdout=write)
    finally:
        os.close(write)
    return left_quietly(process)


def test_run_json_piped_to_head_cancels_the_turn_and_leaves(crow_home, scripted_model):
    write_config(crow_home, scripted_model.base_url, extra="[tools]\nbuiltin = []\n")
    scripted_model.script(Slow("a long story " * 40, chunks=60, delay_s=0.1))
    started = time.monotonic()
    first, process = head_1("run", "--json", "tell me a long story", until="agent_message_chunk")
    assert first.startswith('{"sessionId"')  # the reply streams: the turn runs
    left_quietly(process)
    scripted_model.wait_for_disconnects(1)  # the model's stream was closed: cancelled
    assert time.monotonic() - started < 6 * 0.1 * 60  # well before the story's end


def test_run_attached_by_url_cancels_the_servers_turn(crow_home, scripted_model):
    write_config(crow_home, scripted_model.base_url, extra="[tools]\nbuiltin = []\n")
    server = HttpServer()
    try:
        scripted_model.script(Slow("a long story " * 40, chunks=60, delay_s=0.1))
        first, process = head_1(
            "run", "--json", "--url", server.url, "a long story", until="agent_message_chunk"
        )
        assert first
        left_quietly(process)
        # The server goes on serving; the turn this client started does not.
        scripted_model.wait_for_disconnects(1)
    finally:
        server.stop()


@pytest.mark.parametrize(
    "args",
    [("sessions",), ("models",), ("permissions", "--json"), ("memory", "list"), ("--help",)],
)
def test_listing_commands_leave_quietly_when_nobody_reads(crow_home, scripted_model, args):
    write_config(crow_home, scripted_model.base_url)
    (crow_home / "permissions.toml").write_text('[tools]\n"fs__write" = "allow"\n')
    if args == ("sessions",):
        subprocess.run([*CROW, "run", "hi"], capture_output=True, timeout=60, check=False)
    if args == ("memory", "list"):
        subprocess.run(
            [*CROW, "memory", "add", "the milk is in the fridge"],
            capture_output=True,
            timeout=60,
            check=True,
        )
    run_closed(*args)


def test_chat_from_a_pipe_leaves_quietly_when_nobody_reads(crow_home, scripted_model):
    write_config(crow_home, scripted_model.base_url, extra="[tools]\nbuiltin = []\n")
    scripted_model.script(Text(text="a reply nobody reads"))
    write = closed_pipe()
    try:
        process = subprocess.Popen(
            [*CROW, "chat"], stdin=subprocess.PIPE, stdout=write, stderr=subprocess.PIPE, text=True
        )
    finally:
        os.close(write)
    assert process.stdin is not None
    process.stdin.write("hello\n")
    process.stdin.close()
    left_quietly(process)
