"""Copying sessions from one session store to another (``crow store copy``): a
team's SQLite sessions into PostgreSQL, say; copying again copies only the new."""

from __future__ import annotations

from typing import Any

from .db import PendingUpdate, Store
from .records import loads

__all__ = ["copy_sessions", "schema_version"]


def copy_sessions(source: Store, target: Store) -> tuple[int, int]:
    """Copy every session ``target`` lacks; returns (copied, already there)."""
    copied = skipped = 0
    cursor: str | None = None
    while True:
        page, cursor = source.list_sessions(cursor=cursor)
        for record in page:
            if target.get_session(record.id, include_deleted=True) is not None:
                skipped += 1
                continue
            target.create_session(
                session_id=record.id,
                cwd=record.cwd,
                now=record.created_at,
                additional_directories=record.additional_directories,
                config=record.config,
            )
            updates: list[PendingUpdate] = [
                (record.id, body, None, None, None) for _, body in source.updates(record.id)
            ]
            if updates:
                target.append_updates(updates)
            for kind, body in source.transcript_rows(record.id):
                target.append_message(record.id, _message(body), kind=kind)
            target.update_session(
                record.id,
                title=record.title,
                updated_at=record.updated_at,
                state=record.state,
                stop_reason=record.stop_reason,
            )
            copied += 1
        if cursor is None:
            return copied, skipped


def _message(body: str) -> dict[str, Any]:
    return dict(loads(body))


def schema_version(store: Store) -> int:
    """The version of the schema ``store`` has."""
    return store.schema_version()
