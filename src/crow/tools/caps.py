"""Tool results too large for the model: cut, with a note, and the whole kept in a file.

A tool can return anything: a client-served tool (MCP over ACP) once returned
30 MB, which went whole into the model's context and the session's log.  Past
``[tools] max_result_kib`` the model gets the beginning of the text, cut at a
line where one is near, and a note saying so and where the whole output was
saved: a private file under ``$CROW_HOME/tool-output/<session>/``, a folder the
session's fs tools may read, a part at a time.  What the client is shown and the
store keeps is the cut result, too.  Images and other binary blocks of such a
result are left out (the note counts them): no file would give them back to the
model.
"""

from __future__ import annotations

import logging
import os
from dataclasses import replace
from pathlib import Path

from crow.private import FILE_MODE, private_dir

from .hub import ToolResult

__all__ = ["cap_result", "result_size"]

log = logging.getLogger("crow.tools")

#: Cut at the last newline within this many bytes of the limit, so lines stay whole.
LINE_SLACK = 4096


def result_size(result: ToolResult) -> int:
    """About how many bytes ``result`` puts in front of the model and into the log."""
    size = len(result.text.encode("utf-8", "replace"))
    for block in result.content:
        if block.get("type") != "text":
            size += len(str(block.get("data") or block.get("blob") or ""))
    return size


def cap_result(result: ToolResult, limit: int, folder: Path | None, name: str) -> ToolResult:
    """``result`` if it is within ``limit`` bytes; else its text cut to ``limit``, with a
    note, the whole text saved as ``folder/name.txt`` (None: not saved)."""
    size = result_size(result)
    if size <= limit:
        return result
    saved = _save(result.text, folder, name) if folder is not None else None
    dropped = sum(1 for block in result.content if block.get("type") != "text")
    text = _cut(result.text, limit) + _note(size, limit, saved, dropped)
    return replace(result, text=text, content=[{"type": "text", "text": text}])


def _cut(text: str, limit: int) -> str:
    data = text.encode("utf-8", "replace")[:limit]
    newline = data.rfind(b"\n", max(0, limit - LINE_SLACK))
    if newline > 0:
        data = data[: newline + 1]
    return data.decode("utf-8", "ignore")


def _note(size: int, limit: int, saved: Path | None, dropped: int) -> str:
    where = (
        f"the whole output is in {saved} (read it with the fs tools, a part at a time)"
        if saved is not None
        else "the whole output could not be saved"
    )
    left_out = f"; {dropped} non-text blocks were left out" if dropped else ""
    return (
        f"\n[Crow cut this result: {_kib(size)} is over the {_kib(limit)} limit "
        f"([tools] max_result_kib); {where}{left_out}]"
    )


def _kib(size: int) -> str:
    return f"{size / 1024:.0f} KiB" if size < 1024 * 1024 else f"{size / 1024 / 1024:.1f} MiB"


def _save(text: str, folder: Path, name: str) -> Path | None:
    """Write ``text`` to a new private file; None (and a log line) when it cannot be."""
    path = folder / f"{name}.txt"
    try:
        private_dir(folder.parent)  # tool-output/ itself: 0700 too
        private_dir(folder)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, FILE_MODE)
        with os.fdopen(fd, "w", encoding="utf-8", errors="replace") as file:
            file.write(text)
    except OSError as exc:
        log.warning("could not save a cut tool result to %s: %s", path, exc)
        return None
    return path
