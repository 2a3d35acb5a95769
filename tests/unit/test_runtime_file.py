"""``crow.runtime_file``: which server's token a client may use, and the file's lifetime."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from crow.runtime_file import find_token, publish


def dead_pid() -> int:
    gone = subprocess.Popen(["true"])
    gone.wait()
    return gone.pid


def test_the_file_is_0600_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        path = publish(tmp_path / "run", url="http://127.0.0.1:8765/acp", token="t0ken-value")
    finally:
        os.umask(old)
    assert path.name == "server-8765.json"
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.parent.stat().st_mode & 0o777 == 0o700
    assert json.loads(path.read_text())["pid"] == os.getpid()


@pytest.mark.parametrize(
    ("served", "asked", "found"),
    [
        ("http://127.0.0.1:8765/acp", "http://127.0.0.1:8765/acp", True),
        ("http://127.0.0.1:8765/acp", "ws://localhost:8765/acp", True),
        ("http://127.0.0.1:8765/acp", "http://[::1]:8765/acp", True),
        ("http://0.0.0.0:8765/acp", "http://127.0.0.1:8765/acp", True),
        ("http://crow.lan:8765/acp", "http://crow.lan:8765/acp", True),
        ("http://127.0.0.1:8765/acp", "http://127.0.0.1:8766/acp", False),
        # never send a local server's token to another machine
        ("http://0.0.0.0:8765/acp", "http://elsewhere.example:8765/acp", False),
        ("http://127.0.0.1:8765/acp", "http://elsewhere.example:8765/acp", False),
    ],
)
def test_a_token_is_found_only_for_the_same_server(
    tmp_path: Path, served: str, asked: str, found: bool
) -> None:
    publish(tmp_path, url=served, token="t0ken-value")
    assert find_token(tmp_path, asked) == ("t0ken-value" if found else None)


def test_a_stale_file_is_ignored_and_replaced(tmp_path: Path) -> None:
    url = "http://127.0.0.1:8765/acp"
    stale = tmp_path / "server-8765.json"
    stale.write_text(json.dumps({"url": url, "token": "old", "pid": dead_pid()}))
    assert find_token(tmp_path, url) is None
    publish(tmp_path, url=url, token="new-token")
    assert find_token(tmp_path, url) == "new-token"


def test_a_live_server_keeps_its_file(tmp_path: Path) -> None:
    url = "http://127.0.0.1:8765/acp"
    held = tmp_path / "server-8765.json"
    held.write_text(json.dumps({"url": url, "token": "theirs", "pid": os.getppid()}))
    with pytest.raises(FileExistsError):
        publish(tmp_path, url=url, token="mine")
    assert find_token(tmp_path, url) == "theirs"


def test_a_missing_or_broken_file_has_no_token(tmp_path: Path) -> None:
    assert find_token(tmp_path, "http://127.0.0.1:8765/acp") is None
    (tmp_path / "server-8765.json").write_text("{not json")
    assert find_token(tmp_path, "http://127.0.0.1:8765/acp") is None
