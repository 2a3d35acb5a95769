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
from typing import TYPE_CHECKING

from .common import EXIT_USAGE, config_or_refuse

if TYPE_CHECKING:  # the store loads when the command runs (crow's start-up stays light)
    from ..store.db import Store

__all__ = ["add_arguments", "main"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    migrate = actions.add_parser("migrate", help="bring the store's schema up to date")
    migrate.add_argument("--store", help="a file or a postgresql:// URL (default: Crow's)")
    copy = actions.add_parser("copy", help="copy the sessions one store has to another")
    copy.add_argument("--from", dest="source", required=True, help="a file or a URL")
    copy.add_argument("--to", dest="target", required=True, help="a file or a URL")


def main(args: argparse.Namespace) -> int:
    # The store loads when the command runs (see above).
    from ..store.copy import copy_sessions, schema_version
    from ..store.db import StoreError

    try:
        if args.action == "migrate":
            location = args.store or config_or_refuse("crow store").store_location
            with _opened(location) as store:
                version = schema_version(store)
            print(f"{_shown(location)}: schema version {version}, up to date")
            return 0
        with _opened(args.source) as source, _opened(args.target) as target:
            copied, skipped = copy_sessions(source, target)
        print(f"copied {copied} sessions, {skipped} already there")
        return 0
    except (StoreError, RuntimeError) as exc:
        print(f"crow store: {exc}", file=sys.stderr)
        return EXIT_USAGE


def _shown(location: Path | str) -> str:
    from ..store.db import redact_url  # with the store (see main)

    return redact_url(location) if isinstance(location, str) else str(location)


class _opened:
    """``with _opened(location) as store``: the store, closed after."""

    def __init__(self, location: Path | str) -> None:
        from ..store.db import open_store  # with the store (see main)

        self.store = open_store(location)

    def __enter__(self) -> Store:
        return self.store

    def __exit__(self, *exc: object) -> None:
        self.store.close()
