"""The memory store as it grows: the ANN index built past a size (made small here),
rows written after it still found, batches written in one commit, and index upkeep
by two processes at once.  The figures at 100,000 memories are bench/memory_bench.py
--scale's."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from crow_testing.word_hashes import WordHashes

from crow.memory.scopes import MemoryError
from crow.memory.store import MemoryStore
from crow.memory.upkeep import INDEX_BUILT, has_vector_index, indexed_rows

ANN_FROM = 300


def facts(count: int, start: int = 0) -> list[dict[str, object]]:
    return [
        {"text": f"service s{n} listens on port p{n} in rack r{n % 17}", "scope": "global"}
        for n in range(start, start + count)
    ]


@pytest.fixture
def grown(tmp_path: Path) -> MemoryStore:
    store = MemoryStore(tmp_path / "memory", WordHashes(), ann_from=ANN_FROM)
    for start in range(0, ANN_FROM + 20, 160):
        store.remember_many(facts(160, start))
    store.settle()  # the upkeep the last batch started, in the background
    return store


def test_past_the_size_an_ann_index_is_built_and_later_rows_are_still_found(grown):
    table = grown._open()
    assert has_vector_index(table)
    assert {index.columns[0] for index in table.list_indices()} == {"vector", "scope", "text"}
    found = grown.recall("service s123 listens on port p123", limit=3)
    assert found.mode == "hybrid" and found.hits[0].memory.text.startswith("service s123 ")
    added = grown.remember("the gateway g9 answers on port q9", scope="project:/srv")
    assert not grown.indexing  # one write past the index starts no upkeep
    found = grown.recall("gateway g9 answers on port q9", limit=3)
    assert found.hits[0].memory.id == added.id  # not in the index yet: searched flat
    assert grown.recall("gateway g9 answers", scopes=["global"], limit=3).hits[0].memory.id != (
        added.id
    )


def test_below_the_size_no_ann_index_is_built(tmp_path):
    store = MemoryStore(tmp_path / "memory", WordHashes(), ann_from=ANN_FROM)
    store.remember_many(facts(ANN_FROM - 1))
    assert store.compact() == "optimized"
    assert not has_vector_index(store._open())


def test_a_batch_is_one_commit_and_names_what_it_cannot_take(tmp_path):
    store = MemoryStore(tmp_path / "memory", WordHashes(), max_text_bytes=100)
    store.remember("service s1 listens on port p1 in rack r1", scope="global")
    version = store._open().version
    items = [
        *facts(3, 10),
        {"text": "   ", "scope": "global"},
        {"text": "x " * 100, "scope": "global"},
        {"text": "Service s1  listens on port p1 in rack r1.", "scope": "global"},
        {"text": "kept in a project", "scope": "project:/p", "tags": ["a"]},
        {"text": "bad scope", "scope": "nowhere"},
    ]
    answers = store.remember_many(items)
    assert store._open().version == version + 1
    errors = [str(a) for a in answers if isinstance(a, MemoryError)]
    assert len(errors) == 3 and "nothing to remember" in errors[0] and "limit" in errors[1]
    merged = answers[5]
    assert not isinstance(merged, MemoryError) and merged.merged_into is not None
    assert merged.replaced_text == "service s1 listens on port p1 in rack r1"
    assert len(store.all()) == 5  # 1 + 3 new + the project one; the repeat merged


def test_an_id_given_again_replaces_its_memory(tmp_path):
    store = MemoryStore(tmp_path / "memory", None)
    [first] = store.remember_many([{"text": "old words", "memory_id": "mem_00000000000000aa"}])
    assert not isinstance(first, MemoryError) and first.id == "mem_00000000000000aa"
    [again] = store.remember_many([{"text": "new words", "memory_id": "mem_00000000000000aa"}])
    assert not isinstance(again, MemoryError) and again.replaced_text == "old words"
    assert [m.text for m in store.all()] == ["new words"]


UPKEEP = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from crow.memory.store import MemoryStore
    store = MemoryStore(Path(sys.argv[1]), None, ann_from=int(sys.argv[2]))
    if sys.argv[3] == "index":
        print(store.compact() or "skipped: another process held the lock")
    else:
        for n in range(30):
            store.remember(f"written during the upkeep, number {n}", scope="global")
        store.settle()
        print("wrote 30")
    """
)


def test_two_processes_indexing_while_a_third_writes_lose_nothing(tmp_path):
    folder = tmp_path / "memory"
    store = MemoryStore(folder, WordHashes(), ann_from=10**9)  # no index yet
    store.remember_many(facts(ANN_FROM + 40))
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", UPKEEP, str(folder), str(ANN_FROM), what],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for what in ("index", "index", "write")
    ]
    said = []
    for run in runs:
        out, err = run.communicate(timeout=240)
        assert run.returncode == 0, err
        said.append(out.strip())
    assert said[2] == "wrote 30"  # its writes past the size may have built the index itself
    table = MemoryStore(folder, None)._open()
    assert sum(index.columns == ["vector"] for index in table.list_indices()) == 1
    assert table.count_rows() == ANN_FROM + 40 + 30


def test_the_vector_index_is_trained_again_once_the_table_doubles(grown):
    folder = grown.folder
    assert indexed_rows(folder) == ANN_FROM + 20  # built once past the size, recorded
    grown.remember_many(facts(ANN_FROM - 40, 1000))  # 1.86x the rows it was built with
    assert "trained again" not in grown.compact()
    assert indexed_rows(folder) == ANN_FROM + 20
    grown.remember_many(facts(60, 2000))  # 2.05x
    assert "vector index trained again" in grown.compact()
    assert indexed_rows(folder) == 2 * ANN_FROM + 40
    assert has_vector_index(grown._open())
    found = grown.recall("service s2033 listens on port p2033", limit=1)
    assert found.hits[0].memory.text.startswith("service s2033 ")


def test_an_index_of_unknown_size_is_trained_again_once(grown):
    (grown.folder / INDEX_BUILT).unlink()  # built by a Crow that did not record it
    assert "vector index trained again" in grown.compact()
    assert indexed_rows(grown.folder) == ANN_FROM + 20
    assert "trained again" not in grown.compact()
