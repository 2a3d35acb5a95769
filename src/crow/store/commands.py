"""crow store: the session store itself.

    crow store migrate [--store FILE|URL]     bring the store's schema up to date
                                              (opening it does too: this says so)
    crow store copy --from FILE|URL --to FILE|URL
                                              copy every session (record, update log,
                                              model transcript) that the target lacks

The store is $CROW_HOME/crow.db (SQLite) unless [store] url or CROW_STORE_URL names
a PostgreSQL database ("postgresql://user@host/db").  To move a team's sessions to
PostgreSQL: crow store copy --from ~/.agents/crow/crow.db --to postgresql://…, then
set [store] url.  Copying again copies only the sessions added since.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the store loads when the command runs (crow's start-up stays light)
    from .db import PendingUpdate, Store

__all__ = ["add_arguments", "copy_sessions", "main"]

EXIT_USAGE = 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    migrate = actions.add_parser("migrate", help="bring the store's schema up to date")
    migrate.add_argument("--store", help="a file or a postgresql:// URL (default: Crow's)")
    copy = actions.add_parser("copy", help="copy the sessions one store has to another")
    copy.add_argument("--from", dest="source", required=True, help="a file or a URL")
    copy.add_argument("--to", dest="target", required=True, help="a file or a URL")


def main(args: argparse.Namespace) -> int:
    from crow.config import ConfigError, load_config

    from .db import StoreError

    try:
        if args.action == "migrate":
            location = args.store or load_config().store_location
            with _opened(location) as store:
                version = _version(store)
            print(f"{_shown(location)}: schema version {version}, up to date")
            return 0
        with _opened(args.source) as source, _opened(args.target) as target:
            copied, skipped = copy_sessions(source, target)
        print(f"copied {copied} sessions, {skipped} already there")
        return 0
    except (StoreError, ConfigError, RuntimeError) as exc:
        print(f"crow store: {exc}", file=sys.stderr)
        return EXIT_USAGE


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
    from .records import loads

    return dict(loads(body))


def _version(store: Store) -> int:
    return store.schema_version()


def _shown(location: Path | str) -> str:
    from .db import redact_url

    return redact_url(location) if isinstance(location, str) else str(location)


class _opened:
    """``with _opened(location) as store``: the store, closed after."""

    def __init__(self, location: Path | str) -> None:
        from .db import open_store

        self.store = open_store(location)

    def __enter__(self) -> Store:
        return self.store

    def __exit__(self, *exc: object) -> None:
        self.store.close()
