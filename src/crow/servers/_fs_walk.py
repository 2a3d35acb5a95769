"""Walking trees for the fs server's list, glob and grep tools, by directory fd.

Owns what those tools see.  ``.git`` is skipped.  A walk never enters a symlinked directory:
each subdirectory is opened ``O_NOFOLLOW`` relative to its held parent, so swapping one for
a link cannot lead the walk out of the roots.  A symlinked file is looked up again through
the roots (``_fs_safe``) and used only if it stays inside.  FIFOs, sockets and devices are
skipped without being read.  A listing stops at a limit, and grep reads only UTF-8 text
files up to ``GREP_MAX_FILE_BYTES``.  It does not own the tools' arguments, caps on results
or their text (``fs``), nor opening the path the model gave (``_fs_safe``).
"""

from __future__ import annotations

import fnmatch
import os
import stat
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import BinaryIO

from ._fs_safe import open_dir, open_entry, open_file, open_subdir
from ._fs_text import FsError, is_binary
from .roots import Roots, stat_in

#: grep skips bigger files: they are data or generated, and scanning them is slow.
GREP_MAX_FILE_BYTES = 2 * 1024 * 1024
SKIP_DIRS = frozenset({".git"})

Rel = tuple[str, ...]  # a path below the walked directory, as components


def _children(fd: int) -> list[os.DirEntry[str]]:
    with os.scandir(fd) as it:
        return sorted(it, key=lambda e: e.name)


def _is_dir_inside(roots: Roots, path: Path) -> bool:
    """Whether the symlink ``path`` names a directory inside the roots."""
    try:
        st = stat_in(roots, str(path))[1]
    except (ValueError, OSError):  # OutsideRoots is a ValueError
        return False
    return st is not None and stat.S_ISDIR(st.st_mode)


def list_entries(
    roots: Roots, base: Path, fd: int, depth: int, limit: int
) -> tuple[list[str], bool]:
    """Entries under the directory ``fd`` (real path ``base``) to ``depth`` levels, sorted.

    Directories end in ``/``, and so do symlinks to directories inside the roots (listed,
    not entered).  Returns at most ``limit`` entries and whether more were left out.
    """
    entries: list[str] = []
    full = False

    def walk(directory: int, prefix: str, level: int) -> None:
        nonlocal full
        try:
            children = _children(directory)
        except OSError:
            return  # unreadable: listed, not entered
        for child in children:
            if child.name in SKIP_DIRS:
                continue
            if len(entries) >= limit:
                full = True
                return
            real_dir = child.is_dir(follow_symlinks=False)
            is_dir = real_dir or (
                child.is_symlink() and _is_dir_inside(roots, base / prefix / child.name)
            )
            entries.append(f"{prefix}{child.name}{'/' if is_dir else ''}")
            if level < depth and real_dir:
                try:
                    sub = open_subdir(directory, child.name)
                except OSError:
                    continue
                if sub is None:
                    continue
                try:
                    walk(sub, f"{prefix}{child.name}/", level + 1)
                finally:
                    os.close(sub)
                if full:
                    return

    walk(fd, "", 1)
    return entries, full


def walk_files(
    fd: int, descend: Callable[[Rel], bool] = lambda rel: True, rel: Rel = ()
) -> Iterator[tuple[Rel, int, os.DirEntry[str]]]:
    """Every entry but a directory under ``fd``: its path, its held parent and its entry.

    Sorted, a directory's own entries before its subdirectories'; symlinks (to directories
    too) come out as entries and are never entered.  ``descend(rel)`` prunes subdirectories.
    """
    try:
        children = _children(fd)
    except OSError:
        return
    dirs: list[str] = []
    for child in children:
        if child.is_dir(follow_symlinks=False):
            if child.name not in SKIP_DIRS:
                dirs.append(child.name)
        else:
            yield (*rel, child.name), fd, child
    for name in dirs:
        if not descend((*rel, name)):
            continue
        try:
            sub = open_subdir(fd, name)
        except OSError:
            continue
        if sub is None:
            continue
        try:
            yield from walk_files(sub, descend, (*rel, name))
        finally:
            os.close(sub)


