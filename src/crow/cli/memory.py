"""crow memory: the memory store from the command line.

    crow memory add TEXT [--scope S] [--tag T]...     keep a memory (default scope: project)
    crow memory search QUERY [--limit N] [--scope S]  best matches first
    crow memory list [--scope S] [--tag T] [--limit N] [--offset N]
    crow memory forget ID...
    crow memory export [FILE]                         JSON lines (stdout by default)
    crow memory import FILE...                        JSON lines, or AGENTS.md/MEMORY.md split
    crow memory reindex                               embed everything with the current embedder
    crow memory stats

Scopes: global, project (the git root above --cwd), session:<id>, or all for
search and list (which look at global + project by default).  Exit codes: 0
done, 1 some of it failed (each failure is named on stderr), 2 bad usage.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ..memory.scopes import MemoryError, MemoryPlace
from .common import EXIT_USAGE, config_or_refuse

__all__ = ["add_arguments", "main"]

EXIT_OK, EXIT_FAILED = 0, 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cwd", type=Path, default=None, help="the project (default: here)")
    parser.add_argument("--json", action="store_true", help="print JSON lines instead of text")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    add = actions.add_parser("add", help="keep a memory")
    add.add_argument("text", nargs="+")
    add.add_argument("--scope", default="project", help="global, project or session:<id>")
    add.add_argument("--tag", action="append", default=[], help="a tag (repeatable)")
    search = actions.add_parser("search", help="the memories that best match a query")
    search.add_argument("query", nargs="+")
    search.add_argument("--limit", type=int, default=10)
    listing = actions.add_parser("list", help="memories, most recently updated first")
    listing.add_argument("--limit", type=int, default=50)
    listing.add_argument("--offset", type=int, default=0)
    for sub in (search, listing):
        sub.add_argument("--scope", default=None, help="global, project, session:<id> or all")
        sub.add_argument("--tag", action="append", default=[], help="only with this tag")
    forget = actions.add_parser("forget", help="delete memories by id")
    forget.add_argument("ids", nargs="+", metavar="ID")
    export = actions.add_parser("export", help="write every memory as JSON lines")
    export.add_argument("file", nargs="?", type=Path, help="default: stdout")
    load = actions.add_parser("import", help="read JSON lines, or markdown split into memories")
    load.add_argument("files", nargs="+", type=Path, metavar="FILE")
    load.add_argument("--scope", default="project", help="for markdown and records without one")
    actions.add_parser("reindex", help="embed every memory again with the current embedder")
    actions.add_parser("stats", help="how many memories, where, and how they are searched")
    for action in actions.choices.values():  # after the action too: crow memory search Q --json
        action.add_argument("--cwd", type=Path, default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        action.add_argument(
            "--json", action="store_true", default=argparse.SUPPRESS, help="print JSON lines"
        )


def main(args: argparse.Namespace) -> int:
    # The store (LanceDB, the embedder) loads when a memory command runs.
    from ..memory.shared import shared_store

    config = config_or_refuse()
    cwd = args.cwd or Path.cwd()
    if not cwd.is_dir():
        print(f"crow memory: --cwd {cwd}: not a directory", file=sys.stderr)
        return EXIT_USAGE
    store = shared_store(config.paths.memory, config.memory)
    place = MemoryPlace(cwd)
    handler = globals()[f"_{args.action}"]
    try:
        result: int = handler(store, place, args)
    except MemoryError as exc:
        print(f"crow memory: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if store.indexing:  # a write started the index upkeep: this process must not cut it
        print("crow memory: bringing the search indexes up to date...", file=sys.stderr)
        store.settle()
    return result


def _out(args: argparse.Namespace, record: dict[str, Any], line: str) -> None:
    print(json.dumps(record, ensure_ascii=False) if args.json else line)


def _line(record: dict[str, Any]) -> str:
    tags = f" #{' #'.join(record['tags'])}" if record.get("tags") else ""
    return f"{record['id']}  {record['scope']}{tags}\n    {record['text']}"


def _add(store: Any, place: MemoryPlace, args: argparse.Namespace) -> int:
    done = store.remember(" ".join(args.text), scope=place.scope(args.scope), tags=args.tag)
    record = {"id": done.id, "merged_into": done.merged_into}
    merged = f" (replacing: {done.replaced_text})" if done.merged_into else ""
    _out(args, record, f"{done.id}{merged}")
    return EXIT_OK


def _search(store: Any, place: MemoryPlace, args: argparse.Namespace) -> int:
    found = store.recall(
        " ".join(args.query), scopes=place.scopes(args.scope), tags=args.tag, limit=args.limit
    )
    if found.note:
        print(f"crow memory: {found.note}", file=sys.stderr)
    for hit in found.hits:
        record = {**hit.memory.to_dict(), "score": round(hit.score, 4)}
        _out(args, record, f"{hit.score:.3f}  {_line(record)}")
    return EXIT_OK


def _list(store: Any, place: MemoryPlace, args: argparse.Namespace) -> int:
    for memory in store.list_memories(
        scopes=place.scopes(args.scope), tags=args.tag, limit=args.limit, offset=args.offset
    ):
        record = memory.to_dict()
        _out(args, record, _line(record))
    return EXIT_OK


def _forget(store: Any, place: MemoryPlace, args: argparse.Namespace) -> int:
    status = EXIT_OK
    for memory_id in args.ids:
        try:
            gone = store.forget(memory_id)
        except MemoryError as exc:
            gone, why = None, str(exc)  # (it names the id)
        else:
            why = f"{memory_id}: no such memory"
        if gone is None:
            print(f"crow memory: {why}", file=sys.stderr)
            status = EXIT_FAILED
        else:
            _out(args, {"forgotten": memory_id}, f"forgot {memory_id}: {gone.text}")
    return status


def _export(store: Any, place: MemoryPlace, args: argparse.Namespace) -> int:
    lines = [json.dumps(record, ensure_ascii=False) for record in store.export()]
    text = "".join(line + "\n" for line in lines)
    if args.file is None:
        sys.stdout.write(text)
    else:
        args.file.write_text(text, encoding="utf-8")
        print(f"exported {len(lines)} memories to {args.file}", file=sys.stderr)
    return EXIT_OK


#: Records embedded together and written in one commit by ``crow memory import``.
IMPORT_BATCH = 256


def _import(store: Any, place: MemoryPlace, args: argparse.Namespace) -> int:
    from ..memory.importing import records_in  # calendar: 3 ms of every start-up

    default_scope = place.scope(args.scope)
    tally = {"added": 0, "merged": 0, "failed": 0}
    known = store.by_text()  # exact repeats of what is stored are merged, not piled up
    for path in args.files:
        try:
            records = list(records_in(path, default_scope))
        except (OSError, UnicodeDecodeError) as exc:
            print(f"crow memory: {path}: {exc}", file=sys.stderr)
            tally["failed"] += 1
            continue
        bar = _Progress(f"import {path.name}")
        for start in range(0, len(records), IMPORT_BATCH):
            _import_batch(store, records[start : start + IMPORT_BATCH], default_scope, known, tally)
            bar.update(min(start + IMPORT_BATCH, len(records)), len(records))
        bar.done()
    if store.exists:
        store.compact()  # the new rows into the indexes (built now past upkeep.ANN_FROM)
    added, merged, failed = tally["added"], tally["merged"], tally["failed"]
    print(f"imported {added} memories, merged {merged}, failed {failed}", file=sys.stderr)
    return EXIT_FAILED if failed else EXIT_OK


def _import_batch(
    store: Any,
    batch: list[tuple[str, dict[str, Any]]],
    scope: str,
    known: dict[Any, Any],
    tally: dict[str, int],
) -> None:
    """One commit's worth of records; each that is not kept is named on stderr."""
    from ..memory.importing import memory_item

    items, places = [], []
    for where, record in batch:
        item = memory_item(record, scope)
        if "error" in item:
            print(f"crow memory: {where}: {item['error']}", file=sys.stderr)
            tally["failed"] += 1
        else:
            items.append(item)
            places.append(where)
    if not items:
        return
    try:
        answers = store.remember_many(items, known)
    except Exception as exc:  # the store refused the commit: every record in it is named
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        for where in places:
            print(f"crow memory: {where}: not stored: {first}", file=sys.stderr)
        tally["failed"] += len(places)
        return
    for where, answer in zip(places, answers, strict=True):
        if isinstance(answer, MemoryError):
            print(f"crow memory: {where}: {answer}", file=sys.stderr)
            tally["failed"] += 1
        else:
            tally["merged" if answer.merged_into else "added"] += 1


