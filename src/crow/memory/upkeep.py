"""Keeping the memory table quick to search as it grows (crow.memory.store).

Past ``ANN_FROM`` memories the vectors get an approximate-nearest-neighbour
index and the scopes a bitmap index, so a search no longer reads every vector:
at 100,000 memories a flat search by meaning takes ~110 ms on two busy cores,
the indexed one ~17 ms with all of the flat search's top 20
(bench/memory_bench.py --scale).  Below it a flat search costs a few ms and is
exact, so small stores keep the labelled set's quality as it was.

The index is IVF_FLAT: vectors grouped around k-means centroids, a search
reading the ``NPROBES`` groups nearest the query with exact distances.  The
quantized kinds lost memories that stand apart from the crowd, which is what a
paraphrase query looks for (at cosine ~0.3 with MiniLM): of 47 planted memories
exact search found, IVF_HNSW_SQ found 7 (20 with ef 300), IVF_PQ 45 (47 with
refine_factor 10), IVF_FLAT 47, and it builds in ~2 s at 100,000 memories
where the others take 85-105 s.

Once ``REFRESH_EVERY_VERSIONS`` writes were made since the last upkeep (the
version it left is recorded in ``UPKEPT``, beside the lock), ``optimize`` folds
the new rows into every index (vectors, scopes, full text), merges small
fragments and drops old versions.  Rows not yet folded in are still found:
LanceDB searches them flat beside the index, and each write left a fragment a
search pays for: at 100,000 memories recall went from ~29 ms to ~38 ms over 100
fragments (bench/memory_bench.py --scale 100000 --turns 160).  Versions are
counted since the recorded one, whoever wrote them, rather than waited for a
multiple of some number: a version a writer never checks (another process's)
could skip every multiple, and the fragments piled up for good.

Folding rows in keeps the groups the index was trained with: a store indexed at
10,000 memories and grown to 100,000 would search ~100 groups of ~1,000 where a
fresh index has ~316 of ~316, reading three times the vectors for its probes
(and its centroids describe the first memories only).  So the vector index is
trained again once the table has ``RETRAIN_GROWTH`` times the rows it was built
with (recorded in ``INDEX_BUILT``, beside the lock; an index without that record,
built by an older Crow, is trained again once).

Upkeep runs off the writer's path: ``Upkeep.start`` runs it in a thread, so a
turn that remembers is never held by an index build or a compaction (seconds at
100,000 rows); a lock file lets one process at a time do it, and another that
finds it taken skips (the index the first one builds serves both).  A failure
is logged and left for the next round (``REFRESH_EVERY_VERSIONS`` writes later):
an index is a speed, never a record.  At 100,000 memories a refresh takes
~0.7 s, most of it rewriting the full-text index (LanceDB's ``optimize`` does it
all or nothing); a recall beside it shares the CPU (on two cores p50 ~35 ms, the
worst ~75 ms, against ~29 ms: --turns 160 back to back).  An agent's turns are
seconds apart, and a refresh comes every fifty writes, so few recalls meet one.
"""

from __future__ import annotations

import fcntl
import json
import logging
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

__all__ = [
    "ANN_FROM",
    "NPROBES",
    "REFRESH_EVERY_VERSIONS",
    "Upkeep",
    "has_vector_index",
    "indexed_rows",
    "upkeep",
    "upkept_version",
]

log = logging.getLogger("crow.memory")

#: Memories from which vectors are searched through an ANN index (see the docstring).
ANN_FROM = 10_000
#: The groups of the index a search reads: at 100,000 memories, 20 (LanceDB's
#: default) missed 2 of 47 planted memories, 40 none, for ~2 ms more.
NPROBES = 40
#: Every write is a new LanceDB version; this many after the last upkeep, the
#: indexes take in new rows (see the docstring).
REFRESH_EVERY_VERSIONS = 50
#: The lock file of ``upkeep``, beside the table in the memory folder.
UPKEEP_LOCK = ".upkeep.lock"
#: The vector index is trained again when the table has this many times its rows then.
RETRAIN_GROWTH = 2.0
#: How many rows the vector index was trained on (JSON), beside the lock.
INDEX_BUILT = ".vector-index.json"
#: The table version the last upkeep left (JSON), beside the lock.
UPKEPT = ".upkept.json"


