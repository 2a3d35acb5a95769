"""The memories the ANN index does not cover yet, known in this process (crow.memory.store).

LanceDB's vector index covers the rows it was built or last optimized with
(``upkeep``, every ``REFRESH_EVERY_VERSIONS`` writes); every write since sits in a
small fragment of its own, and a search reads those flat beside the index, at
~0.1 ms a fragment on top of the search's ~5 ms (bench/memory_bench.py --scale:
remember's twin search went from ~7 to ~15 ms over 100 remembers).  So
``remember`` looks for a twin in the index alone (LanceDB's ``fast_search``) and
in the rows written since, held here in numpy.

That is right only while this process knows every row the index misses.  It
starts from a version at which the index covers every row (``list_indices``), and
keeps knowing while each later version is one of this store's own writes, which
say here what they wrote (``writing``, then ``wrote`` or ``deleted``): every
write's result names the version it made, so a version in between is someone
else's (another process, an upkeep) and the rows are unknown again (``rows`` is
None: the twin search reads the fragments as before) until the index covers
every row again.  A version that a write of this store made and has not told yet
(the journal's commit, in its thread) is waited for: well under a millisecond,
the time between LanceDB's commit and its answer.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["MAX_FRESH", "Fresh", "FreshRows"]

#: More rows than this written between two upkeeps (an import) are not held: the
#: twin search reads them from the table, as before.
MAX_FRESH = 4096
#: How long ``rows`` waits for this store's writes under way to tell their rows.
WRITES_WAIT_S = 0.05


@dataclass(frozen=True)
class Fresh:
    """The rows the index misses at one version: ids, scopes, a matrix of vectors."""

    ids: list[str]
    scopes: list[str]
    vectors: np.ndarray  # (n, d) float32, unit rows

    def nearest(self, vector: np.ndarray, scope: str) -> tuple[str, float] | None:
        """The most similar row of ``scope`` (cosine), if any."""
        if not self.ids:
            return None
        similarity = self.vectors @ np.asarray(vector, np.float32)
        mine = np.fromiter((s == scope for s in self.scopes), bool, len(self.scopes))
        if not mine.any():
            return None
        best = int(np.argmax(np.where(mine, similarity, -np.inf)))
        return self.ids[best], float(similarity[best])


class FreshRows:
    """What this store wrote since the index last covered every row (see the docstring)."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._writing = 0  # this store's writes under way
        self._version: int | None = None  # None: not known
        self._rows: dict[str, tuple[str, np.ndarray]] = {}  # id: (scope, vector)
        self._fresh: Fresh | None = None  # the rows as arrays, made when first searched

    def rows(self, table: Any) -> Fresh | None:
        """The rows the index misses at the table's latest version; None when they are
        not all known here (or the table has no vector index)."""
        version = table.version
        with self._changed:
            if self._version not in (None, version):  # ours not told yet, or another's
                self._changed.wait_for(lambda: not self._writing, WRITES_WAIT_S)
            if self._version == version:
                return self._arrays()
        return self._covered(table, version)

    def _covered(self, table: Any, version: int) -> Fresh | None:
        """No rows, known from now, if the index covers every row at ``version``."""
        if _unindexed(table) != 0 or table.version != version:  # (a write landed meanwhile)
            return None
        with self._changed:
            self._version, self._rows, self._fresh = version, {}, None
            return self._arrays()

    @contextlib.contextmanager
    def writing(self, table: Any) -> Iterator[None]:
        """Around a write of this store to ``table``, which tells ``wrote`` or
        ``deleted`` inside; one that fails may have committed: the rows
        are lost.  Rows not known yet are known from here if the index covers them all
        (a process's first write may come before its first remember)."""
        with self._changed:
            unknown = self._version is None
        if unknown:
            self._covered(table, table.version)
        with self._changed:
            self._writing += 1
        try:
            yield
        except BaseException:
            self.lost()
            raise
        finally:
            with self._changed:
                self._writing -= 1
                self._changed.notify_all()

    def wrote(self, version: int, rows: Iterable[dict[str, Any]]) -> None:
        """This store's write made ``version`` with ``rows`` (new, or rewritten: a
        rewritten row leaves the index too)."""
        with self._changed:
            if self._follows(version):
                for row in rows:
                    vector = row.get("vector")
                    if vector is None:
                        self._rows.pop(row["id"], None)  # no vector: never a twin by meaning
                    else:
                        self._rows[row["id"]] = (row["scope"], np.asarray(vector, np.float32))
                if len(self._rows) > MAX_FRESH:
                    self._lose()

    def deleted(self, version: int, ids: Iterable[str]) -> None:
        """This store's delete made ``version``."""
        with self._changed:
            if self._follows(version):
                for memory_id in ids:
                    self._rows.pop(memory_id, None)

    def lost(self) -> None:
        """A write whose rows are not told here (the table made again)."""
        with self._changed:
            self._lose()

    def _follows(self, version: int) -> bool:
        """Whether ``version`` is the next after the known one (then it is known).
        Otherwise the rows are lost, unless the write is known already (the same
        version: nothing committed; an older one: the index covered it when the rows
        were last found all known)."""
        if self._version is None or version <= self._version:
            return False
        if version != self._version + 1:
            self._lose()
            return False
        self._version, self._fresh = version, None
        return True

    def _lose(self) -> None:
        self._version, self._rows, self._fresh = None, {}, None

    def _arrays(self) -> Fresh:
        if self._fresh is None:
            ids = list(self._rows)
            scopes = [self._rows[i][0] for i in ids]
            vectors = (
                np.stack([self._rows[i][1] for i in ids]) if ids else np.zeros((0, 0), np.float32)
            )
            self._fresh = Fresh(ids, scopes, vectors)
        return self._fresh


def _unindexed(table: Any) -> int | None:
    """How many rows the vector index misses (None: there is no vector index)."""
    for index in table.list_indices():
        if index.columns == ["vector"]:
            return int(index.num_unindexed_rows)
    return None
