"""What the parts of the agent need of each other, as narrow protocols.

``CrowAgent`` (crow.agent.service) runs turns; a ``Turn`` (crow.agent.turn) runs
slash commands, compaction and memory recall.  Each part takes the protocol of what
it uses rather than the class above it, so imports point down: the turn never
imports the service, and the slash commands, compaction and memory never import
the turn.

- ``TurnHost``: what a turn and its slash commands need of the agent.
- ``SessionHost``: what the agent's own parts (verdicts, prompt insertion, the
  shared store) need besides: the live sessions and the resident judge.
- ``TurnContext``: what slash commands, compaction and memory need of the turn.
- ``Follower``: crow serve's own judge, as the agent sees it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, Protocol

from crow.config import Config
from crow.models.router import ModelRouter
from crow.store.base import SessionStore
from crow.store.db import SessionRecord

from .session import LiveSession

__all__ = ["Follower", "SessionHost", "TurnContext", "TurnHost"]


class Follower(Protocol):
    """Crow's own judge inside ``crow serve`` (crow.orchestra.resident): told which
    sessions to verify; it watches them over an in-process connection of followers."""

    def follow(self, session: LiveSession) -> None: ...

    def unfollow(self, session_id: str) -> None: ...

    async def aclose(self) -> None: ...


class TurnHost(Protocol):
    """What a turn and its slash commands need of the agent that runs them."""

    config: Config
    router: ModelRouter
    store: SessionStore

    def spawn(self, coro: Coroutine[Any, Any, Any], *, name: str) -> asyncio.Task[Any]:
        """Run work that outlives the request that started it."""
        ...

    def advance(self, session: LiveSession) -> None:
        """The session may be free: its first held prompt goes in."""
        ...

    async def switch_model(self, session: LiveSession, model: str) -> None:
        """Make ``model`` the session's model, and tell every watcher."""
        ...


class SessionHost(TurnHost, Protocol):
    """What the agent's own parts need besides: its live sessions and its judge."""

    live: dict[str, LiveSession]
    judge: Follower | None

    async def live_session(self, session_id: str) -> LiveSession:
        """The live session (brought back if it was parked); raises SessionNotFound
        if it is not open here."""
        ...

    def activate(self, record: SessionRecord) -> LiveSession:
        """Make a stored session live here."""
        ...

    def unload_if_unwatched(self, session: LiveSession, *, quiet: bool = True) -> None:
        """Free the session if no client watches it and nothing runs."""
        ...


class TurnContext(Protocol):
    """What slash commands, compaction and memory recall need of the turn."""

    host: TurnHost
    session: LiveSession
    store: SessionStore
    blocks: list[Any]  # the prompt's content blocks

    async def note(self, text: str, severity: str) -> None:
        """A message for the user from Crow itself."""
        ...
