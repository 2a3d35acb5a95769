"""The directories a built-in server may touch, and which of them holds a path.

Owns `Roots` (fixed real paths, the root holding an absolute path) and `OutsideRoots`.  The
race-free walk that every fs tool goes through, following symlinks only while they stay
inside, lives in ``_fs_safe``; `Roots.resolve` is that walk for callers that want a path.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path


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
        from ._fs_safe import stat_in  # it imports this module

        return stat_in(self, path)[0]
