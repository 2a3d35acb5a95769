"""What the memory store (crow.memory.store) hands out: a ``Memory``, a search ``Hit``,
a ``Recall`` (the hits and how they were found) and what ``remember`` did
(``Remembered``); and the one reading of a table row as a ``Memory``."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

__all__ = ["Hit", "Memory", "Recall", "Remembered", "memory_of"]


@dataclass(frozen=True)
class Memory:
    id: str
    text: str
    scope: str
    tags: tuple[str, ...] = ()
    session: str = ""
    message: str = ""
    created: float = 0.0
    updated: float = 0.0
    recalled: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "text": self.text,
            "scope": self.scope,
            "tags": list(self.tags),
            "session": self.session or None,
            "message": self.message or None,
            "created": _iso(self.created),
            "updated": _iso(self.updated),
            "recalled": _iso(self.recalled) if self.recalled else None,
        }


@dataclass(frozen=True)
class Hit:
    memory: Memory
    score: float  # the fused rank score, 1.0 for first in both lists
    similarity: float | None  # cosine similarity to the query, when vectors were searched
    text_score: float | None = None  # its BM25 score, when its words matched


@dataclass(frozen=True)
class Recall:
    hits: list[Hit]
    mode: str  # "hybrid" or "text"
    note: str | None = None  # why the search was by text only


@dataclass(frozen=True)
class Remembered:
    id: str
    merged_into: str | None = None  # the similar memory this one replaced, if any
    replaced_text: str | None = None  # what that memory said before


def _iso(stamp: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(stamp))


def memory_of(row: dict[str, Any]) -> Memory:
    return Memory(
        id=row["id"],
        text=row["text"],
        scope=row["scope"],
        tags=tuple(row.get("tags") or ()),
        session=row.get("session") or "",
        message=row.get("message") or "",
        created=row.get("created") or 0.0,
        updated=row.get("updated") or 0.0,
        recalled=row.get("recalled"),
    )
