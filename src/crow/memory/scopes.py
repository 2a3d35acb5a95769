"""Memory scopes: where a memory applies (no heavy imports: the agent loads this early).

``global`` (everywhere), ``project:<root>`` (the git root above a working
directory, or the directory), ``session:<id>`` (one session).
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["MemoryError", "MemoryPlace", "project_root", "valid_scope"]

_SCOPE = re.compile(r"global|project:.+|session:.+")


class MemoryError(Exception):
    """A request the store refuses (bad id, scope or text): a one-line reason."""


def project_root(cwd: str | Path) -> Path:
    """The git root above ``cwd`` (the project), else ``cwd`` itself."""
    start = Path(cwd).resolve()
    for folder in (start, *start.parents):
        if (folder / ".git").exists():
            return folder
    return start


def valid_scope(scope: str) -> str:
    if not _SCOPE.fullmatch(scope):
        raise MemoryError(f"unknown scope {scope!r}: use global, project:<root> or session:<id>")
    return scope


class MemoryPlace:
    """Where a caller's memories belong: its project and (in Crow) its session."""

    def __init__(self, cwd: str | Path, session_id: str | None = None) -> None:
        self.project = f"project:{project_root(cwd)}"
        self.session = f"session:{session_id}" if session_id else None

    def visible(self) -> list[str]:
        """The scopes recall and list look at by default."""
        return ["global", self.project, *([self.session] if self.session else [])]

    def scope(self, name: str) -> str:
        """A scope as stored: the shorthands project and session resolved, full forms checked."""
        if name == "project":
            return self.project
        if name == "session":
            if self.session is None:
                raise MemoryError("there is no session here: use global or project")
            return self.session
        return valid_scope(name) if name != "all" else _no_all()

    def scopes(self, name: str | None) -> list[str] | None:
        """The scopes to search: None means every scope."""
        if name is None:
            return self.visible()
        return None if name == "all" else [self.scope(name)]


def _no_all() -> str:
    raise MemoryError("a memory is kept in one scope: global, project or session")
