"""The store's records and errors, the same for both backends: what a session,
a held prompt and a transcript entry look like once read, the rows an append takes,
and the list cursor (opaque to clients)."""

from __future__ import annotations

import base64
import binascii
import json
import sqlite3
import sys
from dataclasses import dataclass
from typing import Any, NamedTuple, TypedDict

import orjson

__all__ = [
    "HeldRow",
    "PendingMessage",
    "PendingUpdate",
    "SessionRecord",
    "StateChange",
    "StoreError",
    "StoreUnavailable",
    "TranscriptEntry",
    "database_errors",
    "decode_cursor",
    "encode_cursor",
    "entries",
    "loads",
    "pending",
    "record",
]


class StoreError(Exception):
    """The store cannot do what was asked (a bad cursor, a broken database)."""


class StoreUnavailable(StoreError):
    """The database failed (locked past the busy timeout, disk full, I/O error)."""


@dataclass(frozen=True, kw_only=True)
class SessionRecord:
    id: str
    cwd: str
    additional_directories: list[str]
    title: str | None
    created_at: str
    updated_at: str
    state: str
    stop_reason: str | None
    config: dict[str, Any]
    owner_pid: int | None
    deleted: bool
    owner: str | None = None  # the process holding the turn lease (lease.py)
    lease_expires: float | None = None


class StateChange(TypedDict, total=False):
    """What a logged update sets on its session: ``state`` (a state_update's, with its
    ``stop_reason``; ``idle`` also releases the turn lease) and ``now`` (updated-at)."""

    state: str | None
    stop_reason: str | None
    now: str | None


#: One update to log: (session id, body, state, stop reason, updated-at).
PendingUpdate = tuple[str, bytes, str | None, str | None, str | None]
#: One transcript entry to add with them: (session id, message, kind).
PendingMessage = tuple[str, dict[str, Any], str]


class HeldRow(NamedTuple):
    """A held prompt as the store keeps it (crow.agent.queue)."""

    id: str
    owner: str
    sender: str
    preview: str


@dataclass(frozen=True, kw_only=True)
class TranscriptEntry:
    seq: int
    kind: str  # "message" or "summary"
    message: dict[str, Any]


def record(row: tuple[Any, ...]) -> SessionRecord:
    return SessionRecord(
        id=row[0],
        cwd=row[1],
        additional_directories=json.loads(row[2]),
        title=row[3],
        created_at=row[4],
        updated_at=row[5],
        state=row[6],
        stop_reason=row[7],
        config=json.loads(row[8]),
        owner_pid=row[9],
        deleted=bool(row[10]),
        owner=row[11],
        lease_expires=row[12],
    )


def pending(session_id: str, body: bytes, change: StateChange) -> PendingUpdate:
    """The row that logs ``body`` with ``change``."""
    return (session_id, body, change.get("state"), change.get("stop_reason"), change.get("now"))


def database_errors() -> tuple[type[BaseException], ...]:
    """What a database call may raise: sqlite3's errors, and psycopg's once it is loaded."""
    psycopg = sys.modules.get("psycopg")
    return (sqlite3.Error,) if psycopg is None else (sqlite3.Error, psycopg.Error)


def loads(text: str) -> Any:
    """JSON from the store: orjson (a long session reads its whole transcript every
    model call), or json for what orjson refuses (an escaped lone surrogate)."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


def entries(rows: list[tuple[Any, ...]]) -> list[TranscriptEntry]:
    """Transcript entries from their rows (seq, kind, JSON body)."""
    return [TranscriptEntry(seq=r[0], kind=r[1], message=loads(r[2])) for r in rows]


def encode_cursor(last: SessionRecord) -> str:
    raw = json.dumps([last.updated_at, last.id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[str, str]:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        updated_at, session_id = json.loads(base64.urlsafe_b64decode(padded.encode()))
        if isinstance(updated_at, str) and isinstance(session_id, str):
            return updated_at, session_id
    except (binascii.Error, ValueError, TypeError):
        pass
    raise StoreError("Invalid cursor: pass back a nextCursor from session/list")
