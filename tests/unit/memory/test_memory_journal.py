"""A remember is acknowledged once its row is in the journal, before LanceDB commits
it (crow.memory.journal): what was acknowledged survives a killed process, a live
process's journal is left to it, and this process reads what it wrote."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

from crow_testing.word_hashes import WordHashes

from crow.memory import journal as journal_module
from crow.memory import store as store_module
from crow.memory.journal import JOURNALS
from crow.memory.store import MemoryStore

TESTING = Path(__file__).resolve().parents[3] / "testing"
CHILD = textwrap.dedent(
    """
    import sys, threading
    from pathlib import Path
    sys.path.insert(0, sys.argv[3])
    from crow.memory.store import MemoryStore
    from crow_testing.word_hashes import WordHashes
    store = MemoryStore(Path(sys.argv[1]), WordHashes())
    store.remember("made before the others, committed", scope="global")
    store.settle()
    if sys.argv[2] == "stuck":  # LanceDB never commits: the rows are in the journal alone
        store._journal._commit = lambda rows: threading.Event().wait()
    for n in range(20):
        said = store.remember(f"deploy key k{n} rotates every {n} days", scope="global")
        print(said.id, flush=True)
    print("done", flush=True)
    threading.Event().wait()
    """
)


def _killed_after_remembering(folder: Path, mode: str) -> tuple[list[str], subprocess.Popen[str]]:
    """A process that remembered 20 memories, acknowledged, then was killed (SIGKILL);
    the ids it was given."""
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(folder), mode, str(TESTING)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ},
    )
    assert child.stdout is not None
    ids = []
    for line in child.stdout:
        if line.strip() == "done":
            break
        ids.append(line.strip())
    else:
        raise AssertionError(child.stderr.read() if child.stderr else "no output")
    return ids, child


def _kill(child: subprocess.Popen[str]) -> None:
    child.send_signal(signal.SIGKILL)
    child.communicate(timeout=30)  # and closes its pipes
    assert child.returncode == -signal.SIGKILL


def test_what_a_killed_process_acknowledged_is_recovered(tmp_path):
    folder = tmp_path / "memory"
    ids, child = _killed_after_remembering(folder, "stuck")
    assert len(ids) == 20
    assert MemoryStore(folder, None, ann_from=10**9)._open(drain=False) is not None
    _kill(child)
    assert list((folder / JOURNALS).glob("*.jsonl")), "the rows were only in the journal"
    store = MemoryStore(folder, WordHashes())
    kept = {memory.id: memory.text for memory in store.all()}
    assert set(ids) <= set(kept) and len(kept) == 21
    assert kept[ids[7]] == "deploy key k7 rotates every 7 days"
    found = store.recall("deploy key k7 rotates every 7 days", limit=1)
    assert found.mode == "hybrid" and found.hits[0].memory.id == ids[7]
    assert found.hits[0].similarity is not None and found.hits[0].similarity > 0.99  # its vector
    assert not list((folder / JOURNALS).glob("*.jsonl"))  # taken in, then deleted
    assert len(MemoryStore(folder, WordHashes()).all()) == 21  # and not taken in twice


def test_a_process_killed_while_it_commits_loses_nothing(tmp_path):
    folder = tmp_path / "memory"
    ids, child = _killed_after_remembering(folder, "commits")
    _kill(child)
    kept = {memory.id for memory in MemoryStore(folder, WordHashes()).all()}
    assert set(ids) <= kept and len(kept) == 21


def test_a_live_process_keeps_its_journal_and_a_cut_line_is_skipped(tmp_path, monkeypatch):
    monkeypatch.setattr(store_module, "RECOVER_EVERY_S", 0.0)  # look at every read
    folder = tmp_path / "memory"
    ids, child = _killed_after_remembering(folder, "stuck")
    try:
        other = MemoryStore(folder, WordHashes())
        assert len(other.all()) == 1  # the child lives: its rows are its own to commit
        [journal] = (folder / JOURNALS).glob("*.jsonl")
    finally:
        _kill(child)
    with open(journal, "ab") as file:
        file.write(b'{"id":"mem_00000000000000ff","text":"cut sh')  # a crash mid-line
    kept = {memory.id for memory in other.all()}  # the store open all along takes them in
    assert set(ids) <= kept and len(kept) == 21 and "mem_00000000000000ff" not in kept


def test_this_process_reads_what_it_remembered_and_merges_a_waiting_twin(tmp_path, monkeypatch):
    commit = MemoryStore._commit
    started = threading.Event()

    def slow(self, rows):
        started.set()
        time.sleep(0.3)  # the journal holds the rows meanwhile
        commit(self, rows)

    monkeypatch.setattr(MemoryStore, "_commit", slow)
    folder = tmp_path / "memory"
    store = MemoryStore(folder, WordHashes())
    first = store.remember("the staging database lives in rack r7", scope="global")
    assert started.wait(5)
    again = store.remember("The staging database lives in rack r7.", scope="global")
    assert again.merged_into == first.id  # its twin was still waiting in the journal
    second = store.remember("the mail relay answers on port 2525", scope="global")
    elsewhere = MemoryStore(folder, WordHashes())  # another store of this process
    found = elsewhere.recall("mail relay port 2525", limit=1)
    assert found.hits and found.hits[0].memory.id == second.id
    assert len(elsewhere.all()) == 2


def test_a_burst_of_remembers_is_one_commit_and_a_read_does_not_wait_for_more(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(journal_module, "COMMIT_AFTER_S", 3600.0)  # only a read commits
    store = MemoryStore(tmp_path / "memory", WordHashes())
    store.remember("the first memory makes the table", scope="global")
    store.settle()
    version = store._open().version
    ids = [
        store.remember(f"deploy key k{n} rotates every {n} days", scope="global").id
        for n in range(5)
    ]
    assert store._open(drain=False).count_rows() == 1  # acknowledged: in the journal
    assert {memory.id for memory in store.all()} >= set(ids)  # a read commits them, at once
    assert store._open().version == version + 1  # in one commit
