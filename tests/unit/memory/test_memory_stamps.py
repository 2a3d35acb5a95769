"""When memories were last recalled (crow.memory.stamps): kept beside the table, so a
recall never rewrites rows; seen by every process sharing the folder; the later of
an older Crow's stamp in the table and the file's; never a reason to fail a turn."""

from __future__ import annotations

import logging
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from crow.memory import stamps
from crow.memory.stamps import STAMPS
from crow.memory.store import MemoryStore


@pytest.fixture
def store(tmp_path: Path) -> MemoryStore:
    return MemoryStore(tmp_path / "memory", None)


def test_a_stamp_makes_no_version_of_the_table(store):
    memory_id = store.remember("the staging host is staging-3").id
    table = store._open()
    version = table.version
    store.mark_recalled([memory_id])
    assert table.version == version  # no rewritten rows: no fragment for recall to read
    assert store.get(memory_id).recalled is not None


def test_every_way_a_memory_is_read_carries_its_stamp(store):
    memory_id = store.remember("the staging host is staging-3").id
    other_id = store.remember("the user prefers short answers").id
    before = time.time()
    store.mark_recalled([memory_id])
    assert store.get(memory_id).recalled >= before
    assert {m.id: m.recalled is not None for m in store.all()} == {memory_id: True, other_id: False}
    (hit,) = store.recall("staging host", limit=1).hits
    assert hit.memory.id == memory_id and hit.memory.recalled >= before
    exported = {m["id"]: m["recalled"] for m in store.export()}
    assert exported[memory_id] is not None and exported[other_id] is None


def test_another_process_sees_a_stamp_at_once(store):
    memory_id = store.remember("the staging host is staging-3").id
    store.settle()
    script = textwrap.dedent(
        f"""
        from pathlib import Path
        from crow.memory.store import MemoryStore
        MemoryStore(Path({str(store.folder)!r}), None).mark_recalled([{memory_id!r}])
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    assert store.get(memory_id).recalled is not None


def test_the_later_of_the_tables_stamp_and_the_files_stands(store):
    old, new = (store.remember(text).id for text in ("an old fact", "a newer fact"))
    store.settle()
    table = store._open()
    table.update(where=f"id = '{old}'", values={"recalled": 1000.0})  # as an older Crow did
    table.update(where=f"id = '{new}'", values={"recalled": 2000.0})
    store._stamps.stamp([old, new], 1500.0)
    assert store.get(old).recalled == 1500.0
    assert store.get(new).recalled == 2000.0
    store.reindex()  # writes what it read: the later stamps, into the table
    assert store.get(old).recalled == 1500.0
    assert {row["id"]: row["recalled"] for row in store._open().to_arrow().to_pylist()} == {
        old: 1500.0,
        new: 2000.0,
    }


def test_forgetting_a_memory_drops_its_stamp(store):
    memory_id = store.remember("the staging host is staging-3").id
    store.mark_recalled([memory_id])
    store.forget(memory_id)
    with sqlite3.connect(store.folder / STAMPS) as db:
        assert db.execute("SELECT count(*) FROM recalled").fetchone() == (0,)


def test_a_stamp_that_cannot_be_written_is_lost_and_the_turn_goes_on(store, monkeypatch, caplog):
    memory_id = store.remember("the staging host is staging-3").id
    store.mark_recalled([memory_id])
    first = store.get(memory_id).recalled
    monkeypatch.setattr(stamps, "BUSY_TIMEOUT_S", 0.1)
    held = sqlite3.connect(store.folder / STAMPS, isolation_level=None)
    held.execute("BEGIN EXCLUSIVE")  # another process writing, for longer than a stamp waits
    fresh = MemoryStore(store.folder, None)  # opens its connection with the short timeout
    with caplog.at_level(logging.DEBUG, logger="crow.memory"):
        fresh.mark_recalled([memory_id])
    assert "recalled stamp lost" in caplog.text
    assert fresh.get(memory_id).recalled == first  # readers go on beside a writer (WAL)
    held.rollback()
    held.close()
    fresh.mark_recalled([memory_id])
    assert fresh.get(memory_id).recalled > first


def test_a_store_nobody_recalled_from_makes_no_stamps_file(store):
    store.remember("the staging host is staging-3")
    store.all()
    assert not (store.folder / STAMPS).exists()
