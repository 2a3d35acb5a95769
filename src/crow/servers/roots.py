"""The directories a built-in server may touch, which of them holds a path, and the walk to it.

Owns `Roots` (fixed real paths, the root holding an absolute path), `OutsideRoots`, and the
race-free walk that every fs tool goes through (`locate`, `stat_in`): component by component
on held directory fds, following symlinks only while they stay inside (``_fs_safe`` says why,
and opens what the walk found).  `Roots.resolve` is that walk for callers that want a path.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

__all__ = ["MAX_HOPS", "WALK", "Found", "OutsideRoots", "Roots", "locate", "stat_in"]

#: Symlinks followed in one lookup before giving up with ELOOP (Linux's own MAXSYMLINKS).
MAX_HOPS = 40

# O_PATH (Linux) opens a directory for walking with search permission only, as the kernel
# walks; elsewhere it is 0 and a walked directory must be readable.
WALK = getattr(os, "O_PATH", 0) | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class OutsideRoots(ValueError):
    """A path whose text, or a symlink on its way, leads outside every allowed root."""


@dataclass(frozen=True)
class Roots:
    """The working directory plus any extra directories a server may read and write.

    Relative paths are taken from ``cwd``; ``~`` is not expanded.
    """

    cwd: Path
    extra: tuple[Path, ...] = ()

    @cached_property
    def resolved(self) -> tuple[Path, ...]:
        """Every root, absolute with symlinks followed; ``cwd`` first.

        Resolved once, on first use.  A root's own path is trusted configuration; pinning it
        means that a directory inside one root swapped later for a symlink cannot move a
        second root nested there.
        """
        return tuple(root.resolve() for root in (self.cwd, *self.extra))

    @cached_property
    def _spelled(self) -> tuple[Path, ...]:
        # The roots as given (absolute, ".." applied), so "/tmp/link/x" works for a root
        # given as /tmp/link even though it resolves elsewhere.
        return tuple(Path(os.path.abspath(root)) for root in (self.cwd, *self.extra))

    def anchor(self, absolute: Path) -> tuple[Path, tuple[str, ...]] | None:
        """The real root holding ``absolute`` and the parts below it, or None if none does.

        ``absolute`` must be normalised (no ``.`` or ``..``); nothing is looked up, and the
        innermost root wins when roots nest.
        """
        best: tuple[Path, tuple[str, ...]] | None = None
        for real, spelled in zip(self.resolved, self._spelled, strict=True):
            for root in (real, spelled):
                if absolute.is_relative_to(root):
                    parts = absolute.relative_to(root).parts
                    if best is None or len(parts) < len(best[1]):
                        best = (real, parts)
        return best

    def outside(self, path: str, resolved: Path) -> OutsideRoots:
        """The error for ``path``, which leads to ``resolved``, outside every root."""
        shown = repr(path) if str(resolved) == path else f"{path!r} (resolves to {resolved})"
        allowed = ", ".join(str(root) for root in self.resolved)
        return OutsideRoots(f"Path {shown} is outside the allowed roots: {allowed}.")

    def resolve(self, path: str) -> Path:
        """Return ``path`` absolute with symlinks followed, or raise `OutsideRoots`.

        A path that does not exist yet resolves through its nearest existing parent, so a
        symlink anywhere on the way (even a dangling one) is followed before the check.
        The answer is only as good as the moment it was given: tools open through
        ``_fs_safe`` instead of opening this path.
        """
        return stat_in(self, path)[0]


# --- the walk ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Found:
    """Where a path led: the directory holding its last component, held open, and what is there."""

    parent: int  #: fd of the directory holding ``name`` (the root itself when ``name`` is ".")
    name: str  #: the last component, never a symlink when the walk looked
    path: Path  #: the real absolute path, for messages and ``_meta``
    missing: tuple[str, ...]  #: directories to make below ``parent`` before ``name`` (write)
    stat: os.stat_result | None  #: ``lstat`` of ``name``; None when it does not exist


@contextmanager
def locate(roots: Roots, path: str) -> Iterator[Found]:
    """Walk ``path`` (relative to the cwd root) to its last component, holding its parent.

    In-root symlinks are followed, including a final one.  Raises `OutsideRoots` if the text
    or any link leaves the roots, `NotADirectoryError` if a middle component is a file, and
    `OSError` (``ELOOP``) past `MAX_HOPS` links.  The parent fd is closed on exit.
    """
    found = _walk(roots, path)
    try:
        yield found
    finally:
        os.close(found.parent)


def stat_in(roots: Roots, path: str) -> tuple[Path, os.stat_result | None]:
    """The real path of ``path`` and its ``lstat`` (None if it does not exist)."""
    with locate(roots, path) as found:
        return found.path, found.stat


def _normal(path: Path) -> Path:
    # normpath keeps a leading "//" (POSIX allows it a meaning); Linux gives it none.
    return Path("/" + os.path.normpath(path).lstrip("/"))


def _walk(roots: Roots, path: str) -> Found:
    target = _normal(roots.resolved[0] / path)
    for _ in range(MAX_HOPS):
        anchored = roots.anchor(target)
        if anchored is None:
            raise roots.outside(path, target)
        root, parts = anchored
        step = _descend(_open_root(root), root, parts)
        if isinstance(step, Found):
            return step
        target = step  # a symlink's target, or the same path again after a race
    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)


def _open_root(root: Path) -> int:
    """The root opened from ``/`` without following links (its real path has none)."""
    fd = os.open("/", WALK)
    try:
        for part in root.parts[1:]:
            child = os.open(part, WALK, dir_fd=fd)
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def _descend(fd: int, root: Path, parts: tuple[str, ...]) -> Found | Path:
    """Walk ``parts`` below ``fd`` (the root, taken over) to a `Found`, or a path to walk next.

    Each component is ``lstat``-ed, then opened ``O_NOFOLLOW`` relative to the one before.
    On a symlink it returns the absolute text to walk instead; if a component changed between
    the ``lstat`` and the open, the same path again.
    """
    here = root
    try:
        for i, name in enumerate(parts):
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                found = Found(fd, parts[-1], root.joinpath(*parts), parts[i:-1], None)
                fd = -1  # handed over
                return found
            if stat.S_ISLNK(st.st_mode):
                try:
                    link = os.readlink(name, dir_fd=fd)
                except OSError:  # no longer a link
                    return root.joinpath(*parts)
                return _normal(here / link).joinpath(*parts[i + 1 :])
            if i == len(parts) - 1:
                found = Found(fd, name, here / name, (), st)
                fd = -1
                return found
            if not stat.S_ISDIR(st.st_mode):
                raise NotADirectoryError(
                    errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(here / name)
                )
            try:
                child = os.open(name, WALK, dir_fd=fd)
            except (NotADirectoryError, FileNotFoundError):  # swapped since the lstat
                return root.joinpath(*parts)
            os.close(fd)
            fd, here = child, here / name
        found = Found(fd, ".", root, (), os.stat(fd))
        fd = -1
        return found
    finally:
        if fd >= 0:
            os.close(fd)
