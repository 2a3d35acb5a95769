"""Memories from files, for ``crow memory import``: JSON lines as ``crow memory
export`` writes them, or AGENTS.md / MEMORY.md split into one memory per item."""

from __future__ import annotations

import calendar
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["memory_item", "records_in", "split_markdown", "stamp"]


def records_in(path: Path, scope: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """The memories a file holds, each with where it stands (``FILE:LINE``, or
    ``FILE item N`` for markdown); a line that is not one is ``{"error": why}``."""
    text = path.read_text(encoding="utf-8")
    if path.suffix.lower() in (".md", ".markdown"):
        for number, (item, tags) in enumerate(split_markdown(text), 1):
            yield f"{path} item {number}", {"text": item, "tags": tags, "scope": scope}
        return
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            yield where, {"error": f"not JSON ({exc.msg})"}
            continue
        if not isinstance(record, dict) or not isinstance(record.get("text"), str):
            yield where, {"error": 'not a memory: a JSON object with a "text" string'}
            continue
        yield where, record


def memory_item(record: dict[str, Any], scope: str) -> dict[str, Any]:
    """A record as ``MemoryStore.remember_many`` takes it (in ``scope`` unless it names
    one), or ``{"error": why}``."""
    if "error" in record:
        return record
    tags = record.get("tags") or []
    if not isinstance(tags, list) or not all(isinstance(tag, str) for tag in tags):
        return {"error": '"tags" is not a list of strings'}
    fields = ("scope", "session", "message", "id")
    if any(not isinstance(record.get(name) or "", str) for name in fields):
        return {"error": f"{', '.join(fields)} must be strings"}
    return {
        "text": record["text"],
        "scope": record.get("scope") or scope,
        "tags": tags,
        "session": record.get("session") or "",
        "message": record.get("message") or "",
        "created": stamp(record.get("created")),
        "memory_id": record.get("id"),
    }


def stamp(value: Any) -> float | None:
    """An exported ``created`` (``2026-01-02T03:04:05Z``) as epoch seconds, else None."""
    if not isinstance(value, str):
        return None
    try:
        return float(calendar.timegm(time.strptime(value, "%Y-%m-%dT%H:%M:%SZ")))
    except ValueError:
        return None


_BULLET = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$")


def split_markdown(text: str) -> list[tuple[str, list[str]]]:
    """AGENTS.md / MEMORY.md as memories: a list item or a paragraph each,
    tagged with the heading it stands under."""
    items: list[tuple[str, list[str]]] = []
    tag: list[str] = []
    current: list[str] = []
    fenced = False

    def flush() -> None:
        body = " ".join(" ".join(current).split())
        if body:
            items.append((body, list(tag)))
        current.clear()

    for line in text.splitlines():
        if line.strip().startswith("```"):
            fenced = not fenced
            current.append(line.strip())
            continue
        heading = None if fenced else _HEADING.match(line)
        if heading:
            flush()
            words = re.findall(r"[a-z0-9]+", heading.group(1).lower())
            tag = ["-".join(words[:3])] if words else []
        elif not fenced and _BULLET.match(line):
            flush()
            current.append(_BULLET.sub("", line))
        elif not line.strip() and not fenced:
            flush()
        else:
            current.append(line.strip())
    flush()
    return items
