"""Issue #11 against real processes: a private home, and logs without credentials.

``crow init``, ``crow run`` (which spawns ``crow serve``) and ``crow serve``
run under umask 022 against the scripted model, reached through a base URL
that carries ``user:secret@`` and with an API key that has no telltale shape
(only its registration can mask it).  Nothing secret may reach crow.log or
stderr, the log must still say what happened, and every file in the home is
0600 and every folder 0700.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from crow_testing.fakemodel import Error, ScriptedModel, Text
from crow_testing.serve_support import CrowProcess

CROW = [sys.executable, "-m", "crow"]
API_KEY = "plainsecretkey42"  # contains "secret": one search finds both credentials
KEY_ENV = "CROW_TEST_MODEL_KEY"


def crow(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CROW, *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd="/tmp",
        stdin=subprocess.DEVNULL,
        env={**os.environ, KEY_ENV: API_KEY},
        umask=0o022,
    )


def write_secret_config(home: Path, model: ScriptedModel) -> None:
    """Point Crow at the scripted model through credentials: userinfo and an API key."""
    url = model.base_url.replace("http://", "http://user:secret@", 1)
    (home / "config.toml").write_text(  # keeps the mode of the file crow init made
        f"""
[model]
default = "main"
[providers.scripted]
base_url = "{url}"
api_key_env = "{KEY_ENV}"
[models.main]
provider = "scripted"
[tools]
builtin = []
[retry]
attempts = 1
backoff_s = 0.01
timeout_s = 5
"""
    )


def modes(home: Path) -> dict[str, int]:
    found = {".": stat.S_IMODE(home.stat().st_mode)}
    for path in home.rglob("*"):
        found[str(path.relative_to(home))] = stat.S_IMODE(path.stat().st_mode)
    return found


def assert_private(home: Path) -> None:
    for name, mode in modes(home).items():
        expected = 0o700 if (home / name).is_dir() else 0o600
        assert mode == expected, f"{name} is {mode:o}, not {expected:o}"


def assert_no_secret(*texts: str) -> None:
    for text in texts:
        assert "secret" not in text and API_KEY not in text, text


@pytest.fixture
def home(crow_home: Path, scripted_model: ScriptedModel) -> Path:
    made = crow("init")
    assert made.returncode == 0, made.stderr
    write_secret_config(crow_home, scripted_model)
    return crow_home


def test_a_failing_model_leaves_no_credential_in_the_log_or_stderr(home, scripted_model):
    scripted_model.script(Error(status=401, message=f"Incorrect API key provided: {API_KEY}"))
    result = crow("run", "hi")
    assert result.returncode == 1
    log = (home / "logs" / "crow.log").read_text()
    assert_no_secret(log, result.stderr, result.stdout)
    assert "model main failed: main: 401 Incorrect API key provided: ***" in log  # why
    assert "401 Incorrect API key provided: ***" in result.stderr
    assert scripted_model.requests, "the model was called"


def test_a_working_model_leaves_no_credential_and_a_private_home(home, scripted_model):
    scripted_model.script(Text(text="Hello"))
    result = crow("run", "hi")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Hello\n"
    log = (home / "logs" / "crow.log").read_text()
    assert_no_secret(log, result.stderr)
    assert {"config.toml", "crow.db", "logs", "logs/crow.log"} <= set(modes(home))
    assert_private(home)


def test_an_open_home_is_tightened(crow_home, scripted_model):
    crow_home.chmod(0o755)
    os.chmod(crow_home, 0o755)
    os.close(os.open(crow_home / "config.toml", os.O_CREAT | os.O_WRONLY, 0o600))
    write_secret_config(crow_home, scripted_model)
    scripted_model.script(Text(text="Hello"))
    result = crow("run", "hi")
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("made it private") == 1  # one warning, for the home
    assert_private(crow_home)


def test_a_running_server_keeps_its_store_files_private(home, scripted_model):
    old = os.umask(0o022)
    try:
        server = CrowProcess()
    finally:
        os.umask(old)
    try:
        scripted_model.script(Text(text="Hello"))
        sid = server.new_session()
        server.run_turn(sid, "hi")
        assert {"crow.db-wal", "crow.db-shm"} <= set(modes(home)), "checked while open"
        assert_private(home)
    finally:
        server.close()
        stderr = server.stderr_text()
    log = (home / "logs" / "crow.log").read_text()
    assert_no_secret(log, stderr)
