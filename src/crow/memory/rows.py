"""The memory table's rows for the store (crow.memory.store): ids, tags, the filter of
a search (SQL for LanceDB, quoted here), a row to write, and the two searches: by
meaning (vectors) and by words (full text)."""

from __future__ import annotations

import logging
import math
import re
import secrets
from collections.abc import Iterable
from typing import Any

import numpy as np

from .records import Memory
from .scopes import valid_scope
from .upkeep import NPROBES

__all__ = [
    "COLUMNS",
    "MEMORY_ID",
    "by_meaning",
    "clean_tags",
    "fit",
    "full_text",
    "has_vector_column",
    "new_memory_id",
    "new_row",
    "normal_text",
    "quote",
    "upsert",
    "where_clause",
]

log = logging.getLogger("crow.memory")

MEMORY_ID = re.compile(r"mem_[0-9a-f]{16}")
COLUMNS = ["id", "text", "scope", "tags", "session", "message", "created", "updated", "recalled"]


def new_memory_id() -> str:
    return f"mem_{secrets.token_hex(8)}"


def clean_tags(tags: Iterable[str]) -> list[str]:
    out: list[str] = []
    for tag in tags:
        tag = str(tag).strip().lower()
        if tag and tag not in out:
            out.append(tag)
    return out


def normal_text(text: str) -> str:
    return " ".join(text.casefold().split()).rstrip(".!")


def quote(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def where_clause(scopes: Iterable[str] | None, tags: Iterable[str]) -> str:
    clauses = []
    if scopes is not None:
        chosen = [valid_scope(s) for s in scopes]
        clauses.append(f"scope IN ({', '.join(map(quote, chosen))})" if chosen else "false")
    chosen_tags = clean_tags(tags)
    if chosen_tags:
        clauses.append(f"array_has_any(tags, [{', '.join(map(quote, chosen_tags))}])")
    return " AND ".join(clauses)


def new_row(
    memory_id: str,
    text: str,
    scope: str,
    tags: Iterable[str],
    old: Memory | None,
    vector: np.ndarray | None,
    stamp: float,
) -> dict[str, Any]:
    return {
        "id": memory_id,
        "text": text,
        "scope": scope,
        "tags": clean_tags(tags),
        "session": old.session if old else "",
        "message": old.message if old else "",
        "created": stamp,
        "updated": stamp,
        "recalled": old.recalled if old else None,
        "vector": vector,
    }


def has_vector_column(table: Any) -> bool:
    return "vector" in table.schema.names


def fit(table: Any, row: dict[str, Any]) -> dict[str, Any]:
    """The row as the table's columns expect it (no vector column, no vector key)."""
    if not has_vector_column(table):
        row.pop("vector", None)
    elif row.get("vector") is not None:
        row["vector"] = np.asarray(row["vector"], dtype=np.float32)
    return row


def upsert(table: Any, rows: list[dict[str, Any]]) -> Any:
    """Write memories in one commit, each replacing the one of its id if there is one
    (a reader never sees it missing); LanceDB's result (its ``version``)."""
    import pyarrow as pa  # with LanceDB: only once memories are written (store.db)

    data = pa.Table.from_pylist([fit(table, row) for row in rows], schema=table.schema)
    merge = table.merge_insert("id").when_matched_update_all().when_not_matched_insert_all()
    return merge.execute(data)


def full_text(table: Any, query: str, where: str, limit: int) -> list[dict[str, Any]]:
    """Full-text matches; punctuation in a query is no syntax to LanceDB."""
    words = " ".join(re.findall(r"\w+", query))
    if not words:
        return []
    search = table.search(words, query_type="fts").select([*COLUMNS, "_score"])
    if where:
        search = search.where(where, prefilter=True)
    try:
        return list(search.limit(limit).to_list())
    except Exception as exc:  # an index LanceDB cannot read is no reason to fail a turn
        log.warning("memory: full-text search failed: %s", exc)
        return []


def by_meaning(
    table: Any,
    vector: np.ndarray,
    where: str,
    limit: int,
    *,
    prefilter: bool = True,
    probes: int = NPROBES,
    columns: list[str] = COLUMNS,
    indexed_only: bool = False,
) -> list[dict[str, Any]]:
    """The nearest memories by cosine, through the ANN index once there is one (rows
    not yet in it are searched flat, unless ``indexed_only``).  Memories stored
    without a vector are left out here, not by a ``vector IS NOT NULL`` filter: that
    reads every vector (~100 ms at 100,000 memories)."""
    search = table.search(vector, vector_column_name="vector").metric("cosine")
    # Not the vectors (~2 ms at 100,000); _distance named, or LanceDB warns on stderr.
    search = search.nprobes(probes).select([*columns, "_distance"])
    if indexed_only:
        search = search.fast_search()
    if where:
        search = search.where(where, prefilter=prefilter)
    rows = search.limit(limit).to_list()
    return [row for row in rows if _finite(row.get("_distance"))]


def _finite(value: Any) -> bool:
    return value is not None and math.isfinite(value)
