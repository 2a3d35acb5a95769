"""The git patch and the ``_meta`` of a write or an edit (ACP v2 diff content).

Owns `git_patch` (one ``diff --git`` section with absolute paths and no commit headers,
ACP-V2.md §8.2; re-exported by ``fs``) and the ``crow/diff`` and ``crow/locations`` entries
built around it, including the first changed line.  It does not write files.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

from ..extensions import DIFF, LOCATIONS
from ._fs_text import count_lines, split_lines

Meta = dict[str, Any]


def git_patch(path: Path, old: str | None, new: str) -> str:
    """One ``diff --git`` section with absolute paths; ``old=None`` means a new file."""
    name = str(path)
    body = list(
        difflib.unified_diff(
            split_lines(old or ""),
            split_lines(new),
            "/dev/null" if old is None else name,
            name,
            n=3,
        )
    )
    if old is not None and not body:
        return ""  # nothing changed
    header = [f"diff --git {name} {name}\n"]
    if old is None:
        header.append("new file mode 100644\n")
        if not body:  # an empty new file has no hunks; git still names both sides
            body = ["--- /dev/null\n", f"+++ {name}\n"]
    out = header
    for line in body:
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


def diff_meta(path: Path, old: str | None, new: str, line: int) -> Meta:
    operation = "add" if old is None else "modify"
    change = {"operation": operation, "path": str(path), "fileType": "text"}
    return {
        DIFF: {"changes": [change], "patch": git_patch(path, old, new)},
        LOCATIONS: [{"path": str(path), "line": line}],
    }


def first_changed_line(old: str, new: str) -> int:
    for n, (a, b) in enumerate(zip(split_lines(old), split_lines(new), strict=False), start=1):
        if a != b:
            return n
    return min(count_lines(old), count_lines(new)) + 1
