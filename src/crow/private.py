"""Crow's home is private: its folders are 0700 and its files 0600, whatever the umask.

The home holds what no other user should read: the session store (every prompt,
reply and tool output), the config (``server.token``), remembered permissions,
logs and the runtime files of ``crow serve --http`` (a bearer token).  Every
place that creates something there goes through this module, which creates
with an explicit mode (``os.open(..., 0o600)``, ``mkdir(mode=0o700)`` then
``chmod``: the umask can only narrow a mode, but a strange umask such as 0o277
could narrow ours too far) and tightens what an older Crow left wider: group
and other bits are removed, nothing is ever added.  Tightening a folder is
logged as a warning (it is rare: once, on the first start after an upgrade).

SQLite creates ``crow.db-wal`` and ``-shm`` itself, with the mode of the
database file (unix VFS, ``robust_open``), so a database created 0600 here
keeps its companions 0600 too (``tests/unit/test_private_files.py`` checks it).

This module owns modes only, not which files exist (``crow.config.Paths``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from pathlib import Path
from typing import IO

__all__ = [
    "DIR_MODE",
    "FILE_MODE",
    "open_private_append",
    "private_dir",
    "private_file",
    "tighten_file",
    "write_private",
]

log = logging.getLogger("crow.private")

DIR_MODE = 0o700
FILE_MODE = 0o600
#: The bits no other user may have on anything in the home.
_OTHERS = 0o077
_shared_warned: set[Path] = set()  # shared folders already reported (once a process)


def private_dir(path: Path) -> Path:
    """Make ``path`` a folder only this user can enter: created 0700, or tightened.

    Missing parents are created with the usual mode (``~/.agents`` is not
    Crow's alone).  A folder that is not ours, or a shared sticky one such as
    /tmp (a ``CROW_HOME`` pointed at it), is left as it is, with a warning.
    Returns ``path``; raises OSError when it cannot be created.
    """
    try:
        path.mkdir(mode=DIR_MODE, parents=True)
    except FileExistsError:
        _tighten_dir(path)
    else:
        os.chmod(path, DIR_MODE)  # exactly 0700, whatever the umask took away
    return path


def private_file(path: Path) -> Path:
    """Make sure ``path`` exists and only this user can read it: created empty
    0600, or an existing file tightened (its content is kept).

    Returns ``path``; raises OSError when it cannot be created.
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE)
    except FileExistsError:
        tighten_file(path)
    else:
        try:
            os.fchmod(fd, FILE_MODE)  # exactly 0600, whatever the umask took away
        finally:
            os.close(fd)
    return path


def open_private_append(path: Path | str) -> IO[bytes]:
    """Open ``path`` to append bytes, as a private file: created 0600, or an
    existing one tightened first (what it holds is kept).

    For files Crow writes outside its home at a user's request (``crow conductor
    --trace``: every message of every hop).  Raises OSError."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, FILE_MODE)
    try:
        mode = stat.S_IMODE(os.fstat(fd).st_mode)
        if mode & _OTHERS:  # an existing file, made wider by something else
            os.fchmod(fd, mode & ~_OTHERS)
        return os.fdopen(fd, "ab")
    except BaseException:
        os.close(fd)
        raise


def tighten_file(path: Path) -> None:
    """Remove group and other bits from the file at ``path``, if there is one.

    A file that is not ours to change is reported, not an error.
    """
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
        if mode & _OTHERS:
            os.chmod(path, mode & ~_OTHERS)
            log.info("made %s private (it was %o)", path, mode)
    except FileNotFoundError:
        pass  # gone meanwhile (SQLite removes its -wal on close): nothing to tighten
    except PermissionError:
        log.warning("%s is readable by other users and not ours to change", path)


def write_private(path: Path, text: str) -> Path:
    """Replace ``path`` with ``text`` atomically: a 0600 temporary file beside it,
    then ``os.replace``.  A reader sees the old content or the new, never half.
    A symlink is written through (a config kept in a dotfiles repository stays there).

    Returns ``path``; raises OSError (the old file is then untouched).
    """
    import tempfile  # ~10 ms: not on crow serve's start-up path

    target = Path(os.path.realpath(path))
    fd, temp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:  # mkstemp creates 0600 whatever the umask
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())  # the new content is on disk before the name points at it
        os.replace(temp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    return path


def _tighten_dir(path: Path) -> None:
    """Remove group and other bits from an existing folder of ours."""
    st = os.stat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise NotADirectoryError(f"{path} is not a folder")
    if not st.st_mode & _OTHERS:
        return
    if st.st_uid != os.geteuid() or st.st_mode & stat.S_ISVTX:
        if path in _shared_warned:
            return
        _shared_warned.add(path)
        log.warning(
            "folder %s is shared (mode %o, owner %d): Crow's files there may be readable by others",
            path,
            stat.S_IMODE(st.st_mode),
            st.st_uid,
        )
        return
    os.chmod(path, stat.S_IMODE(st.st_mode) & ~_OTHERS)
    log.warning(
        "folder %s was open to other users (mode %o); made it private (%o)",
        path,
        stat.S_IMODE(st.st_mode),
        stat.S_IMODE(st.st_mode) & ~_OTHERS,
    )
