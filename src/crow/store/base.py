"""What the agent needs of a session store, as a protocol: ``SessionStore``.

The agent (crow.agent) holds its store as awaitable calls on the event loop: the
session records, the update log, the model transcript, the turn lease, and, on a
store shared by several servers, their permission questions and held prompts, and
``follow_updates`` to hear what the others do.  ``AsyncStore`` (aio.py) is that
store over either backend (``Store``: SQLite or PostgreSQL); a test may give the
agent anything else that has these calls.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol, TypeVar, Unpack

from .backend import Store
from .listen import Heard
from .records import (
    HeldRow,
    PendingMessage,
    PendingUpdate,
    SessionRecord,
    StateChange,
    TranscriptEntry,
)

__all__ = ["SessionStore"]

T = TypeVar("T")


class SessionStore(Protocol):
    """The agent's store: every call is awaitable and keeps the order it was made in.

    Appends and the lease return futures, not coroutines: a caller that is cancelled
    may still have to wait for one (``crow.store.aio.settled``).  A database failure
    is ``StoreUnavailable``.
    """

    #: The blocking store, for work the agent runs on the store's thread (``submit``).
    sync: Store

    @property
    def shared(self) -> bool:
        """Other servers write to this store as they run (PostgreSQL)."""
        ...

    def submit(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> asyncio.Future[T]: ...

    async def drain(self) -> None: ...

    async def aclose(self) -> None: ...

    async def follow_updates(self, heard: Heard) -> None:
        """Hear, until cancelled, what the other servers of a shared store do."""
        ...

    def logged_here(self, session_id: str) -> int:
        """The last seq of the session this process logged (0: none known)."""
        ...

    def after_appends(self, then: Callable[[], None]) -> bool:
        """Call ``then`` when the next batch of appends under way comes back; False
        (and ``then`` dropped) when none is under way."""
        ...

    # ---- sessions -----------------------------------------------------------------
    async def create_session(self, **fields: Any) -> SessionRecord: ...

    async def get_session(
        self, session_id: str, *, include_deleted: bool = False
    ) -> SessionRecord | None: ...

    async def update_session(self, session_id: str, **fields: Any) -> None: ...

    async def delete_session(self, session_id: str) -> None: ...

    async def list_sessions(
        self, *, cwd: str | None = None, cursor: str | None = None
    ) -> tuple[list[SessionRecord], str | None]: ...

    # ---- the turn lease -----------------------------------------------------------
    def acquire_turn(self, session_id: str, **fields: Any) -> asyncio.Future[bool]: ...

    async def release_turn(self, session_id: str, *, owner: str) -> None: ...

    async def renew_leases(self, owner: str, expires: float) -> int: ...

    # ---- the update log and the transcript ----------------------------------------
    def append_update(
        self, session_id: str, body: bytes, **change: Unpack[StateChange]
    ) -> asyncio.Future[int]: ...

    def append_updates(
        self, batch: list[PendingUpdate], transcript: list[PendingMessage] | None = None
    ) -> list[asyncio.Future[int]]: ...

    async def replay(self, session_id: str, *, after: int = 0) -> list[tuple[int, bytes]]: ...

    async def replay_page(
        self, session_id: str, *, after: int, limit: int
    ) -> tuple[list[tuple[int, bytes]], int]:
        """Of the next ``limit`` updates after ``after``, those a replay shows, and the
        last seq read (``after`` if none)."""
        ...

    async def updates(self, session_id: str, *, after: int = 0) -> list[tuple[int, bytes]]: ...

    async def last_seq(self, session_id: str) -> int: ...

    async def append_message(
        self, session_id: str, message: dict[str, Any], *, kind: str = "message"
    ) -> int: ...

    async def transcript(self, session_id: str) -> list[TranscriptEntry]: ...

    async def transcript_after(self, session_id: str, after: int) -> list[TranscriptEntry]: ...

    # ---- what the servers of a shared store share ---------------------------------
    async def file_question(self, question_id: str, session_id: str, params: str) -> None: ...

    async def answer_question(self, question_id: str, outcome: str) -> bool: ...

    async def close_question(self, question_id: str) -> None: ...

    async def question(self, question_id: str) -> tuple[str, str, str | None, bool] | None: ...

    async def open_questions(self, session_id: str) -> list[str]: ...

    async def hold_prompt(self, held_id: str, session_id: str, **fields: Any) -> int: ...

    async def drop_held(self, held_id: str, session_id: str) -> None: ...

    async def held_prompts(self, session_id: str, now: float) -> list[HeldRow]: ...

    async def renew_held(self, owner: str, expires: float) -> int: ...

    async def announce_cancel(self, session_id: str) -> None: ...
