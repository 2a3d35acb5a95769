"""``crow.runtime.runtime_file``: which server's token a client may use, and the file's lifetime.

The token is found only for the process that wrote the file (pid and start time)
while it holds the port's listening socket: the tests listen on real ports."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from crow.runtime.proc import listens_on, start_time
from crow.runtime.runtime_file import find_token, publish


def dead_pid() -> int:
    gone = subprocess.Popen(["true"])
    gone.wait()
    return gone.pid


@pytest.fixture
def port() -> Iterator[int]:
    """A port this process listens on (as crow serve --http does)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield listener.getsockname()[1]


def test_the_file_is_0600_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        path = publish(tmp_path / "run", url="http://127.0.0.1:8765/acp", token="t0ken-value")
    finally:
        os.umask(old)
    assert path.name == "server-8765.json"
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.parent.stat().st_mode & 0o777 == 0o700
    written = json.loads(path.read_text())
    assert written["pid"] == os.getpid() and written["started"] == start_time(os.getpid())


@pytest.mark.parametrize(
    ("served", "asked", "found"),
    [
        ("http://127.0.0.1:PORT/acp", "http://127.0.0.1:PORT/acp", True),
        ("http://127.0.0.1:PORT/acp", "ws://localhost:PORT/acp", True),
        ("http://127.0.0.1:PORT/acp", "http://[::1]:PORT/acp", True),
        ("http://0.0.0.0:PORT/acp", "http://127.0.0.1:PORT/acp", True),
        ("http://crow.lan:PORT/acp", "http://crow.lan:PORT/acp", True),
        ("http://127.0.0.1:PORT/acp", "http://127.0.0.1:1/acp", False),
        # never send a local server's token to another machine
        ("http://0.0.0.0:PORT/acp", "http://elsewhere.example:PORT/acp", False),
        ("http://127.0.0.1:PORT/acp", "http://elsewhere.example:PORT/acp", False),
    ],
)
def test_a_token_is_found_only_for_the_same_server(
    tmp_path: Path, port: int, served: str, asked: str, found: bool
) -> None:
    publish(tmp_path, url=served.replace("PORT", str(port)), token="t0ken-value")
    assert find_token(tmp_path, asked.replace("PORT", str(port))) == (
        "t0ken-value" if found else None
    )


def test_a_stale_file_is_ignored_and_replaced(tmp_path: Path, port: int) -> None:
    url = f"http://127.0.0.1:{port}/acp"
    stale = tmp_path / f"server-{port}.json"
    stale.write_text(json.dumps({"url": url, "token": "old", "pid": dead_pid()}))
    assert find_token(tmp_path, url) is None
    publish(tmp_path, url=url, token="new-token")
    assert find_token(tmp_path, url) == "new-token"


def test_a_file_whose_pid_went_to_another_process_is_stale(tmp_path: Path, port: int) -> None:
    """After kill -9 the file stays; its pid may be handed to another process (here: this
    one, which listens on the port, under another start time).  Its token goes nowhere."""
    url = f"http://127.0.0.1:{port}/acp"
    reused = {"url": url, "token": "old", "pid": os.getpid(), "started": "1"}
    (tmp_path / f"server-{port}.json").write_text(json.dumps(reused))
    assert find_token(tmp_path, url) is None
    publish(tmp_path, url=url, token="new-token")  # and the next server replaces it
    assert find_token(tmp_path, url) == "new-token"


def test_no_token_for_a_port_the_server_no_longer_listens_on(tmp_path: Path) -> None:
    """The server's process lives but another program took the port: nothing is sent."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free_port = probe.getsockname()[1]
    other = subprocess.Popen(
        [sys.executable, "-c", LISTEN_ON, str(free_port)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert other.stdout is not None and other.stdout.readline().strip() == "listening"
        url = f"http://127.0.0.1:{free_port}/acp"
        publish(tmp_path, url=url, token="t0ken-value")  # this process, not the listener
        assert listens_on(other.pid, free_port) is True
        assert listens_on(os.getpid(), free_port) is False
        assert find_token(tmp_path, url) is None
    finally:
        other.kill()
        other.communicate()


LISTEN_ON = """
import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen()
print("listening", flush=True); time.sleep(60)
"""


def test_a_live_server_keeps_its_file(tmp_path: Path) -> None:
    url = "http://127.0.0.1:8765/acp"
    held = tmp_path / "server-8765.json"
    parent = os.getppid()
    theirs = {"url": url, "token": "theirs", "pid": parent, "started": start_time(parent)}
    held.write_text(json.dumps(theirs))
    with pytest.raises(FileExistsError):
        publish(tmp_path, url=url, token="mine")
    assert json.loads(held.read_text())["token"] == "theirs"


def test_a_missing_or_broken_file_has_no_token(tmp_path: Path) -> None:
    assert find_token(tmp_path, "http://127.0.0.1:8765/acp") is None
    (tmp_path / "server-8765.json").write_text("{not json")
    assert find_token(tmp_path, "http://127.0.0.1:8765/acp") is None
