"""New memories kept safe before LanceDB commits them (crow.memory.store).

A LanceDB commit costs a few ms at 100,000 memories (~5 ms of a remember's
budget of 20), so ``remember`` does not wait for it: the new row is appended to
this process's journal file for the folder, flushed and fsynced (~0.3 ms), and
the remember returns.  A thread commits the rows waiting, in batches, and then
empties the file.

- **Group commit.**  A commit waits until its first row has waited
  ``COMMIT_AFTER_S``, so a burst of remembers (a model's calls in one turn, many
  sessions at once) is one commit: each LanceDB commit costs ~9 ms of CPU whatever
  it holds, and leaves a fragment that every search reads until the next upkeep.
  A ``drain`` (any read of the store, a process exiting) commits at once.

- **Durable.** A remember that returned is on disk.  When the process dies before
  the commit, its journal file stays behind; the next store to open the folder
  takes the file's lock (held by its writer while it lives), adds the rows the
  table lacks and deletes the file.  A line cut short by the crash was never
  acknowledged and is skipped.
- **Read your writes.** Every store of a process shares the folder's journal, and
  a store's reads and writes wait for it first (``drain``: at once when nothing
  is waiting), so this process never misses a memory it was told it kept.  Other
  processes see it when the commit lands, ``COMMIT_AFTER_S`` and a few ms later.
- A commit that fails keeps the rows waiting, logged, and is tried again at the
  next ``drain`` or remember; the file keeps them meanwhile.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import fcntl
import json
import logging
import os
import secrets
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import numpy as np

__all__ = ["JOURNALS", "Journal", "existing_journal", "journal_for", "recover"]

log = logging.getLogger("crow.memory")

#: The journals' folder, inside the memory folder.
JOURNALS = ".journal"
#: How long a row waits for others to share its commit (see the docstring): a
#: burst of remembers ~20 ms apart is one commit in five.
COMMIT_AFTER_S = 0.1

Rows = list[dict[str, Any]]

_journals: dict[str, Journal] = {}
_journals_lock = threading.Lock()


def journal_for(folder: Path, commit: Callable[[Rows], None]) -> Journal:
    """This process's journal for ``folder`` (``commit`` writes rows to the table: the
    first store's serves every store of the folder, as they share the table)."""
    key = str(folder.resolve())
    with _journals_lock:
        journal = _journals.get(key)
        if journal is None:
            if not _journals:
                atexit.register(_drain_all)  # a process that exits commits its memories
            journal = _journals[key] = Journal(folder, commit)
        return journal


def _drain_all() -> None:
    with _journals_lock:
        journals = list(_journals.values())
    for journal in journals:
        journal.drain()


def existing_journal(folder: Path) -> Journal | None:
    """The folder's journal if a store of this process made one."""
    with _journals_lock:
        return _journals.get(str(folder.resolve()))


class Journal:
    """The rows this process acknowledged for one folder and has not yet committed."""

    def __init__(self, folder: Path, commit: Callable[[Rows], None]) -> None:
        self.folder = folder
        self._commit = commit
        self._file: IO[bytes] | None = None
        self._waiting: Rows = []
        self._appended: list[float] = []  # when each row waiting was appended (monotonic)
        self._hurry = False  # a drain waits: commit now
        self._committing = False
        self._failed = False  # the last commit failed: drain returns, the rows wait
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None

    def append(self, row: dict[str, Any], embedder: str) -> None:
        """Keep ``row`` (its vector made by ``embedder``) on disk, fsynced when this
        returns, and commit it soon."""
        line = json.dumps(_encoded(row, embedder), separators=(",", ":")).encode() + b"\n"
        with self._changed:
            file = self._open()
            file.write(line)
            file.flush()
            os.fsync(file.fileno())
            self._waiting.append(row)
            self._appended.append(time.monotonic())
            self._failed = False
            self._changed.notify_all()
            self._start()

    def drain(self, timeout: float = 30.0) -> None:
        """Wait until every row appended so far is committed (or its commit failed);
        at once in the journal's own thread (its commit reads the table too)."""
        if threading.current_thread() is self._thread:
            return
        with self._changed:
            if self._waiting:
                self._hurry = True  # someone reads: no waiting for more rows
                if not self._committing:
                    self._failed = False  # a failed batch is tried again now
                    self._start()
                self._changed.notify_all()
            self._changed.wait_for(
                lambda: self._failed or not (self._waiting or self._committing), timeout
            )

    def waiting(self) -> Rows:
        """The rows appended and not yet committed (a copy)."""
        with self._changed:
            return list(self._waiting)

    def _open(self) -> IO[bytes]:
        if self._file is None:
            folder = self.folder / JOURNALS
            folder.mkdir(mode=0o700, exist_ok=True)
            path = folder / f"{os.getpid()}-{secrets.token_hex(4)}.jsonl"
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)  # private
            file = os.fdopen(fd, "ab")
            fcntl.flock(file, fcntl.LOCK_EX)  # ours while we live: see ``recover``
            self._file = file
        return self._file

    def _start(self) -> None:
        """A committing thread, unless one runs (called holding ``_changed``)."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name="crow-memory-journal", daemon=True
            )
            self._thread.start()

    def _run(self) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(lambda: bool(self._waiting) and not self._failed, 5.0)
                if not self._waiting or self._failed:
                    self._thread = None  # idle: the next append starts a thread again
                    return
                # Group commit: the rows appended meanwhile share it (see the docstring).
                wait = self._appended[0] + COMMIT_AFTER_S - time.monotonic()
                self._changed.wait_for(lambda: self._hurry, wait)
                batch, self._committing, self._hurry = list(self._waiting), True, False
            try:
                self._commit(batch)
            except Exception as exc:  # a full disk, a store busy too long: the file keeps them
                log.warning("memory: %d new memories wait to be written: %s", len(batch), exc)
                with self._changed:
                    self._committing, self._failed = False, True
                    self._changed.notify_all()
                continue
            with self._changed:
                del self._waiting[: len(batch)]
                del self._appended[: len(batch)]
                self._committing = False
                if not self._waiting and self._file is not None:
                    self._file.truncate(0)  # every row in it is in the table now
                self._changed.notify_all()


def recover(folder: Path, add_missing: Callable[[Rows], None]) -> int:
    """Add the rows of journals whose processes died (their locks are free) and delete
    those files; how many rows were read.  ``add_missing`` adds those the table lacks."""
    folder = folder / JOURNALS
    if not folder.is_dir():
        return 0
    found = 0
    for path in sorted(folder.glob("*.jsonl")):
        with open(path, "rb") as file:
            try:
                fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # its process lives and commits it
            rows = _rows_of(file.read())
            if rows:
                add_missing(rows)
                found += len(rows)
            with contextlib.suppress(FileNotFoundError):
                path.unlink()  # under the lock: another recoverer finds it gone or empty
    return found


def _rows_of(data: bytes) -> Rows:
    rows = []
    for line in data.splitlines():
        try:
            rows.append(_decoded(json.loads(line)))
        except ValueError:
            log.info("memory: a journal line cut short by a crash was skipped")
    return rows


def _encoded(row: dict[str, Any], embedder: str) -> dict[str, Any]:
    out = dict(row, embedder=embedder)
    vector = out.pop("vector", None)
    if vector is not None:
        out["vector_f32"] = base64.b64encode(np.asarray(vector, np.float32).tobytes()).decode()
    return out


def _decoded(data: dict[str, Any]) -> dict[str, Any]:
    vector = data.pop("vector_f32", None)
    data["vector"] = (
        None if vector is None else np.frombuffer(base64.b64decode(vector), np.float32).copy()
    )
    return data
