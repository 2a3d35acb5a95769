"""crow store copy: sessions move between SQLite and PostgreSQL whole."""

from __future__ import annotations

import subprocess
import sys

from crow.store.copy import copy_sessions
from crow.store.db import PostgresStore, SqliteStore, Store
from crow.store.migrations import MIGRATIONS


def _fill(store: Store) -> None:
    store.create_session(session_id="a", cwd="/p", now="t0", config={"model": "m"})
    store.append_update("a", b'{"sessionUpdate":"user_message"}')
    store.append_update("a", b'{"sessionUpdate":"state_update","state":"idle"}', state="idle")
    store.append_message("a", {"role": "user", "content": "old"})
    store.append_message("a", {"role": "user", "content": "summary"}, kind="summary")
    store.append_message("a", {"role": "assistant", "content": "after \ud800"})
    store.update_session("a", title="first", updated_at="t5")
    store.create_session(session_id="b", cwd="/q", now="t1", additional_directories=["/r"])


def _everything(store: Store, sid: str) -> tuple:
    record = store.get_session(sid)
    assert record is not None
    rows = store.transcript_rows(sid)
    fields = (record.cwd, record.title, record.created_at, record.updated_at, record.state)
    return (
        fields,
        record.config,
        record.additional_directories,
        list(store.updates(sid)),
        [tuple(r) for r in rows],
    )


def test_sessions_go_to_postgres_and_back_unchanged(tmp_path, postgres_url):
    source = SqliteStore(tmp_path / "a.db")
    _fill(source)
    target = PostgresStore(postgres_url)
    assert copy_sessions(source, target) == (2, 0)
    assert copy_sessions(source, target) == (0, 2)  # again: nothing new
    back = SqliteStore(tmp_path / "b.db")
    assert copy_sessions(target, back) == (2, 0)
    for sid in ("a", "b"):
        assert _everything(source, sid) == _everything(target, sid) == _everything(back, sid)
    assert [e.message["content"] for e in back.transcript("a")] == ["summary", "after \ud800"]
    for store in (source, target, back):
        store.close()


def test_the_command_copies_and_migrates(tmp_path, postgres_url):
    source = SqliteStore(tmp_path / "a.db")
    _fill(source)
    source.close()
    crow = [sys.executable, "-m", "crow", "store"]
    done = subprocess.run(
        [*crow, "copy", "--from", str(tmp_path / "a.db"), "--to", postgres_url],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "copied 2 sessions, 0 already there\n"
    migrated = subprocess.run(
        [*crow, "migrate", "--store", postgres_url], capture_output=True, text=True, timeout=60
    )
    assert migrated.returncode == 0
    assert f"schema version {len(MIGRATIONS)}, up to date" in migrated.stdout
    bad = subprocess.run(
        [*crow, "migrate", "--store", "postgresql://crow:pw@127.0.0.1:1/x"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and bad.stderr.startswith("crow store: cannot reach")
    assert ":pw@" not in bad.stderr
