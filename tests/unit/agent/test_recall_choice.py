"""Which recalled memories a turn gets: by meaning above the threshold; by words
(no vectors) within half of the best word match, whatever BM25's scale."""

from __future__ import annotations

import pytest

from crow.agent.memory import _relevant
from crow.memory.store import Hit, Memory


def hit(name: str, similarity: float | None = None, text: float | None = None) -> Hit:
    return Hit(Memory(id=name, text=name, scope="global"), 1.0, similarity, text)


@pytest.mark.parametrize(
    ("hits", "kept"),
    [
        ([hit("a", 0.5), hit("b", 0.29)], ["a"]),
        ([hit("a", text=0.86)], ["a"]),  # a one-memory store: a low score, still the best
        ([hit("a", text=8.6), hit("b", text=4.3), hit("c", text=1.2)], ["a", "b"]),
        ([hit("a", 0.1, text=9.0), hit("b", text=5.0)], ["b"]),  # meaning decides if known
        ([], []),
    ],
)
def test_relevant(hits, kept):
    assert [h.memory.id for h in _relevant(hits, 0.3)] == kept
