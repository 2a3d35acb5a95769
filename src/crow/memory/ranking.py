"""How a recall ranks memories (crow.memory.store): the two rankings, by meaning and
by words, fused by reciprocal rank, with a light boost for recent memories."""

from __future__ import annotations

import time
from typing import Any

from .records import Hit, memory_of

__all__ = ["fuse"]

#: Reciprocal rank fusion: a memory scores weight / (RRF_K + rank) in each list.
#: Tuned on tests/data/memory_recall.json (bench/memory_bench.py): meaning finds
#: paraphrases, words find identifiers and names; words weigh less, as a query
#: that shares only common words with a memory is weak evidence.
RRF_K = 10
VECTOR_WEIGHT = 1.0
TEXT_WEIGHT = 0.3
#: A memory updated today scores up to this much more than an old one (halving monthly).
RECENCY_BOOST = 0.1
RECENCY_HALF_LIFE_DAYS = 30.0


def fuse(by_meaning: list[dict[str, Any]], by_words: list[dict[str, Any]], limit: int) -> list[Hit]:
    """Reciprocal rank fusion of the two rankings, with a light boost for recent memories."""
    scores: dict[str, float] = {}
    rows: dict[str, dict[str, Any]] = {}
    similarity: dict[str, float] = {}
    bm25: dict[str, float] = {}
    lists = ((by_meaning, VECTOR_WEIGHT), (by_words, TEXT_WEIGHT))
    for ranking, weight in lists:
        for rank, row in enumerate(ranking):
            scores[row["id"]] = scores.get(row["id"], 0.0) + weight / (RRF_K + rank + 1)
            rows.setdefault(row["id"], row)
            if "_distance" in row:
                similarity[row["id"]] = 1.0 - float(row["_distance"])
            if "_score" in row:
                bm25[row["id"]] = float(row["_score"])
    best = sum(weight / (RRF_K + 1) for ranking, weight in lists if ranking) or 1.0
    now = time.time()
    hits = []
    for memory_id, score in scores.items():
        memory = memory_of(rows[memory_id])
        age_days = max(0.0, now - memory.updated) / 86400
        boost = 1.0 + RECENCY_BOOST * 0.5 ** (age_days / RECENCY_HALF_LIFE_DAYS)
        fused = score / best * boost / (1 + RECENCY_BOOST)
        hits.append(Hit(memory, fused, similarity.get(memory_id), bm25.get(memory_id)))
    hits.sort(key=lambda h: (-h.score, h.memory.id))
    return hits[:limit]