def _reindex(store: Any, place: MemoryPlace, args: argparse.Namespace) -> int:
    from ..memory.embedders import EmbedderUnavailable  # with the store (see main)

    if store.embedder is None:
        print("crow memory: no embedder is configured ([memory] embedder = none)", file=sys.stderr)
        return EXIT_FAILED
    bar = _Progress(f"reindex with {store.embedder.name}")
    try:
        count = store.reindex(bar.update)
    except EmbedderUnavailable as exc:
        bar.done()
        print(f"crow memory: reindex stopped, nothing changed: {exc}", file=sys.stderr)
        return EXIT_FAILED
    store.compact()
    bar.done()
    print(f"reindexed {count} memories with {store.embedder.name}", file=sys.stderr)
    return EXIT_OK


def _stats(store: Any, place: MemoryPlace, args: argparse.Namespace) -> int:
    stats = store.stats()
    if args.json:
        print(json.dumps(stats))
        return EXIT_OK
    print(f"{stats['memories']} memories in {stats['folder']} ({stats['bytes'] / 1e6:.1f} MB)")
    for scope, count in sorted(stats["scopes"].items()):
        print(f"  {count:6d}  {scope}")
    print(f"embedder: {stats['embedder'] or 'none'}; stored with: {stats['stored_with'] or 'none'}")
    print(f"with vectors: {stats['with_vectors']}; search: {stats['search']}")
    return EXIT_OK


class _Progress:
    """A one-line bar on a terminal's stderr; otherwise nothing until ``done``."""

    WIDTH = 30

    def __init__(self, label: str) -> None:
        self.label = label
        self.live = sys.stderr.isatty()

    def update(self, done: int, total: int) -> None:
        if not self.live:
            return
        filled = self.WIDTH * done // max(total, 1)
        bar = "#" * filled + "." * (self.WIDTH - filled)
        sys.stderr.write(f"\r{self.label} [{bar}] {done}/{total}")
        sys.stderr.flush()

    def done(self) -> None:
        if self.live:
            sys.stderr.write("\n")
