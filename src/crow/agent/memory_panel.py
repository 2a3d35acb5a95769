"""A client's memory panel: ``_crow/memory/search``, ``remember`` and ``forget``.

The person at a client (the web app's memory panel) searches, adds and forgets the
memories of a session it has open, in that session's own scopes (crow.memory.scopes):
``global``, its project and the session.  The same reach as the model's tools,
not the command line's: a client sees one session's place, not every project's.
The scope a call names is one of three words, resolved against the session's place
here; a memory kept beyond it is neither shown nor forgotten.

Answers: a memory is ``{"id", "text", "scope", "tags", "created", "updated"}``.
Errors: ``-32602`` with one line for a bad query, text, scope or id.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from crow.acp import InvalidParams, SessionNotFound
from crow.memory import has_memories
from crow.memory.scopes import OWN, MemoryError, MemoryPlace

if TYPE_CHECKING:
    from crow.config import Config
    from crow.memory.store import Memory, MemoryStore

    from .session import LiveSession
    from .watchers import Watcher

__all__ = ["MemoryPanel"]

#: The most memories one search answers.
MAX_LIMIT = 100
#: The scopes a client may name: resolved against its session's place.
SCOPES = ("session", "project", "global")


class MemoryPanel:
    def __init__(self, config: Config, live: dict[str, LiveSession]) -> None:
        self.config = config
        self.live = live

    async def search(self, watcher: Watcher, params: dict[str, Any]) -> dict[str, Any]:
        """``{sessionId, query?, scope?, limit?}``: the best matches of ``query`` (the
        latest memories when it is empty) → ``{"memories": [...]}``."""
        place = self._place(watcher, params)
        query = params.get("query") or ""
        limit = params.get("limit", 20)
        if not isinstance(query, str):
            raise InvalidParams("query must be a string")
        if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_LIMIT:
            raise InvalidParams(f"limit must be a whole number from 1 to {MAX_LIMIT}")
        scopes = [_scope(place, params["scope"])] if params.get("scope") else place.visible()
        if not has_memories(self.config.paths.memory):
            return {"memories": []}  # nothing kept yet: no LanceDB, no model

        def look(store: MemoryStore) -> list[Memory]:
            if not query.strip():
                return store.list_memories(scopes=scopes, limit=limit)
            return [hit.memory for hit in store.recall(query, scopes=scopes, limit=limit).hits]

        found = await self._run(look)
        return {"memories": [_shown(memory) for memory in found]}

    async def remember(self, watcher: Watcher, params: dict[str, Any]) -> dict[str, Any]:
        """``{sessionId, text, scope?}`` (scope ``project`` unless named) → ``{"id",
        "scope", "replaced"}``: ``replaced`` is the text of the near-duplicate it took
        the place of, or null."""
        place = self._place(watcher, params)
        text = params.get("text")
        if not isinstance(text, str) or not text.strip():
            raise InvalidParams("text must be the memory to keep (a non-empty string)")
        scope = _scope(place, params.get("scope") or "project")
        session_id = str(params["sessionId"])
        done = await self._run(lambda store: store.remember(text, scope=scope, session=session_id))
        return {"id": done.id, "scope": scope, "replaced": done.replaced_text}

    async def forget(self, watcher: Watcher, params: dict[str, Any]) -> dict[str, Any]:
        """``{sessionId, id}`` → ``{"forgotten": bool}``; a memory beyond the session's
        scopes is refused, and nothing is deleted."""
        place = self._place(watcher, params)
        memory_id = params.get("id")
        if not isinstance(memory_id, str):
            raise InvalidParams("id must be a memory's id (mem_…)")

        def forget(store: MemoryStore) -> bool:
            found = store.get(memory_id)
            if found is None:
                return False
            if not place.reaches(found.scope):
                raise MemoryError(f"{memory_id} is kept beyond this session's memory scopes")
            return store.forget(memory_id) is not None

        if not has_memories(self.config.paths.memory):
            return {"forgotten": False}
        return {"forgotten": await self._run(forget)}

    def _place(self, watcher: Watcher, params: dict[str, Any]) -> MemoryPlace:
        """The place of the session ``params`` names, which ``watcher`` has open."""
        session_id = params.get("sessionId")
        session = self.live.get(session_id) if isinstance(session_id, str) else None
        if session is None or watcher not in session.watchers:
            raise SessionNotFound(
                str(session_id),
                message=f"Session not open here: {session_id} (resume it first)",
            )
        return MemoryPlace(session.record.cwd, session.id, OWN)

    async def _run(self, work: Any) -> Any:
        """``work(store)`` on a thread (LanceDB blocks); a refusal is ``-32602``."""
        from crow.memory.shared import shared_store  # LanceDB, numpy: not at start-up

        config = self.config

        def run() -> Any:
            return work(shared_store(config.paths.memory, config.memory))

        try:
            return await asyncio.to_thread(run)
        except MemoryError as exc:
            raise InvalidParams(str(exc)) from None


def _scope(place: MemoryPlace, name: Any) -> str:
    if name not in SCOPES:
        raise InvalidParams(f"scope must be one of {', '.join(SCOPES)}", data={"scope": name})
    return place.scope(name)


def _shown(memory: Memory) -> dict[str, Any]:
    shown = memory.to_dict()
    return {key: shown[key] for key in ("id", "text", "scope", "tags", "created", "updated")}
