"""How writes land when several processes share one memory folder.

LanceDB commits are atomic, and a commit that raced another process's is refused
("commit conflict"): ``retrying`` does such a write again from its read, a few
times after a random pause, and raises a ``MemoryError`` naming the cause if it
never lands, so a record is never lost silently.  Making the table is the one
write that cannot be retried that way (see ``making_table``): it takes a lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import random
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from .scopes import MemoryError

__all__ = ["CONFLICT_ATTEMPTS", "making_table", "retrying"]

log = logging.getLogger("crow.memory")
T = TypeVar("T")

#: A write that raced another process's commit is done again, up to this many times,
#: after a random pause of up to 25 ms doubled each time (a second, all told).
CONFLICT_ATTEMPTS = 6
CONFLICT_PAUSE_S = 0.025
#: The lock file of ``making_table``, beside the table in the memory folder.
MAKING_LOCK = ".making-table.lock"


@contextlib.contextmanager
def making_table(folder: Path) -> Iterator[None]:
    """One store at a time makes the table in ``folder`` (which exists), however many
    processes share it.

    Two stores that both found no table would each create it, and a create that
    lands after the other store's first write could drop that write (LanceDB's
    create is an overwrite commit).  The lock is held only while the table is made,
    once per folder: writes to a table that exists never take it."""
    with open(folder / MAKING_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        yield


def retrying(write: Callable[[], T]) -> T:
    """``write`` (a read and the commit that follows from it), done again when its
    commit raced another process's; a ``MemoryError`` when it never lands."""
    for attempt in range(CONFLICT_ATTEMPTS):
        try:
            return write()
        except MemoryError:
            raise
        except Exception as exc:
            if not _conflict(exc):
                raise
            if attempt == CONFLICT_ATTEMPTS - 1:
                raise MemoryError(
                    f"the memory store is busy with another process's writes: {_first_line(exc)}"
                ) from exc
            log.info("memory: a commit raced another process's; trying again: %s", exc)
            time.sleep(random.uniform(0, CONFLICT_PAUSE_S * 2**attempt))
    raise AssertionError("unreachable")


def _conflict(exc: Exception) -> bool:
    """LanceDB's refusal of a commit that another process's commit overtook."""
    text = str(exc).lower()
    return "conflict" in text or "retryable" in text


def _first_line(exc: Exception) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