# --- glob -------------------------------------------------------------------------------------


def _pattern(pattern: str) -> list[str]:
    return [part for part in pattern.split("/") if part not in ("", ".")]


def _matches(pattern: list[str], rel: Rel) -> bool:
    """``rel`` matches ``pattern`` segment by segment; ``**`` is any number of segments."""
    if not pattern:
        return not rel
    if pattern[0] == "**":
        return any(_matches(pattern[1:], rel[i:]) for i in range(len(rel) + 1))
    return bool(rel) and fnmatch.fnmatchcase(rel[0], pattern[0]) and _matches(pattern[1:], rel[1:])


def _may_hold(pattern: list[str], rel: Rel) -> bool:
    """Whether files under the directory ``rel`` could match ``pattern``."""
    for i, part in enumerate(rel):
        if i >= len(pattern):
            return False
        if pattern[i] == "**":
            return True
        if not fnmatch.fnmatchcase(part, pattern[i]):
            return False
    return len(rel) < len(pattern)


def glob_files(roots: Roots, base: Path, fd: int, pattern: str) -> list[tuple[float, str]]:
    """(mtime, path relative to ``base``) of the regular files under ``fd`` matching ``pattern``.

    ``pattern`` is a pathlib-style glob (``*`` within a segment, ``**`` across them).
    """
    parts = _pattern(pattern)
    found: list[tuple[float, str]] = []
    for rel, _, entry in walk_files(fd, lambda rel: _may_hold(parts, rel)):
        if not _matches(parts, rel):
            continue
        try:
            if entry.is_symlink():
                st = stat_in(roots, str(base.joinpath(*rel)))[1]
            else:
                st = entry.stat(follow_symlinks=False)
        except (ValueError, OSError):  # outside the roots, or gone
            continue
        if st is not None and stat.S_ISREG(st.st_mode):
            found.append((st.st_mtime, "/".join(rel)))
    return found


# --- grep -------------------------------------------------------------------------------------


def tree_texts(
    roots: Roots, path: str, base: Path, is_dir: bool, glob: str | None
) -> Generator[tuple[str, str], None, None]:
    """(path relative to ``base``, text) of each text file at or under ``path``, sorted.

    ``base`` and ``is_dir`` are what ``path`` was found to be.  A file given directly that is
    not a regular file raises `FsError`; one met in the tree is skipped.
    """
    if not is_dir:
        if glob is None or fnmatch.fnmatch(base.name, glob):
            text = _text(open_file(roots, path, "read").file)
            if text is not None:
                yield base.name, text
        return
    base, fd = open_dir(roots, path)
    try:
        for rel, parent, entry in walk_files(fd):
            shown = "/".join(rel)
            if glob is not None and not (
                fnmatch.fnmatch(entry.name, glob) or fnmatch.fnmatch(shown, glob)
            ):
                continue
            file = _open_entry(roots, base.joinpath(*rel), parent, entry)
            text = None if file is None else _text(file)
            if text is not None:
                yield shown, text
    finally:
        os.close(fd)


def _open_entry(roots: Roots, path: Path, parent: int, entry: os.DirEntry[str]) -> BinaryIO | None:
    if entry.is_symlink():  # followed only while it stays inside the roots
        try:
            return open_file(roots, str(path), "read").file
        except (FsError, ValueError, OSError):
            return None
    if not entry.is_file(follow_symlinks=False):  # a FIFO, socket or device: not even opened
        return None
    return open_entry(parent, entry.name)


def _text(file: BinaryIO) -> str | None:
    """The file's text (closing it); None for a binary, huge or unreadable file."""
    try:
        with file:
            if os.fstat(file.fileno()).st_size > GREP_MAX_FILE_BYTES:
                return None
            data = file.read(GREP_MAX_FILE_BYTES + 1)
    except OSError:
        return None
    if len(data) > GREP_MAX_FILE_BYTES or is_binary(data):
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def text_lines(text: str) -> Iterator[tuple[int, str]]:
    """A text's numbered lines, without their line ends."""
    for n, line in enumerate(text.split("\n"), start=1):
        yield n, line.removesuffix("\r")
