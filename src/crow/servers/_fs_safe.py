"""Finding and opening paths inside the roots without races: every lookup walks directory fds.

The threat (issue #11).  Checking a path and then opening it are two system calls.  Anything
else that can write inside the roots (the model's own terminal commands, a build script, a
checked-out repository's hooks) can swap a directory for a symlink between the two, and the
open then lands outside the roots.  Resolving with ``Path.resolve`` and opening the string it
returns is exactly that race; it was reproduced in a dozen tries.  A second trap: opening a
FIFO blocks until a writer comes (forever, holding a worker thread), and a device may be
endless or have side effects.

The defence: the kernel is never handed a path of more than one component.

- A root is opened from ``/`` one component at a time with ``O_NOFOLLOW``; its real path was
  fixed when the session began (`Roots.resolved`).
- Each component below it is looked at with ``lstat`` and opened with
  ``O_DIRECTORY | O_NOFOLLOW`` relative to the directory fd held from the step before.
- The last component is opened relative to its held parent with ``O_NOFOLLOW`` (and
  ``O_CREAT | O_EXCL`` when creating), ``O_NONBLOCK`` so that a FIFO cannot block, then
  ``fstat``-ed: only a regular file is used, and it is set blocking again.  Missing parent
  directories are made with ``mkdirat`` on the held fd and opened the same way.

A swap at any moment makes one of these opens fail (``ELOOP``, ``ENOTDIR``, ``EEXIST``),
never follow a link; the lookup then starts again from the root, a bounded number of times.

Symlink policy: a link whose target stays inside the roots is followed, as the file or
directory it names (repositories link files to each other), but by this module, not by the
kernel: the target is read with ``readlink``, joined to the real directory holding the link,
checked against the roots and walked again from a root.  A link whose target leaves the roots
raises `OutsideRoots`, for reading and writing alike, dangling or not.  ``..`` in a path is
applied to its text before the walk (as a shell's ``cd`` does; a link's own target is joined
to the link's real directory, so the result is what the kernel would find), and text that
climbs out of the roots is refused before anything is opened.

Out of scope: a directory the walk holds open can still be renamed out of the roots by
someone who may write both there and outside; they could write that outside file directly.
Hard links are not looked at: one to a file outside needs write access to that file to make.

This module owns opening a regular file (`open_file`, and `open_entry` for a name in a held
directory) and opening a directory (`open_dir`, and `open_subdir`).  The walk that finds what
to open (`locate`, `stat_in`) belongs to the roots (``roots``).  It does not own what the
tools do with them or how trees are walked (``_fs_walk``).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Literal, TypeVar

from ._fs_text import FsError
from .roots import WALK, Roots, locate

T = TypeVar("T")

#: Lookups started again because the path changed under them, before giving up.
MAX_RETRIES = 8

_READ_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC

#: What a file is opened for: read (must exist), edit (must exist), write (made if missing).
Purpose = Literal["read", "edit", "write"]


class _Changed(Exception):
    """The path changed between the walk and the open; look it up again."""


@dataclass(frozen=True)
class Opened:
    """A regular file opened inside the roots."""

    path: Path  #: its real absolute path
    file: BinaryIO  #: blocking, positioned at the start; the caller closes it
    created: bool  #: made by this open (write only)


def _retrying(path: str, op: Callable[[], T]) -> T:
    for _ in range(MAX_RETRIES):
        try:
            return op()
        except _Changed:
            continue
    raise OSError(errno.EAGAIN, "it kept changing while being opened", path)


# --- files ------------------------------------------------------------------------------------


def kind(mode: int) -> str:
    """What a non-regular file is, for messages: "a FIFO", "a socket", ..."""
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISLNK, "a symbolic link"),
    ):
        if test(mode):
            return name
    return "a special file"


def _require_regular(path: Path, mode: int, purpose: Purpose) -> None:
    if stat.S_ISREG(mode):
        return
    if stat.S_ISDIR(mode):
        if purpose == "write":
            raise FsError(f"{path} is a directory; write needs a file path.")
        raise FsError(f"{path} is a directory; use list to see what it contains.")
    raise FsError(f"{path} is {kind(mode)}, not a regular file.")


def open_file(roots: Roots, path: str, purpose: Purpose) -> Opened:
    """Open ``path`` as a regular file inside the roots.

    ``read`` opens it read-only and ``edit`` read-write; both need it to exist.  ``write``
    opens it read-write, making it (and missing parent directories) if needed.  Raises
    `FsError` for a missing file, a directory, a FIFO, socket or device (at once, never
    blocking); `OutsideRoots` as `locate`; `OSError` for what the filesystem refuses.
    """
    return _retrying(path, lambda: _open_file(roots, path, purpose))


def _open_file(roots: Roots, path: str, purpose: Purpose) -> Opened:
    with locate(roots, path) as found:
        if found.stat is not None:
            _require_regular(found.path, found.stat.st_mode, purpose)  # before any open
        elif purpose != "write":
            raise FsError(f"File not found: {found.path}.")
        parent = _make_dirs(found.parent, found.missing)
        try:
            flags = _FILE | (os.O_RDONLY if purpose == "read" else os.O_RDWR)
            created = found.stat is None
            if created:  # O_EXCL: never through a link or onto a file made meanwhile
                flags |= os.O_CREAT | os.O_EXCL
            try:
                fd = os.open(found.name, flags, 0o666, dir_fd=parent)
            except (FileExistsError, FileNotFoundError):  # made or removed since the walk
                raise _Changed from None
            except OSError as exc:
                if exc.errno == errno.ELOOP:  # a symlink now: walk it again
                    raise _Changed from None
                raise
        finally:
            if parent != found.parent:
                os.close(parent)
    try:
        _require_regular(found.path, os.fstat(fd).st_mode, purpose)  # what was really opened
        os.set_blocking(fd, True)
        file = os.fdopen(fd, "rb" if purpose == "read" else "r+b")
    except BaseException:
        os.close(fd)
        raise
    return Opened(found.path, file, created)


def _make_dirs(parent: int, names: tuple[str, ...]) -> int:
    """Make and open ``names`` below ``parent``; the deepest fd (``parent`` itself if none)."""
    fd = parent
    try:
        for name in names:
            with suppress(FileExistsError):  # made meanwhile: fine if a directory (checked)
                os.mkdir(name, dir_fd=fd)
            try:
                child = os.open(name, WALK, dir_fd=fd)
            except (NotADirectoryError, FileNotFoundError):  # a link or a file there now
                raise _Changed from None
            if fd != parent:
                os.close(fd)
            fd = child
    except BaseException:
        if fd != parent:
            os.close(fd)
        raise
    return fd


def open_entry(parent: int, name: str) -> BinaryIO | None:
    """``name`` in the held directory ``parent``, opened to read if it is a regular file.

    None for anything else (a link, FIFO, device, or a file gone meanwhile), without blocking.
    """
    try:
        fd = os.open(name, os.O_RDONLY | _FILE, dir_fd=parent)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            return None
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


# --- directories ------------------------------------------------------------------------------


def open_dir(roots: Roots, path: str) -> tuple[Path, int]:
    """``path`` opened as a directory to list (its real path and fd; the caller closes it).

    Raises `FsError` if it is missing or not a directory, else as `locate`.
    """
    return _retrying(path, lambda: _open_dir(roots, path))


def _open_dir(roots: Roots, path: str) -> tuple[Path, int]:
    with locate(roots, path) as found:
        if found.stat is None:
            raise FsError(f"Directory not found: {found.path}.")
        if not stat.S_ISDIR(found.stat.st_mode):
            raise FsError(f"{found.path} is not a directory.")
        fd = open_subdir(found.parent, found.name)
        if fd is None:
            raise _Changed
        return found.path, fd


def open_subdir(parent: int, name: str) -> int | None:
    """``name`` in the held directory ``parent`` opened to list, or None unless a directory.

    A symlink is never followed (None), so a walk cannot be led out of the tree it started in.
    Other failures (permission) raise `OSError`.
    """
    try:
        return os.open(name, _READ_DIR, dir_fd=parent)
    except (NotADirectoryError, FileNotFoundError):
        return None
