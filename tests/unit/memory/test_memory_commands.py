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
