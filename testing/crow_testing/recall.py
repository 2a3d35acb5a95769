"""Recall quality of the memory store on the labelled set (tests/data/memory_recall.json):
hit@1 and hit@5 for paraphrased queries and for keyword queries, with timings.
Shared by tests/unit/memory/test_recall_quality.py (the floor) and
bench/memory_bench.py (the figures)."""

from __future__ import annotations

import re
import statistics
import time
from pathlib import Path
from typing import Any

from crow.memory.embedders import Embedder
from crow.memory.store import MemoryStore

ROOT = Path(__file__).resolve().parents[2]

LABELLED = ROOT / "tests" / "data" / "memory_recall.json"


def keyword_queries(data: dict[str, Any]) -> list[dict[str, str]]:
    """Each memory's first identifier-like word (digits, _ or - inside, or camelCase)."""
    out = []
    for memory in data["memories"]:
        words = re.findall(r"[\w\-./:]+", memory["text"])
        chosen = [w for w in words if len(w) > 3 and re.search(r"\d|_|-|[a-z][A-Z]", w)]
        if chosen:
            out.append({"query": chosen[0].strip("."), "expect": memory["key"]})
    return out


def evaluate(embedder: Embedder | None, folder: Path, data: dict[str, Any]) -> dict[str, Any]:
    """hit@1, hit@5 (paraphrases, and keywords) and timings for one embedder."""
    store = MemoryStore(folder, embedder, merge_threshold=0.97)
    ids: dict[str, str] = {}
    started = time.perf_counter()
    for memory in data["memories"]:
        ids[store.remember(memory["text"], tags=memory["tags"]).id] = memory["key"]
    remember_s = time.perf_counter() - started
    result = _hits(store, ids, data["queries"])
    keywords = _hits(store, ids, keyword_queries(data))
    result.update({f"keyword_{k}": v for k, v in keywords.items() if k.startswith("hit")})
    result["keyword_queries"] = keywords["queries"]
    result["remember_ms_each"] = 1000 * remember_s / len(data["memories"])
    result["memories"] = len(set(ids.values()))
    result["disk_kib"] = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) // 1024
    return result


def _hits(store: MemoryStore, ids: dict[str, str], queries: list[dict[str, str]]) -> dict[str, Any]:
    hit1 = hit5 = 0
    latencies = []
    first_similarity: list[tuple[bool, float]] = []
    for query in queries:
        started = time.perf_counter()
        found = store.recall(query["query"], limit=5)
        latencies.append(time.perf_counter() - started)
        keys = [ids.get(h.memory.id) for h in found.hits]
        hit1 += bool(keys) and keys[0] == query["expect"]
        hit5 += query["expect"] in keys
        if found.hits and found.hits[0].similarity is not None:
            first_similarity.append((keys[0] == query["expect"], found.hits[0].similarity))
    n = len(queries)
    latencies.sort()
    return {
        "hit@1": hit1 / n,
        "hit@5": hit5 / n,
        "queries": n,
        "recall_p50_ms": 1000 * statistics.median(latencies),
        "recall_p99_ms": 1000 * latencies[min(n - 1, int(0.99 * n))],
        "similarity_of_first": first_similarity,
    }
