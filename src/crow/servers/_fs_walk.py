"""Walking the tree for the fs server's list, glob and grep tools.

Owns what those tools see: ``.git`` is skipped, a symlink whose target leaves the roots is
not followed into results, a listing stops at a limit, and grep reads only UTF-8 text files
up to ``GREP_MAX_FILE_BYTES``.  It does not own the tools' arguments, caps on results or
their text (``fs``).
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterator
from pathlib import Path

from ._fs_text import is_binary
from .roots import OutsideRoots, Roots

#: grep skips bigger files: they are data or generated, and scanning them is slow.
GREP_MAX_FILE_BYTES = 2 * 1024 * 1024
SKIP_DIRS = frozenset({".git"})


def list_entries(base: Path, depth: int, limit: int) -> tuple[list[str], bool]:
    """Entries under ``base`` to ``depth`` levels, sorted, directories ending in ``/``.

    Returns at most ``limit`` entries and whether more were left out.
    """
    entries: list[str] = []
    full = False

    def walk(directory: Path, prefix: str, level: int) -> None:
        nonlocal full
        try:
            with os.scandir(directory) as it:
                children = sorted(it, key=lambda e: e.name)
        except OSError:
            return  # unreadable: listed, not entered
        for child in children:
            if child.name in SKIP_DIRS:
                continue
            if len(entries) >= limit:
                full = True
                return
            is_dir = child.is_dir()
            entries.append(f"{prefix}{child.name}{'/' if is_dir else ''}")
            if level < depth and child.is_dir(follow_symlinks=False):
                walk(Path(child.path), f"{prefix}{child.name}/", level + 1)
                if full:
                    return

    walk(base, "", 1)
    return entries, full


def inside(roots: Roots, path: Path) -> bool:
    """Whether ``path`` resolves inside ``roots`` (symlinks followed)."""
    try:
        roots.resolve(str(path))
    except (OutsideRoots, OSError, RuntimeError):
        return False
    return True


def tree_files(roots: Roots, base: Path, glob: str | None) -> Iterator[tuple[Path, str]]:
    """Files under ``base`` (or ``base`` itself), sorted, with paths relative to it."""
    if base.is_file():
        if glob is None or fnmatch.fnmatch(base.name, glob):
            yield base, base.name
        return
    for directory, dirs, files in os.walk(base):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        for name in sorted(files):
            file = Path(directory, name)
            rel = file.relative_to(base).as_posix()
            if glob is not None and not (fnmatch.fnmatch(name, glob) or fnmatch.fnmatch(rel, glob)):
                continue
            if file.is_symlink() and not inside(roots, file):
                continue
            yield file, rel


def text_lines(file: Path) -> Iterator[tuple[int, str]]:
    """A text file's numbered lines; nothing for a binary, huge or unreadable file."""
    try:
        if file.stat().st_size > GREP_MAX_FILE_BYTES:
            return
        data = file.read_bytes()
    except OSError:
        return
    if is_binary(data):
        return
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return
    for n, line in enumerate(text.split("\n"), start=1):
        yield n, line.removesuffix("\r")
