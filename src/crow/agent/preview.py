"""What a tool call will do, shown in its permission question before it runs.

A question that says only "Allow write a.py?" asks the person to trust blindly.
For the built-in ``fs`` server's ``write`` and ``edit`` Crow works out the change
first: the file is read through the same confined opener the server uses
(``_fs_safe``: nothing outside the session's roots is read) and the edit matched
as the server would match it, and the question's tool call carries the diff as
ACP diff content (ACP-V2.md §8.2), as the finished call will.  A change that
cannot be told (outside the roots, not text, no unique match) gets no preview:
the call itself will fail and say why.  Commands (``execute``) and URLs
(``fetch``) need no preview: the question carries them as they are.

This module reads files and never writes one.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

from crow.servers._fs_edit import replace_text
from crow.servers._fs_patch import git_patch
from crow.servers._fs_safe import open_file
from crow.servers._fs_text import FsError, decode_text
from crow.servers.roots import OutsideRoots, Roots

__all__ = ["fs_diff"]

log = logging.getLogger("crow.agent")

#: Files past this size get no preview: the question must not wait on a big read.
MAX_PREVIEW_BYTES = 1024 * 1024


async def fs_diff(
    server: str, tool: str, args: dict[str, Any], cwd: str, extra: tuple[str, ...]
) -> dict[str, Any] | None:
    """The diff content of a built-in fs ``write``/``edit``, or None."""
    if server != "fs" or tool not in ("write", "edit") or not isinstance(args.get("path"), str):
        return None
    try:
        return await asyncio.to_thread(_diff, tool, args, cwd, extra)
    except Exception as exc:  # the call itself reports what is wrong
        log.debug("no preview of %s: %s", tool, exc)
        return None


def _diff(tool: str, args: dict[str, Any], cwd: str, extra: tuple[str, ...]) -> dict[str, Any]:
    roots = Roots(cwd=Path(cwd), extra=tuple(Path(d) for d in extra))
    path: str = args["path"]
    old: str | None
    try:
        opened = open_file(roots, path, "read")
    except OutsideRoots:
        raise
    except FsError:
        if tool == "edit":
            raise
        old, file = None, (Path(cwd) / path)  # write makes it
    else:
        file = opened.path
        with opened.file as fh:
            data = fh.read(MAX_PREVIEW_BYTES + 1)
        if len(data) > MAX_PREVIEW_BYTES:
            raise FsError(f"{file} is too big to preview")
        old = decode_text(file, data)
    if tool == "write":
        new = str(args.get("content", ""))
    else:
        assert old is not None
        new, _ = replace_text(
            file,
            old,
            str(args.get("old_text", "")),
            str(args.get("new_text", "")),
            bool(args.get("replace_all", False)),
        )
    operation = "add" if old is None else "modify"
    return {
        "type": "diff",
        "changes": [{"operation": operation, "path": str(file), "fileType": "text"}],
        "patch": {"format": "git_patch", "text": git_patch(file, old, new)},
    }
