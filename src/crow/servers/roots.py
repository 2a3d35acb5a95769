"""The directories a built-in server may touch, and the one check every path goes through."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


class OutsideRoots(ValueError):
    """A path that resolves (symlinks followed) outside every allowed root."""


@dataclass(frozen=True)
class Roots:
    """The working directory plus any extra directories a server may read and write.

    Relative paths are taken from ``cwd``; ``~`` is not expanded.
    """

    cwd: Path
    extra: tuple[Path, ...] = ()

    @property
    def resolved(self) -> tuple[Path, ...]:
        """Every root, absolute with symlinks followed; ``cwd`` first."""
        return tuple(root.resolve() for root in (self.cwd, *self.extra))

    def resolve(self, path: str) -> Path:
        """Return ``path`` absolute with symlinks followed, or raise `OutsideRoots`.

        A path that does not exist yet resolves through its nearest existing parent, so a
        symlink anywhere on the way (even a dangling one) is followed before the check.
        """
        given = Path(path)
        absolute = given if given.is_absolute() else self.cwd / given
        resolved = absolute.resolve()
        roots = self.resolved
        if any(resolved.is_relative_to(root) for root in roots):
            return resolved
        shown = repr(path) if str(resolved) == path else f"{path!r} (resolves to {resolved})"
        allowed = ", ".join(str(root) for root in roots)
        raise OutsideRoots(f"Path {shown} is outside the allowed roots: {allowed}.")
