"""Opening the session store: ``open_store`` picks the backend from the location (a
PostgreSQL URL: ``PostgresStore``, else a SQLite file's path: ``SqliteStore``).  The
rest of Crow imports the store's names from here (``Store``, either backend;
``SessionStore``, what the agent needs of one); the modules beside it own them."""

from __future__ import annotations

from pathlib import Path

from .backend import Store
from .base import SessionStore
from .postgres import PostgresStore, probe
from .records import (
    HeldRow,
    PendingMessage,
    PendingUpdate,
    SessionRecord,
    StoreError,
    StoreUnavailable,
    TranscriptEntry,
    database_errors,
)
from .sqlite import SqliteStore
from .urls import is_postgres_url, redact_url

__all__ = [
    "HeldRow",
    "PendingMessage",
    "PendingUpdate",
    "PostgresStore",
    "SessionRecord",
    "SessionStore",
    "SqliteStore",
    "Store",
    "StoreError",
    "StoreUnavailable",
    "TranscriptEntry",
    "database_errors",
    "is_postgres_url",
    "open_store",
    "probe",
    "redact_url",
]


def open_store(location: Path | str) -> Store:
    """The store at ``location``: a PostgreSQL URL, else a SQLite file's path."""
    if is_postgres_url(location):
        return PostgresStore(str(location))
    return SqliteStore(location)
