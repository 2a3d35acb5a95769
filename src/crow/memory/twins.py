"""Remember's search for a twin (crow.memory.store): a memory of the same scope that
says the same, merged into instead of piling up beside it.

Said the same: a cosine at ``threshold`` or above ([memory] merge_threshold), or,
without vectors, the same text once normalised.  Memories still waiting in the
journal are looked at first (``waiting_twin``, in numpy), then the table's
(``stored_twin``).

In the table, the nearest few of any scope are searched and filtered after: a
filter before the search costs a pass over every scope, and a twin is among the
nearest.  A twin sits in the new memory's group of the ANN index or one beside
it, so ``TWIN_PROBES`` groups do, at ~8 ms less than a recall's 40.  Only the
ids are read (~2 ms less at 100,000 memories); a twin's row is read after.  The
rows the index misses are searched in numpy when this process knows them all
(``fresh``), else read from the table's fragments beside the index.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .fresh import FreshRows
from .records import Memory, memory_of
from .rows import by_meaning, full_text, normal_text, quote

__all__ = ["TWIN_DEPTH", "TWIN_PROBES", "stored_twin", "waiting_twin"]

#: How many nearest memories of any scope are looked through for a twin.
TWIN_DEPTH = 8
#: The groups of the ANN index the twin search reads (see the docstring).
TWIN_PROBES = 4


def waiting_twin(
    rows: list[dict[str, Any]],
    text: str,
    vector: np.ndarray | None,
    scope: str,
    threshold: float,
) -> Memory | None:
    """The twin among memories waiting in the journal, newest first."""
    wanted = normal_text(text)
    for row in reversed(rows):
        if row["scope"] != scope:
            continue
        other = row.get("vector")
        if vector is not None and other is not None and float(np.dot(vector, other)) >= threshold:
            return memory_of(row)
        if normal_text(row["text"]) == wanted:
            return memory_of(row)
    return None


def stored_twin(
    table: Any,
    text: str,
    vector: np.ndarray | None,
    scope: str,
    threshold: float,
    fresh: FreshRows,
    read: Callable[[str], Memory | None],
) -> Memory | None:
    """The twin in the table; ``read`` gives a memory by id."""
    where = f"scope = {quote(scope)}"
    if vector is not None:
        for memory_id in _nearest(table, vector, where, scope, threshold, fresh):
            twin = read(memory_id)
            if twin is not None:  # (None: forgotten by another process meanwhile)
                return twin
        if threshold < 0.99:
            return None  # the same text's vector is the same: found above, at similarity 1
    wanted = normal_text(text)
    for row in full_text(table, text, where, 10):
        if normal_text(row["text"]) == wanted:
            return memory_of(row)
    return None


def _nearest(
    table: Any, vector: np.ndarray, where: str, scope: str, threshold: float, fresh: FreshRows
) -> list[str]:
    """The ids of the memories of ``scope`` nearest ``vector`` at ``threshold`` or
    above, nearest first (two at most: the index's and the fresh rows')."""
    rows_since = fresh.rows(table)
    rows = by_meaning(
        table,
        vector,
        where,
        TWIN_DEPTH,
        prefilter=False,
        probes=TWIN_PROBES,
        columns=["id"],
        indexed_only=rows_since is not None,
    )
    found = [(1.0 - rows[0]["_distance"], rows[0]["id"])] if rows else []
    nearest = None if rows_since is None else rows_since.nearest(vector, scope)
    if nearest is not None:
        found.append((nearest[1], nearest[0]))
    found.sort(reverse=True)
    return [memory_id for similarity, memory_id in found if similarity >= threshold]
