"""When memories were last recalled, kept beside the table (crow.memory.store).

Every turn that recalls stamps the memories it gave the model.  Stamped in the
LanceDB table, each stamp rewrote its rows (LanceDB's update is a delete and an
add): a fragment per turn that every search read flat until the next upkeep,
and a stamp committed while the upkeep compacted made the compaction fail (both
rewrote the same rows), so fragments piled up.  At 100,000 memories, through
agent-like turns, recall went from p50 ~35 ms to ~50 ms and p99 ~90 ms
(bench/memory_bench.py --scale 100000 --turns 160).

So the stamps live in a small SQLite file beside the table (``STAMPS``): a stamp
is one upsert, readable at once by every process sharing the folder, and the
table changes only when memories do.  SQLite is the tool made for small keyed
writes from several processes; a second LanceDB table would be a fragment per
stamp again.  WAL with ``synchronous=NORMAL``: no flush to disk per stamp,
which a power cut may lose; a stamp says when a memory was last useful, not
what it says.  The table's own ``recalled`` column keeps the stamps of older
Crows: the later of the two is the memory's (``overlay``), and ``reindex``
writes that back.

A stamp that cannot be written (a locked or full disk) is logged and lost, as it
was before: never a reason to fail a turn.
"""

from __future__ import annotations

import dataclasses
import logging
import sqlite3
import threading
import weakref
from collections.abc import Iterable
from pathlib import Path

from .records import Memory

__all__ = ["STAMPS", "RecallStamps"]

log = logging.getLogger("crow.memory")

#: The stamps' file, beside the table in the memory folder.
STAMPS = "recalled.sqlite3"
#: How long a stamp waits for another process's write to the file.
BUSY_TIMEOUT_S = 2.0
#: Ids per query (SQLite's limit on host parameters is 32,766; far more than a recall's).
CHUNK = 500


class RecallStamps:
    """The recalled stamps of the memories under ``folder`` (see the docstring)."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / STAMPS
        self._db: sqlite3.Connection | None = None
        self._lock = threading.Lock()  # one connection, used from the callers' threads

    def stamp(self, ids: Iterable[str], at: float) -> None:
        """Memories recalled at ``at`` (best effort: see the docstring)."""
        rows = [(memory_id, at) for memory_id in ids]
        if not rows:
            return
        try:
            with self._lock, self._connected() as db:
                db.executemany(
                    "INSERT INTO recalled (id, at) VALUES (?, ?) "
                    "ON CONFLICT (id) DO UPDATE SET at = max(at, excluded.at)",
                    rows,
                )
        except sqlite3.Error as exc:
            log.debug("memory: recalled stamp lost: %s", exc)

    def overlay(self, memories: list[Memory]) -> list[Memory]:
        """``memories`` with the later of their own stamp and the one kept here."""
        if not memories or not self.path.exists():  # nothing ever stamped here
            return memories
        stamps = self._read([memory.id for memory in memories])
        return [_stamped(memory, stamps.get(memory.id)) for memory in memories]

    def forget(self, ids: Iterable[str]) -> None:
        """Drop the stamps of forgotten memories."""
        ids = list(ids)
        if not ids or not self.path.exists():
            return
        try:
            with self._lock, self._connected() as db:
                db.executemany("DELETE FROM recalled WHERE id = ?", [(i,) for i in ids])
        except sqlite3.Error as exc:
            log.debug("memory: a forgotten memory's stamp stays: %s", exc)

    def _read(self, ids: list[str]) -> dict[str, float]:
        found: dict[str, float] = {}
        try:
            with self._lock:
                db = self._connected()
                for start in range(0, len(ids), CHUNK):
                    chunk = ids[start : start + CHUNK]
                    marks = ", ".join("?" * len(chunk))
                    query = f"SELECT id, at FROM recalled WHERE id IN ({marks})"
                    found.update(db.execute(query, chunk).fetchall())
        except sqlite3.Error as exc:
            log.debug("memory: recalled stamps unreadable: %s", exc)
        return found

    def _connected(self) -> sqlite3.Connection:
        """The connection, opened (and the file made) on first use; under ``_lock``."""
        if self._db is None:
            db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, check_same_thread=False)
            try:
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=NORMAL")
                db.execute(
                    "CREATE TABLE IF NOT EXISTS recalled (id TEXT PRIMARY KEY, at REAL NOT NULL)"
                )
            except sqlite3.Error:
                db.close()
                raise
            self._db = db
            weakref.finalize(self, db.close)  # the store has no close: closed with it
        return self._db


def _stamped(memory: Memory, at: float | None) -> Memory:
    if at is None or (memory.recalled is not None and memory.recalled >= at):
        return memory
    return dataclasses.replace(memory, recalled=at)
