"""Crow's home is private whatever the umask: folders 0700, files 0600 (issue #11).

Every test runs under umask 022, the common default that would make new files
0644 and folders 0755, and goes through the code paths Crow really uses.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import stat
from pathlib import Path

import pytest

from crow.cli.logs import setup_logging as _setup_logging
from crow.config import Paths, load_config, save_permission
from crow.config.template import Found, write_default_config
from crow.private import private_dir, private_file, tighten_file, write_private
from crow.store.db import SqliteStore


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture(autouse=True)
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


@pytest.fixture
def paths(tmp_path: Path) -> Paths:
    return Paths(home=tmp_path / "home")


# ---- the helpers -----------------------------------------------------------------------


def test_a_new_folder_is_0700_and_its_missing_parents_are_usual(tmp_path):
    made = private_dir(tmp_path / "shared" / "home")
    assert mode(made) == 0o700
    assert mode(tmp_path / "shared") == 0o755  # not Crow's: ~/.agents


def test_a_folder_is_0700_even_under_a_narrower_umask(tmp_path):
    os.umask(0o277)
    assert mode(private_dir(tmp_path / "home")) == 0o700
    assert mode(private_file(tmp_path / "home" / "f")) == 0o600


def test_an_open_folder_is_tightened_with_one_warning(tmp_path, caplog):
    home = tmp_path / "home"
    home.mkdir(mode=0o755)
    with caplog.at_level(logging.WARNING, logger="crow.private"):
        private_dir(home)
        private_dir(home)
    assert mode(home) == 0o700
    [record] = caplog.records
    assert str(home) in record.getMessage() and "755" in record.getMessage()


def test_a_shared_sticky_folder_is_left_alone(tmp_path, caplog):
    shared = tmp_path / "tmp"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    with caplog.at_level(logging.WARNING, logger="crow.private"):
        private_dir(shared)
    assert mode(shared) == 0o1777
    assert "shared" in caplog.text


def test_a_file_in_place_of_the_folder_is_an_error(tmp_path):
    (tmp_path / "home").write_text("")
    with pytest.raises(NotADirectoryError):
        private_dir(tmp_path / "home")


def test_private_file_creates_0600_and_tightens_keeping_the_content(tmp_path):
    new = private_file(tmp_path / "new")
    assert mode(new) == 0o600 and new.read_text() == ""
    old = tmp_path / "old"
    old.write_text("kept")
    os.chmod(old, 0o644)
    private_file(old)
    assert mode(old) == 0o600 and old.read_text() == "kept"


def test_tighten_file_ignores_a_missing_file(tmp_path):
    tighten_file(tmp_path / "gone")
    assert not (tmp_path / "gone").exists()


def test_write_private_replaces_atomically_with_0600(tmp_path):
    file = tmp_path / "f.toml"
    file.write_text("old")
    os.chmod(file, 0o644)
    write_private(file, "new")
    assert file.read_text() == "new" and mode(file) == 0o600
    left = [p.name for p in tmp_path.iterdir() if p.name != "crow-home"]
    assert left == ["f.toml"]  # no temporary file left


def test_write_private_writes_through_a_symlink(tmp_path):
    real = tmp_path / "dotfiles" / "config.toml"
    real.parent.mkdir()
    real.write_text("old")
    link = tmp_path / "config.toml"
    link.symlink_to(real)
    write_private(link, "new")
    assert link.is_symlink() and real.read_text() == "new" and mode(real) == 0o600


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    file = tmp_path / "f"
    file.write_text("old")
    with pytest.raises(TypeError):
        write_private(file, b"not text")  # type: ignore[arg-type]
    left = [p.name for p in tmp_path.iterdir() if p.name != "crow-home"]
    assert file.read_text() == "old" and left == ["f"]


# ---- the session store ---------------------------------------------------------------


def test_sqlite_gives_wal_and_shm_the_mode_of_the_database(tmp_path):
    """The assumption Store relies on (SQLite's unix VFS, robust_open)."""
    home = tmp_path
    db_path = private_file(home / "raw.db")
    db = sqlite3.connect(db_path)
    try:
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("CREATE TABLE t (x)")
        db.execute("INSERT INTO t VALUES (1)")
        db.commit()
        for suffix in ("", "-wal", "-shm"):
            assert mode(home / f"raw.db{suffix}") == 0o600, suffix
    finally:
        db.close()


def test_the_store_and_its_wal_and_shm_are_0600(paths):
    store = SqliteStore(paths.store)
    try:
        store.create_session(session_id="s", cwd="/tmp", now="2026-01-01T00:00:00Z")
        store.append_update("s", b'{"sessionUpdate":"x"}')
        for suffix in ("", "-wal", "-shm"):
            file = paths.store.with_name(paths.store.name + suffix)
            assert file.exists() and mode(file) == 0o600, suffix
        assert mode(paths.home) == 0o700
    finally:
        store.close()


def test_an_older_open_store_is_tightened(paths):
    SqliteStore(paths.store).close()
    os.chmod(paths.store, 0o644)
    stale_wal = paths.store.with_name("crow.db-wal")
    stale_wal.write_bytes(b"")  # an empty WAL left behind, as an older Crow's umask made it
    os.chmod(stale_wal, 0o644)
    store = SqliteStore(paths.store)
    try:
        store.create_session(session_id="s", cwd="/tmp", now="2026-01-01T00:00:00Z")
        for suffix in ("", "-wal", "-shm"):
            assert mode(paths.store.with_name("crow.db" + suffix)) == 0o600, suffix
    finally:
        store.close()


# ---- config.toml, permissions.toml, logs ---------------------------------------------


def test_crow_init_writes_a_private_config(paths):
    nothing = Found(ollama_url="http://localhost:11434/v1", ollama_models=None, embedded=False)
    written, _ = write_default_config(paths, found=nothing)
    assert mode(written) == 0o600 and mode(paths.home) == 0o700
    write_default_config(paths, force=True, found=nothing)
    assert mode(written) == 0o600


def test_saved_permissions_are_private_and_rewritten_whole(paths):
    file = save_permission(paths, "fs__write", "allow")
    assert mode(file) == 0o600 and mode(paths.home) == 0o700
    os.chmod(file, 0o644)
    save_permission(paths, "terminal__run", "deny")
    assert mode(file) == 0o600
    assert load_config(paths).tools.remembered == {"fs__write": "allow", "terminal__run": "deny"}
    assert sorted(p.name for p in paths.home.iterdir()) == ["permissions.toml"]


@pytest.fixture
def root_logging():
    """Undo what _setup_logging does to the root logger."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in root.handlers[:]:
        if handler not in handlers:
            root.removeHandler(handler)
            handler.close()
    root.setLevel(level)


def test_the_log_is_private_and_carries_no_credentials(paths, root_logging, capsys):
    _setup_logging(paths.logs, "WARNING")
    logging.getLogger("crow.test").warning("POST %s", "http://user:secret@host/v1")
    for handler in logging.getLogger().handlers:
        handler.flush()
    log = paths.logs / "crow.log"
    assert mode(paths.home) == 0o700 and mode(paths.logs) == 0o700 and mode(log) == 0o600
    assert "POST http://***@host/v1" in log.read_text() and "secret" not in log.read_text()
    err = capsys.readouterr().err
    assert "POST http://***@host/v1" in err and "secret" not in err


def test_an_older_open_log_is_tightened(paths, root_logging):
    paths.logs.mkdir(parents=True)
    os.chmod(paths.home, 0o755)
    (paths.logs / "crow.log").write_text("an old line\n")
    os.chmod(paths.logs / "crow.log", 0o644)
    _setup_logging(paths.logs, "CRITICAL")
    assert mode(paths.home) == 0o700 and mode(paths.logs) == 0o700
    assert mode(paths.logs / "crow.log") == 0o600
    assert (paths.logs / "crow.log").read_text().startswith("an old line\n")


def test_the_chat_history_is_private(crow_home):
    from crow.client.prompt_line import _history

    _history()
    assert mode(crow_home) == 0o700 and mode(crow_home / "history") == 0o600