def has_vector_index(table: Any) -> bool:
    return any(index.columns == ["vector"] for index in table.list_indices())


def indexed_rows(folder: Path) -> int | None:
    """How many rows the vector index was trained on (None: unknown)."""
    try:
        return int(json.loads((folder / INDEX_BUILT).read_text())["rows"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def upkept_version(folder: Path) -> int:
    """The version the last upkeep left the table at (0: none recorded)."""
    try:
        return int(json.loads((folder / UPKEPT).read_text())["version"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0


def _has_scope_index(table: Any) -> bool:
    return any(index.columns == ["scope"] for index in table.list_indices())


def upkeep(table: Any, folder: Path, ann_from: int = ANN_FROM) -> str:
    """Build the indexes a table of this size wants, fold new rows into them and
    compact; what was done ("" when another process holds the upkeep lock)."""
    from lancedb.index import Bitmap, IvfFlat  # with LanceDB (store.db)

    with open(folder / UPKEEP_LOCK, "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released when the file closes
        except BlockingIOError:
            return ""
        table.checkout_latest()
        done = []
        rows = table.count_rows()
        if rows >= ann_from:
            if not _has_scope_index(table):
                table.create_index("scope", config=Bitmap(), replace=True)
                done.append("scope index")
            if "vector" in table.schema.names:
                existed = has_vector_index(table)
                built = indexed_rows(folder) if existed else None
                if built is None or rows >= RETRAIN_GROWTH * built:
                    table.create_index(
                        "vector", config=IvfFlat(distance_type="cosine"), replace=True
                    )
                    (folder / INDEX_BUILT).write_text(json.dumps({"rows": rows}))
                    done.append("vector index trained again" if existed else "vector index")
        table.optimize(cleanup_older_than=timedelta(hours=1))
        (folder / UPKEPT).write_text(json.dumps({"version": table.version}))
        done.append("optimized")
        return ", ".join(done)


class Upkeep:
    """One upkeep at a time for a store, in a thread of its own."""

    def __init__(self, folder: Path, ann_from: int = ANN_FROM) -> None:
        self.folder = folder
        self.ann_from = ann_from
        self._thread: threading.Thread | None = None
        self._indexed = False  # seen a vector index: no need to look again
        self._started_at = 0  # the version this one last started at: a failed one waits too
        self._lock = threading.Lock()

    def due(self, table: Any) -> bool:
        """Whether a write that made this version calls for upkeep (cheap: metadata
        and a small file)."""
        version = table.version
        since = max(upkept_version(self.folder), self._started_at)
        if version - since >= REFRESH_EVERY_VERSIONS or since > version:  # (a new table)
            return True
        if self._indexed or table.count_rows() < self.ann_from:
            return False
        self._indexed = has_vector_index(table) or "vector" not in table.schema.names
        return not self._indexed

    def start(self, open_table: Callable[[], Any], table_version: int = 0) -> bool:
        """Upkeep in the background unless one is running (``table_version``: the
        version that called for it); whether one started."""
        with self._lock:
            if self.running:
                return False
            self._started_at = table_version
            self._thread = threading.Thread(
                target=self._run, args=(open_table,), name="crow-memory-upkeep", daemon=True
            )
            self._thread.start()
            return True

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def wait(self, timeout: float | None = None) -> None:
        thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def _run(self, open_table: Callable[[], Any]) -> None:
        started = time.monotonic()
        try:
            done = upkeep(open_table(), self.folder, self.ann_from)
        except Exception as exc:  # another process's commit won, a full disk: next round
            log.info("memory: index upkeep skipped: %s", exc)
        else:
            if done:
                log.debug("memory: index upkeep (%.1f s): %s", time.monotonic() - started, done)
