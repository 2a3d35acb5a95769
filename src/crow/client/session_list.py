"""``crow sessions [list]``: the sessions, newest first, as a table or JSON lines.

Without ``--url`` or ``--command`` the list is read from the store itself (SQLite
or PostgreSQL, as config.toml says), not from a ``crow serve`` started to ask:
starting one takes longer than a person should wait for a list (``python
bench/sessions_bench.py``).  The store is opened as crow serve opens it (its
migrations, its locking), and only read.  Through an agent the same rows come
from ``session/list`` (``crow.client.sessions``), and are shown the same way.

Judge sessions (a judge's reasoning about another session, ``judge of …``) are
left out unless ``--all``; ``--limit N`` shows the newest N (0: all).  Only the
pages holding those are read, so a store of 100,000 sessions lists as fast as one
of 100 (how many more there are is then not counted).  This module imports no ACP
code: the list stays fast.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path

__all__ = ["DEFAULT_LIMIT", "Row", "list_local", "show"]

#: Rows shown without --limit: the newest, which is what a person looks for.
DEFAULT_LIMIT = 30


@dataclass(frozen=True, kw_only=True)
class Row:
    """One session, as listed."""

    sessionId: str
    updatedAt: str
    cwd: str
    title: str | None = None
    judgeOf: str | None = None


def list_local(args: argparse.Namespace) -> int:
    """List the sessions of this machine's store (see the module)."""
    # The store loads only to list this machine's own sessions.
    from crow.config import ConfigError, load_config
    from crow.store.db import StoreError, open_store

    try:
        config = load_config()
    except ConfigError as exc:
        print(f"crow: {exc}", file=sys.stderr)
        return 2
    location = config.store_location
    if isinstance(location, Path) and not location.exists():
        return show([], args)  # nothing was ever stored: make no database to say so
    cwd = str(Path(args.cwd).resolve()) if args.cwd else None
    try:
        store = open_store(location)
    except StoreError as exc:
        print(f"crow: {exc}", file=sys.stderr)
        return 7
    wanted = DEFAULT_LIMIT if args.limit is None else args.limit
    try:
        rows: list[Row] = []
        cursor = None
        while True:
            records, cursor = store.list_sessions(cwd=cwd, cursor=cursor)
            rows += [
                Row(
                    sessionId=r.id,
                    updatedAt=r.updated_at,
                    cwd=r.cwd,
                    title=r.title,
                    judgeOf=_text(r.config.get("judgeOf")),
                )
                for r in records
            ]
            if cursor is None:
                break
            if wanted > 0 and sum(args.all or r.judgeOf is None for r in rows) > wanted:
                return show(rows, args, complete=False)  # a long store: read what is shown
    finally:
        store.close()
    return show(rows, args)


def show(rows: list[Row], args: argparse.Namespace, *, complete: bool = True) -> int:
    """Print ``rows`` (newest first) as ``args`` ask: --all, --limit, --json.
    ``complete``: the rows are every session (else the newest, more than are shown,
    and the counts of those left out are not known)."""
    listed = [r for r in rows if args.all or r.judgeOf is None]
    hidden = len(rows) - len(listed)
    limit = DEFAULT_LIMIT if args.limit is None else args.limit
    shown = listed[:limit] if limit > 0 else listed
    if args.json:
        for row in shown:
            print(json.dumps({k: v for k, v in asdict(row).items() if v is not None}))
        return 0
    if not shown:
        print("no sessions", file=sys.stderr)
    else:
        _table(shown)
    more = len(listed) - len(shown)
    counted = f"{more} " if complete else ""
    if more:
        print(f"crow: {counted}older not shown (--limit N shows N, --limit 0 all)", file=sys.stderr)
    if hidden and not args.all:
        counted = f"{hidden} " if complete else ""
        print(f"crow: {counted}judge sessions not shown (--all shows them)", file=sys.stderr)
    return 0


def _table(rows: list[Row]) -> None:
    home = str(Path.home())
    cells = [
        (
            r.sessionId,
            local_time(r.updatedAt),
            "~" + r.cwd[len(home) :] if r.cwd == home or r.cwd.startswith(home + "/") else r.cwd,
            r.title or "",
        )
        for r in rows
    ]
    header = ("ID", "UPDATED", "CWD", "TITLE")
    widths = [max(len(c[i]) for c in [header, *cells]) for i in range(3)]
    room = shutil.get_terminal_size((100, 24)).columns - sum(widths) - 6
    for cell in [header, *cells]:
        title = cell[3]
        if sys.stdout.isatty() and len(title) > max(room, 10):
            title = title[: max(room, 10) - 1] + "…"
        line = "  ".join(f"{c:<{w}}" for c, w in zip(cell[:3], widths, strict=True))
        print(f"{line}  {title}".rstrip())


def local_time(stamp: str) -> str:
    """An ISO time from the store (UTC) in the local zone, to the minute."""
    try:
        when = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return stamp
    return when.astimezone().strftime("%Y-%m-%d %H:%M")


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None
