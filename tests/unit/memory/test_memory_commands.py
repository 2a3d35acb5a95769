"""``crow memory`` pieces that need no process: markdown split into memories, times."""

from __future__ import annotations

import pytest

from crow.memory import upkeep
from crow.memory.importing import split_markdown
from crow.memory.importing import stamp as _stamp
from crow.memory.store import Memory, MemoryStore


@pytest.mark.parametrize(
    ("markdown", "expected"),
    [
        ("", []),
        ("One paragraph\nwrapped.\n", [("One paragraph wrapped.", [])]),
        ("- a\n- b\n", [("a", []), ("b", [])]),
        ("1. first\n2) second\n", [("first", []), ("second", [])]),
        (
            "# Testing Rules\n- Run pytest -n 2\n  on two cores\n\n## Style\nUse ruff.\n",
            [("Run pytest -n 2 on two cores", ["testing-rules"]), ("Use ruff.", ["style"])],
        ),
        (
            "Build with:\n```\n# not a heading\n- not an item\n```\n",
            [("Build with: ``` # not a heading - not an item ```", [])],
        ),
    ],
)
def test_markdown_splits_into_items_tagged_by_heading(markdown, expected):
    assert split_markdown(markdown) == expected


def test_exported_times_come_back_as_they_were():
    memory = Memory(id="mem_0123456789abcdef", text="x", scope="global", created=1796230425.0)
    assert _stamp(memory.to_dict()["created"]) == 1796230425.0
    assert _stamp("yesterday") is None and _stamp(None) is None


def test_many_writes_are_compacted_now_and_then(tmp_path, monkeypatch):
    monkeypatch.setattr(upkeep, "REFRESH_EVERY_VERSIONS", 5)
    store = MemoryStore(tmp_path, None)
    for n in range(12):
        store.remember(f"fact {n} about compaction")
        store.settle()  # upkeep runs in the background
    fragments = store._open().stats()["fragment_stats"]["num_fragments"]
    assert fragments < 12  # one per write, had nothing merged them
    assert len(store.list_memories(limit=100)) == 12
    assert store.recall("fact 7 compaction").hits[0].memory.text == "fact 7 about compaction"


def _counting_upkeeps(monkeypatch: pytest.MonkeyPatch, fail: bool = False) -> list[int]:
    runs: list[int] = []
    real = upkeep.upkeep

    def counted(table, folder, ann_from=upkeep.ANN_FROM):
        runs.append(table.version)
        if fail:
            raise RuntimeError("Retryable commit conflict")
        return real(table, folder, ann_from)

    monkeypatch.setattr(upkeep, "upkeep", counted)
    return runs


def test_upkeep_comes_due_by_versions_since_the_last_whatever_wrote_them(tmp_path, monkeypatch):
    # Forgets and merges make versions too.  Due at a version that is a multiple of
    # the setting, a writer whose own versions never land on one (here: remembers
    # at odd versions, forgets between them) never started an upkeep.
    monkeypatch.setattr(upkeep, "REFRESH_EVERY_VERSIONS", 4)
    runs = _counting_upkeeps(monkeypatch)
    store = MemoryStore(tmp_path, None)
    store.remember("the first fact")
    store.settle()
    store.compact()
    if store._open().version % 2 == 1:
        store.remember("a fact that puts the remembers at odd versions")
        store.settle()
    runs.clear()
    for n in range(12):
        added = store.remember(f"fact {n} about upkeep")
        store.settle()
        store.forget(added.id)
        store.settle()
    assert len(runs) >= 4  # 24 versions, 4 apart
    assert store._open().stats()["fragment_stats"]["num_fragments"] <= 6


def test_a_failed_upkeep_waits_for_as_many_writes_again(tmp_path, monkeypatch):
    monkeypatch.setattr(upkeep, "REFRESH_EVERY_VERSIONS", 4)
    runs = _counting_upkeeps(monkeypatch, fail=True)
    store = MemoryStore(tmp_path, None)
    for n in range(11):
        store.remember(f"fact {n} about a failing upkeep")
        store.settle()
    assert 2 <= len(runs) <= 3  # every 4th write or so, not every write after the 4th
    assert runs == sorted(set(runs))


def test_a_table_made_again_counts_from_its_own_versions(tmp_path, monkeypatch):
    monkeypatch.setattr(upkeep, "REFRESH_EVERY_VERSIONS", 4)
    store = MemoryStore(tmp_path, None)
    store.remember("a fact before the record")
    store.settle()
    (tmp_path / upkeep.UPKEPT).write_text('{"version": 1000000}')  # a dropped table's
    runs = _counting_upkeeps(monkeypatch)
    store.remember("a fact after it")
    store.settle()
    assert runs  # a record past the table's version is another table's: upkeep now
