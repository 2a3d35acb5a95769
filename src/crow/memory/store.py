"""The memory store: one LanceDB table of memories, searched by meaning and by words.

A memory has an id, its text, a scope (``global``, ``project:<root>``,
``session:<id>``), tags, where it came from (session, message) and times:
created, updated, last recalled.  Vectors sit beside the text with a full-text
index; a search fuses the two rankings by reciprocal rank, with a light boost
for recent memories.

The table records the embedder that made its vectors (its schema's metadata).
A store opened with another embedder searches by text only and says so, until
``reindex`` embeds every memory again; vectors of two embedders are never
compared.  When no embedder answers, memory still works on full text.

Several processes may share one store: LanceDB commits are atomic and the
connection re-reads the latest version on every read, so reads see what others
committed.  A commit that raced another process's is refused ("commit
conflict"): a write is then done again from its read, and making the table takes
a lock (``commits``); a write that still cannot land is a ``MemoryError`` naming
the cause, never a lost record.  Everything here blocks: async callers run it
in a thread.

What it hands out is in ``records``; the rows, their SQL filters and the two
searches in ``rows``; the fusion of the two rankings in ``ranking``; the indexes
kept current as the table grows (an ANN index past ``upkeep.ANN_FROM`` memories) in
``upkeep``; the new memories acknowledged before LanceDB commits them in
``journal``; remember's search for a twin in ``twins``, and the rows the index
misses, which it reads from memory, in ``fresh``; when memories were last
recalled, in ``stamps`` (a file beside the table, so that a recall never rewrites
rows).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from ..private import private_dir
from . import TABLE, has_memories
from .commits import making_table, retrying
from .embedders import Embedder, EmbedderUnavailable
from .fresh import FreshRows
from .journal import Journal, existing_journal, journal_for, recover
from .ranking import fuse
from .records import Hit, Memory, Recall, Remembered, memory_of
from .rows import (
    COLUMNS,
    MEMORY_ID,
    by_meaning,
    clean_tags,
    fit,
    full_text,
    has_vector_column,
    new_memory_id,
    new_row,
    normal_text,
    quote,
    upsert,
    where_clause,
)
from .scopes import MemoryError, valid_scope
from .stamps import RecallStamps
from .twins import stored_twin, waiting_twin
from .upkeep import ANN_FROM, INDEX_BUILT, UPKEPT, Upkeep, upkeep

__all__ = ["Hit", "Memory", "MemoryStore", "Recall", "Remembered"]

log = logging.getLogger("crow.memory")

EMBEDDER_KEY = b"crow.embedder"
#: How often a store looks for journals left by processes that died (crow.memory.journal).
RECOVER_EVERY_S = 5.0
#: The longest memory kept, unless the store is told otherwise ([memory] max_text_kib).
MAX_TEXT_BYTES = 16 * 1024


@dataclass
class _Vectors:
    """Whether this store can search by meaning now, and if not, why."""

    usable: bool
    reason: str | None = None


class MemoryStore:
    """The memories under ``folder``, embedded by ``embedder`` (None: text only)."""

    def __init__(
        self,
        folder: Path,
        embedder: Embedder | None,
        *,
        merge_threshold: float = 0.9,
        max_text_bytes: int = MAX_TEXT_BYTES,
        ann_from: int = ANN_FROM,
    ) -> None:
        self.folder = folder
        self.embedder = embedder
        self.merge_threshold = merge_threshold
        self.max_text_bytes = max_text_bytes
        self._db: Any | None = None
        self._lock = threading.Lock()  # one read-modify-write at a time in this process
        self._down_until = 0.0  # an embedder that failed is not asked again at once
        self._down_reason = ""
        self._upkeep = Upkeep(folder, ann_from)
        self._table: Any | None = None  # opened once: it reads the latest version anyway
        self._journal: Journal | None = None  # made by the first remember
        self._recover_at = 0.0  # when to look for dead processes' journals again
        self._fresh = FreshRows()  # the rows the ANN index misses, while all are known
        self._stamps = RecallStamps(folder)

    # ---- the table ------------------------------------------------------------------
    @property
    def db(self) -> Any:
        """The LanceDB connection, made on first use: importing lancedb takes ~1 s
        even without its REST client (lance_import), which a store nobody wrote to
        never pays."""
        if self._db is None:
            from .lance_import import lancedb as import_lancedb  # ~1 s: see the docstring

            lancedb = import_lancedb()

            private_dir(self.folder)  # memories may say what the user would not publish
            # Interval 0: every read sees what other processes committed.
            self._db = lancedb.connect(str(self.folder), read_consistency_interval=timedelta(0))
        return self._db

    @property
    def exists(self) -> bool:
        """Whether any memory was ever written here (a stat: no LanceDB needed)."""
        return has_memories(self.folder)

    def warm(self) -> None:
        """Pay the first use's costs now (LanceDB, the embedder's weights), if there
        is anything to recall: a session's first prompt then need not wait."""
        if not self.exists:
            return
        self._open()
        if self.embedder is not None:
            try:
                self.embedder.load()
            except EmbedderUnavailable as exc:
                log.warning("memory: %s", exc)

    def _open(self, *, drain: bool = True) -> Any | None:
        """The table (None until a memory was written), with this process's new
        memories in it (``drain``) and those of processes that died before committing
        theirs (looked for every ``RECOVER_EVERY_S``: see ``journal``)."""
        if drain:
            self._drain()
        if self._table is None:
            if not self.exists or TABLE not in self.db.list_tables().tables:
                return None
            self._table = self.db.open_table(TABLE)
        if time.monotonic() >= self._recover_at:  # a glob: some µs, every few seconds
            self._recover_at = time.monotonic() + RECOVER_EVERY_S
            recover(self.folder, self._add_missing)
        return self._table

    def _add_missing(self, rows: list[dict[str, Any]]) -> None:
        """Rows of a dead process's journal that the table lacks, added in one commit."""

        def add() -> None:
            table = self._open()
            if table is None:
                return
            have = self._texts_of(table, [row["id"] for row in rows])
            recorded = (table.schema.metadata or {}).get(EMBEDDER_KEY, b"").decode()
            missing = {}
            for row in rows:
                if row.pop("embedder", None) != recorded:
                    row["vector"] = None  # another embedder's vector: stored by text
                if row["id"] not in have:
                    missing[row["id"]] = fit(table, row)
            if missing:
                with self._fresh.writing(table):
                    added = table.add(list(missing.values()))
                    self._fresh.wrote(added.version, missing.values())
                self._after_write(table)
                log.info("memory: %d memories of a stopped process were written", len(missing))

        retrying(add)

    def _commit(self, rows: list[dict[str, Any]]) -> None:
        """Commit rows from the journal (its thread): new memories, in one commit."""

        def add() -> None:
            table = self._open(drain=False)
            assert table is not None  # made by the remember that journaled the rows
            with self._fresh.writing(table):
                added = table.add([fit(table, dict(row)) for row in rows])
                self._fresh.wrote(added.version, rows)
            self._after_write(table)

        retrying(add)

    def _drain(self) -> None:
        """Wait for this process's new memories in the folder to be committed."""
        journal = self._journal or existing_journal(self.folder)
        if journal is not None:
            journal.drain()

    def _schema(self, dimension: int | None) -> Any:
        import pyarrow as pa  # with LanceDB: only once memories are written (see db)

        fields = [
            pa.field("id", pa.string(), nullable=False),
            pa.field("text", pa.string(), nullable=False),
            pa.field("scope", pa.string(), nullable=False),
            pa.field("tags", pa.list_(pa.string())),
            pa.field("session", pa.string()),
            pa.field("message", pa.string()),
            pa.field("created", pa.float64()),
            pa.field("updated", pa.float64()),
            pa.field("recalled", pa.float64()),
        ]
        name = ""
        if dimension is not None and self.embedder is not None:
            fields.append(pa.field("vector", pa.list_(pa.float32(), dimension)))
            name = self.embedder.name
        return pa.schema(fields, metadata={EMBEDDER_KEY: name.encode()})

    def _create(self, schema: Any, rows: list[dict[str, Any]], *, replace: bool = False) -> Any:
        from lancedb.index import FTS  # LanceDB loads on first use (see db)

        mode = "overwrite" if replace else "create"
        table = self.db.create_table(TABLE, schema=schema, mode=mode, exist_ok=not replace)
        self._table = table
        self._fresh.lost()
        for record in (INDEX_BUILT, UPKEPT):  # a new table: no index, no upkeep yet
            (self.folder / record).unlink(missing_ok=True)
        if rows:
            table.add([fit(table, row) for row in rows])  # (no vector column: no vector key)
        if not any(index.index_type == "FTS" for index in table.list_indices()):
            table.create_index("text", config=FTS(), replace=True)
        self._upkeep = Upkeep(self.folder, self._upkeep.ann_from)  # a new table: look again
        return table

    def _writable(self, table: Any | None, vector: np.ndarray | None) -> tuple[Any, Any]:
        """The table to write to, made (or, while empty, remade) for this embedder,
        and its schema (each read of it is ~0.5 ms at 100,000 memories)."""
        name = self.embedder.name if self.embedder is not None and vector is not None else ""
        dimension = None if vector is None else len(vector)
        if table is None:
            private_dir(self.folder)  # the lock's folder, private like the memories
            with making_table(self.folder):
                table = self._open()  # another store may have made it while we waited
                if table is None:
                    schema = self._schema(dimension)
                    return self._create(schema, []), schema
        schema = table.schema
        recorded = (schema.metadata or {}).get(EMBEDDER_KEY, b"").decode()
        if recorded == name:
            return table, schema
        self._drain()  # a memory still in the journal makes the table not empty
        if table.count_rows() > 0:
            return table, schema
        schema = self._schema(dimension)
        return self._create(schema, [], replace=True), schema

    def recorded_embedder(self) -> str | None:
        """The embedder the table's vectors came from ("" none yet; None: no table)."""
        table = self._open()
        if table is None:
            return None
        return str((table.schema.metadata or {}).get(EMBEDDER_KEY, b"").decode())

    def _vectors(self, table: Any | None) -> _Vectors:
        if self.embedder is None:
            return _Vectors(False, "no embedder is configured ([memory] embedder = none)")
        if table is None:
            return _Vectors(True)
        recorded = (table.schema.metadata or {}).get(EMBEDDER_KEY, b"").decode()
        # (rows counted only when the names differ: an empty table takes any embedder)
        if recorded != self.embedder.name and table.count_rows() > 0:
            made = f"by {recorded}" if recorded else "without an embedder"
            return _Vectors(
                False,
                f"the memories were stored {made} and Crow now uses {self.embedder.name}: "
                "run `crow memory reindex`",
            )
        if time.monotonic() < self._down_until:
            return _Vectors(False, self._down_reason)
        return _Vectors(True)

    def _embed(self, texts: list[str]) -> np.ndarray | None:
        """Vectors, or None when the embedder fails (remembered for a minute)."""
        assert self.embedder is not None
        try:
            return self.embedder.embed(texts)
        except EmbedderUnavailable as exc:
            self._down_until = time.monotonic() + 60.0
            self._down_reason = f"the embedder is unavailable: {exc}"
            log.warning("memory: %s", self._down_reason)
            return None

    # ---- writing --------------------------------------------------------------------
    def remember(
        self,
        text: str,
        *,
        scope: str = "global",
        tags: Iterable[str] = (),
        session: str = "",
        message: str = "",
        created: float | None = None,
        memory_id: str | None = None,
    ) -> Remembered:
        text = self._checked(text, scope)
        tags = clean_tags(tags)
        vector = None
        if self._vectors(self._open(drain=False)).usable:  # while the last remember commits
            embedded = self._embed([text])
            vector = None if embedded is None else embedded[0]
        return retrying(
            lambda: self._remember(text, scope, tags, session, message, created, memory_id, vector)
        )

    def _checked(self, text: str, scope: str) -> str:
        """The text to keep; a ``MemoryError`` saying what to do when it cannot be."""
        text = text.strip()
        if not text:
            raise MemoryError("there is nothing to remember: the text is empty")
        size = len(text.encode("utf-8", "replace"))
        if size > self.max_text_bytes:
            raise MemoryError(
                f"the memory is {_kib(size)}, over the {_kib(self.max_text_bytes)} limit "
                "([memory] max_text_kib): keep one fact, in a sentence or two"
            )
        valid_scope(scope)
        return text

    def remember_many(
        self, items: list[dict[str, Any]], known: dict[tuple[str, str], Memory] | None = None
    ) -> list[Remembered | MemoryError]:
        """Many memories embedded in one call and written in one commit (``crow memory
        import``); each item holds ``remember``'s keywords, and each answer is what
        became of its item: an item that cannot be kept is its ``MemoryError``, and
        the rest land.

        An item whose id is stored already replaces that memory; one whose text
        (normalised) its scope holds already, or an earlier item gave, is merged into
        it.  Near duplicates by meaning are not looked for (a search each: minutes at
        100,000).  ``known`` maps (scope, normal text) to memories: read from the table
        when None; a caller writing batch after batch keeps it between them."""
        answers: list[Remembered | MemoryError] = []
        good: list[tuple[int, str, dict[str, Any]]] = []
        for item in items:
            try:
                text = self._checked(str(item["text"]), str(item.get("scope") or "global"))
            except MemoryError as exc:
                answers.append(exc)
                continue
            good.append((len(answers), text, item))
            answers.append(Remembered(""))  # filled in below, once the commit landed
        if not good:
            return answers
        table = self._open()
        vectors = (
            self._embed([text for _, text, _ in good]) if self._vectors(table).usable else None
        )
        if known is None:
            known = self.by_text()
        done, seen = retrying(lambda: self._remember_many(good, vectors, known))
        known.update(seen)
        for (index, _, _), answer in zip(good, done, strict=True):
            answers[index] = answer
        return answers

    def _remember_many(
        self,
        good: list[tuple[int, str, dict[str, Any]]],
        vectors: np.ndarray | None,
        known: dict[tuple[str, str], Memory],
    ) -> tuple[list[Remembered], dict[tuple[str, str], Memory]]:
        with self._lock:
            table, schema = self._writable(self._open(), None if vectors is None else vectors[0])
            if "vector" not in schema.names:
                vectors = None
            wanted = [str(item.get("memory_id")) for _, _, item in good if item.get("memory_id")]
            stored = self._texts_of(table, [i for i in wanted if MEMORY_ID.fullmatch(i)])
            rows: dict[str, dict[str, Any]] = {}
            seen: dict[tuple[str, str], Memory] = {}
            done: list[Remembered] = []
            stamp = time.time()
            for n, (_, text, item) in enumerate(good):
                scope = str(item.get("scope") or "global")
                vector = None if vectors is None else vectors[n]
                key = (scope, normal_text(text))
                twin = seen.get(key) or known.get(key)
                tags = clean_tags(item.get("tags") or ())
                if twin is not None:
                    row = new_row(twin.id, text, scope, (*twin.tags, *tags), twin, vector, stamp)
                    row["created"] = twin.created
                    done.append(Remembered(twin.id, merged_into=twin.id, replaced_text=twin.text))
                else:
                    given = str(item.get("memory_id") or "")
                    new_id = given if MEMORY_ID.fullmatch(given) else new_memory_id()
                    row = new_row(new_id, text, scope, tags, None, vector, stamp)
                    created = item.get("created") or stamp
                    row.update(session=item.get("session") or "", message=item.get("message") or "")
                    row["created"] = created
                    old = stored.get(new_id)
                    done.append(Remembered(new_id, None if old is None else new_id, old))
                rows[row["id"]] = row  # the same id twice in a batch: the later one stands
                seen[key] = memory_of(row)
            with self._fresh.writing(table):
                if any(answer.merged_into for answer in done):
                    written = upsert(table, list(rows.values()))  # a join on every id
                else:
                    written = table.add([fit(table, row) for row in rows.values()])  # all new
                self._fresh.wrote(written.version, rows.values())
            self._after_write(table)
            return done, seen

    def by_text(self) -> dict[tuple[str, str], Memory]:
        """Every memory by scope and normalised text (one read, for ``remember_many``)."""
        table = self._open()
        if table is None:
            return {}
        rows = table.search().select(COLUMNS).limit(max(table.count_rows(), 1)).to_list()
        return {(row["scope"], normal_text(row["text"])): memory_of(row) for row in rows}

    def _texts_of(self, table: Any, ids: list[str]) -> dict[str, str]:
        if not ids:
            return {}
        query = table.search().where(f"id IN ({', '.join(map(quote, ids))})")
        return {row["id"]: row["text"] for row in query.select(["id", "text"]).to_list()}

    def _remember(
        self,
        text: str,
        scope: str,
        tags: list[str],
        session: str,
        message: str,
        created: float | None,
        memory_id: str | None,
        vector: np.ndarray | None,
    ) -> Remembered:
        with self._lock:
            table, schema = self._writable(self._open(drain=False), vector)
            if "vector" not in schema.names:
                vector = None  # stored by text until a reindex gives it a vector
            # The memories still in the journal first, then the table's: one the
            # journal commits meanwhile is in the table by the time it is searched.
            journal = self._journal or existing_journal(self.folder)
            waiting = [] if journal is None else journal.waiting()
            twin = waiting_twin(waiting, text, vector, scope, self.merge_threshold)
            if twin is not None:
                self._drain()  # the twin must be in the table to be replaced there
            else:
                read = partial(self.get, table=table)
                twin = stored_twin(
                    table, text, vector, scope, self.merge_threshold, self._fresh, read
                )
            stamp = time.time()
            if twin is not None:
                row = new_row(twin.id, text, scope, (*twin.tags, *tags), twin, vector, stamp)
                row["created"] = twin.created
                with self._fresh.writing(table):
                    self._fresh.wrote(upsert(table, [row]).version, [row])
                self._after_write(table)
                return Remembered(twin.id, merged_into=twin.id, replaced_text=twin.text)
            new_id = memory_id if memory_id and MEMORY_ID.fullmatch(memory_id) else new_memory_id()
            row = new_row(new_id, text, scope, tags, None, vector, stamp)
            row.update(session=session, message=message, created=created or stamp)
            if self._journal is None:
                self._journal = journal_for(self.folder, self._commit)
            self._journal.append(row, self.embedder.name if self.embedder else "")
            return Remembered(new_id)  # on disk; in the table a few ms later (journal)

    def forget(self, memory_id: str) -> Memory | None:
        """Delete one memory; returns it (None if there was none)."""
        if not MEMORY_ID.fullmatch(memory_id):
            raise MemoryError(
                f"{memory_id!r} is not a memory id: an id is mem_ and 16 hex digits "
                "(crow memory list shows them)"
            )

        def forget() -> Memory | None:
            with self._lock:
                table = self._open()
                found = self.get(memory_id, table)
                if found is not None and table is not None:
                    with self._fresh.writing(table):
                        done = table.delete(f"id = {quote(memory_id)}")
                        self._fresh.deleted(done.version, [memory_id])
                    self._stamps.forget([memory_id])
                    self._after_write(table)
                return found

        return retrying(forget)

    def get(self, memory_id: str, table: Any | None = None) -> Memory | None:
        table = table if table is not None else self._open()
        if table is None or not MEMORY_ID.fullmatch(memory_id):
            return None
        rows = table.search().where(f"id = {quote(memory_id)}").select(COLUMNS).to_list()
        return self._stamps.overlay([memory_of(rows[0])])[0] if rows else None

    def mark_recalled(self, ids: list[str]) -> None:
        """Record when memories were last recalled (best effort: see ``stamps``)."""
        ids = [i for i in ids if MEMORY_ID.fullmatch(i)]
        if ids and self.exists:
            self._stamps.stamp(ids, time.time())

    # ---- reading --------------------------------------------------------------------
    def recall(
        self,
        query: str,
        *,
        scopes: Iterable[str] | None = None,
        tags: Iterable[str] = (),
        limit: int = 5,
    ) -> Recall:
        """The memories that best match ``query``, best first."""
        table = self._open()
        if table is None or not query.strip():
            return Recall([], "hybrid" if self.embedder is not None else "text")
        where = where_clause(scopes, tags)
        depth = max(limit * 4, 20)
        vectors = self._vectors(table)
        nearest: list[dict[str, Any]] = []
        # The words are searched in another thread while the query is embedded and
        # searched by meaning (LanceDB and onnxruntime let go of the GIL).
        by_words = _searches().submit(full_text, table, query, where, depth)
        if vectors.usable and has_vector_column(table):
            embedded = self._embed([query])
            if embedded is None:
                vectors = _Vectors(False, self._down_reason)
            else:
                nearest = by_meaning(table, embedded[0], where, depth)
        elif vectors.usable:
            vectors = _Vectors(False, "no memory has a vector yet")
        hits = fuse(nearest, by_words.result(), limit)
        stamped = self._stamps.overlay([hit.memory for hit in hits])
        hits = [replace(hit, memory=memory) for hit, memory in zip(hits, stamped, strict=True)]
        mode = "hybrid" if vectors.usable else "text"
        return Recall(
            hits, mode, None if vectors.usable else f"searched by text only: {vectors.reason}"
        )

    def list_memories(
        self,
        *,
        scopes: Iterable[str] | None = None,
        tags: Iterable[str] = (),
        limit: int = 50,
        offset: int = 0,
    ) -> list[Memory]:
        """Memories, most recently updated first."""
        return self.all(scopes=scopes, tags=tags)[offset : offset + limit]

    def all(self, *, scopes: Iterable[str] | None = None, tags: Iterable[str] = ()) -> list[Memory]:
        table = self._open()
        if table is None:
            return []
        query = table.search().select(COLUMNS)
        where = where_clause(scopes, tags)
        if where:
            query = query.where(where)
        rows = query.limit(max(table.count_rows(), 1)).to_list()
        memories = self._stamps.overlay([memory_of(r) for r in rows])
        return sorted(memories, key=lambda m: (-m.updated, m.id))

    def stats(self) -> dict[str, Any]:
        table = self._open()
        memories = self.all()
        scopes: dict[str, int] = {}
        for memory in memories:
            scopes[memory.scope] = scopes.get(memory.scope, 0) + 1
        with_vectors = 0
        if table is not None and has_vector_column(table):
            with_vectors = table.count_rows("vector IS NOT NULL")
        vectors = self._vectors(table)
        return {
            "folder": str(self.folder),
            "memories": len(memories),
            "scopes": scopes,
            "embedder": self.embedder.name if self.embedder else None,
            "stored_with": self.recorded_embedder(),
            "with_vectors": with_vectors,
            "search": "hybrid" if vectors.usable else f"text only: {vectors.reason}",
            "bytes": sum(p.stat().st_size for p in self.folder.rglob("*") if p.is_file()),
        }

    # ---- moving memories ------------------------------------------------------------
    def export(self) -> Iterator[dict[str, Any]]:
        for memory in sorted(self.all(), key=lambda m: (m.created, m.id)):
            yield memory.to_dict()

    def reindex(self, progress: Callable[[int, int], None] | None = None) -> int:
        """Embed every memory with this store's embedder and rewrite the table."""
        with self._lock:
            memories = sorted(self.all(), key=lambda m: (m.created, m.id))
            vectors: np.ndarray | None = None
            if self.embedder is not None and memories:
                parts = []
                for start in range(0, len(memories), 64):
                    batch = [m.text for m in memories[start : start + 64]]
                    parts.append(self.embedder.embed(batch))  # a failure stops the reindex
                    if progress is not None:
                        progress(min(start + 64, len(memories)), len(memories))
                vectors = np.concatenate(parts)
            dimension = None if vectors is None else vectors.shape[1]
            if self.embedder is not None and dimension is None:
                dimension = len(self.embedder.embed(["dimension probe"])[0])
            rows = []
            for index, memory in enumerate(memories):
                row = new_row(memory.id, memory.text, memory.scope, memory.tags, memory, None, 0)
                row.update(session=memory.session, message=memory.message)
                row.update(created=memory.created, updated=memory.updated, recalled=memory.recalled)
                if vectors is not None:
                    row["vector"] = vectors[index]
                rows.append(row)
            self._create(self._schema(dimension), rows, replace=True)
            self._down_until = 0.0
            return len(rows)

    # ---- the indexes ------------------------------------------------------------------
    def compact(self) -> str:
        """Build the indexes this many memories want and fold every write into them,
        now (crow memory reindex, import); what was done ("" when another process is
        at it)."""
        self._upkeep.wait()
        table = self._open()
        return "" if table is None else upkeep(table, self.folder, self._upkeep.ann_from)

    @property
    def indexing(self) -> bool:
        """Whether an index upkeep runs in the background now."""
        return self._upkeep.running

    def settle(self, timeout: float | None = None) -> None:
        """Wait for the new memories' commit and a background index upkeep (a
        short-lived process, before it exits)."""
        self._drain()
        self._upkeep.wait(timeout)

    def _after_write(self, table: Any) -> None:
        if self._upkeep.due(table):
            self._upkeep.start(self._open, table.version)


# ---- helpers ------------------------------------------------------------------------
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _searches() -> ThreadPoolExecutor:
    """The threads a recall searches by words in, beside its search by meaning."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(4, thread_name_prefix="crow-memory-search")
        return _pool


def _kib(size: int) -> str:
    return f"{size / 1024:.0f} KiB" if size < 1024 * 1024 else f"{size / 1024 / 1024:.1f} MiB"
