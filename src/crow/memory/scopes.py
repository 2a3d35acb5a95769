"""Memory scopes: where a memory applies (no heavy imports: the agent loads this early).

``global`` (everywhere), ``project:<root>`` (the git root above a working
directory, or the directory), ``session:<id>`` (one session).

A place has a reach: what its holder may read and write.  The person at the
command line (``crow memory``) reaches every scope.  A model, through the memory
tools, reaches its own: ``global``, its project and its session, and nothing it
names can widen that (another project's memories may hold what this one must not
see, and a memory planted there would be recalled into that project's turns).
``READ_ALL`` lets it read everywhere (``[memory] model_reads = "all"``); a write
outside its own scopes is done only when Crow asked the person first
(``approved``), or by the person.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

__all__ = ["ANY", "OWN", "READ_ALL", "MemoryError", "MemoryPlace", "project_root", "valid_scope"]

#: Reaches: every scope (the person); global + own project + own session (a model);
#: the same writes, but reads anywhere (a model, with [memory] model_reads = "all").
ANY, OWN, READ_ALL = "any", "own", "read_all"

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
    """Where a caller's memories belong: its project and (in Crow) its session; and
    what it may reach (``ANY``, ``OWN``, ``READ_ALL``)."""

    def __init__(self, cwd: str | Path, session_id: str | None = None, reach: str = ANY) -> None:
        self.project = f"project:{project_root(cwd)}"
        self.session = f"session:{session_id}" if session_id else None
        self.reach = reach

    def visible(self) -> list[str]:
        """The scopes recall and list look at by default: the place's own."""
        return ["global", self.project, *([self.session] if self.session else [])]

    def scope(self, name: str, *, approved: bool = False) -> str:
        """A scope to write to, as stored: the shorthands project and session
        resolved, full forms checked, and within reach (or ``approved`` by the person)."""
        scope = self.resolve(name)
        if self.reach != ANY and not approved and scope not in self.visible():
            raise MemoryError(self._beyond(scope, "write to"))
        return scope

    def resolve(self, name: str) -> str:
        """``name`` as stored, whatever the reach."""
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
        wide = self.reach in (ANY, READ_ALL)
        if name == "all":
            if not wide:
                raise MemoryError(self._beyond("all", "read"))
            return None
        scope = self.resolve(name)
        if not wide and scope not in self.visible():
            raise MemoryError(self._beyond(scope, "read"))
        return [scope]

    def reaches(self, scope: str) -> bool:
        """Whether a memory kept in ``scope`` may be changed from here."""
        return self.reach == ANY or scope in self.visible()

    def outside(self, name: Any) -> str | None:
        """The scope ``name`` names if it is a valid one beyond this place's own (a
        write there needs the person's yes), else None."""
        try:
            scope = self.resolve(name) if isinstance(name, str) else None
        except MemoryError:
            return None
        return scope if scope is not None and scope not in self.visible() else None

    def _beyond(self, scope: str, verb: str) -> str:
        own = ", ".join(self.visible())
        return (
            f"{scope} is beyond this session's memory scopes ({own}): the memory tools "
            f"cannot {verb} it; the person can, with `crow memory`"
        )


def _no_all() -> str:
    raise MemoryError("a memory is kept in one scope: global, project or session")
