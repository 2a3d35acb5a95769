"""Remember's twin check past the ANN index (crow.memory.fresh): the rows the index
misses are searched in numpy while this process knows them all, and a twin is
found whoever wrote it, whatever rewrote it (a merge), and
whether this process knew the rows or read them from the table."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from crow_testing.word_hashes import WordHashes

from crow.memory.fresh import MAX_FRESH, FreshRows
from crow.memory.store import MemoryStore

ANN_FROM = 300
TESTING = Path(__file__).resolve().parents[3] / "testing"


def facts(count: int, start: int = 0) -> list[dict[str, object]]:
    return [
        {"text": f"service s{n} listens on port p{n} in rack r{n % 17}", "scope": "global"}
        for n in range(start, start + count)
    ]


@pytest.fixture
def indexed(tmp_path: Path) -> MemoryStore:
    """A store past the size of the ANN index, every row in the index."""
    store = MemoryStore(tmp_path / "memory", WordHashes(), ann_from=ANN_FROM)
    store.remember_many(facts(ANN_FROM + 20))
    store.compact()
    return store


def _known(store: MemoryStore) -> list[str] | None:
    """The fresh rows' ids this store knows now (None: not all known)."""
    fresh = store._fresh.rows(store._open())
    return None if fresh is None else fresh.ids


def test_a_twin_written_since_the_index_is_found_in_this_process(indexed):
    assert _known(indexed) == []  # the index covers every row
    first = indexed.remember("the gateway g9 answers on port q9", scope="global")
    indexed.settle()
    assert _known(indexed) == [first.id]  # committed by the journal's thread, and told
    again = indexed.remember("The gateway g9 answers on port q9!", scope="global")
    assert again.merged_into == first.id
    assert _known(indexed) == [first.id]  # the merge rewrote it: still fresh, still known
    elsewhere = indexed.remember("the gateway g9 answers on port q9", scope="project:/p")
    assert elsewhere.merged_into is None  # another scope: no twin
    indexed.forget(first.id)
    assert indexed.remember("the gateway g9 answers on port q9", scope="global").merged_into is None


def test_an_indexed_twin_is_found_while_the_fresh_rows_are_known(indexed):
    assert _known(indexed) == []
    again = indexed.remember("Service s7 listens on port p7 in rack r7.", scope="global")
    assert again.merged_into is not None
    assert again.replaced_text == "service s7 listens on port p7 in rack r7"


WRITER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    sys.path.insert(0, sys.argv[2])
    from crow.memory.store import MemoryStore
    from crow_testing.word_hashes import WordHashes
    store = MemoryStore(Path(sys.argv[1]), WordHashes(), ann_from=300)
    print(store.remember(sys.argv[3], scope="global").id)
    store.settle()
    """
)


def test_a_twin_another_process_wrote_is_read_from_the_table(indexed):
    mine = indexed.remember("the mail relay m2 keeps queues for a week", scope="global")
    indexed.settle()
    assert _known(indexed) == [mine.id]
    text = "the billing worker b4 retries failed charges twice"
    theirs = subprocess.run(
        [sys.executable, "-c", WRITER, str(indexed.folder), str(TESTING), text],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout.strip()
    assert _known(indexed) is None  # a version this store did not make
    assert indexed.remember(text + ".", scope="global").merged_into == theirs
    assert indexed.remember(
        "The mail relay m2 keeps queues for a week", scope="global"
    ).merged_into == (mine.id)


def test_a_recalled_stamp_leaves_the_table_and_the_fresh_rows_as_they_were(indexed):
    store = MemoryStore(indexed.folder, WordHashes(), ann_from=ANN_FROM)  # as a new process
    found = store.recall("service s42 listens on port p42 in rack r8", limit=3)
    target = found.hits[0].memory
    assert target.text == "service s42 listens on port p42 in rack r8"
    version = store._open().version
    store.mark_recalled([target.id])  # beside the table (crow.memory.stamps)
    assert store._open().version == version
    assert store.get(target.id).recalled is not None
    assert _known(store) == []  # the index still covers every row
    again = store.remember("Service s42 listens on port p42 in rack r8!", scope="global")
    assert again.merged_into == target.id


# ---- FreshRows alone --------------------------------------------------------------------
class Table:
    """What FreshRows reads of a LanceDB table: its version and its vector index."""

    def __init__(self, version: int, unindexed: int | None = 0) -> None:
        self.version, self.unindexed = version, unindexed

    def list_indices(self) -> list[Any]:
        if self.unindexed is None:
            return []
        return [SimpleNamespace(columns=["vector"], num_unindexed_rows=self.unindexed)]


def row(memory_id: str, scope: str = "global", seed: int = 0) -> dict[str, Any]:
    vector = np.random.default_rng(seed).normal(size=8).astype(np.float32)
    return {"id": memory_id, "scope": scope, "vector": vector / np.linalg.norm(vector)}


def test_rows_are_known_from_a_covered_version_through_this_stores_writes_only():
    fresh = FreshRows()
    assert fresh.rows(Table(5, unindexed=None)) is None  # no vector index
    assert fresh.rows(Table(5, unindexed=2)) is None  # rows nobody told here
    assert fresh.rows(Table(5)) is not None
    with fresh.writing(Table(5)):
        fresh.wrote(6, [row("mem_a"), row("mem_b", "project:/p", 1)])
    known = fresh.rows(Table(6, unindexed=2))
    assert known is not None and known.ids == ["mem_a", "mem_b"]
    assert known.nearest(row("mem_b", seed=1)["vector"], "global") is not None
    near = known.nearest(row("x", seed=1)["vector"], "project:/p")
    assert near is not None and near[0] == "mem_b" and near[1] == pytest.approx(1.0)
    fresh.wrote(6, [row("mem_c")])  # that version again: nothing committed, nothing new
    assert fresh.rows(Table(6, unindexed=2)).ids == ["mem_a", "mem_b"]  # type: ignore[union-attr]
    assert fresh.rows(Table(7, unindexed=3)) is None  # someone else's version
    fresh.wrote(8, [row("mem_d")])  # after a gap: lost
    assert fresh.rows(Table(8, unindexed=4)) is None
    assert fresh.rows(Table(9)).ids == []  # type: ignore[union-attr]  # covered again


def test_a_failed_write_or_too_many_rows_lose_them():
    fresh = FreshRows()
    fresh.rows(Table(1))
    with pytest.raises(RuntimeError), fresh.writing(Table(1)):
        raise RuntimeError("a commit that may have landed")
    assert fresh.rows(Table(1, unindexed=1)) is None
    fresh.rows(Table(2))
    fresh.wrote(3, [row(f"mem_{n}") for n in range(MAX_FRESH + 1)])
    assert fresh.rows(Table(3, unindexed=MAX_FRESH + 1)) is None
