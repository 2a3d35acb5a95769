"""Permission questions across the servers of a shared (PostgreSQL) store.

A turn runs on one server, but its session's clients may be attached to others.
So the server running the turn asks its own clients and, through the store, the
clients of every other server: ``RemoteAsking`` is one more asker of the
``Question`` (asking.py), for whom "asking" means filing the question in the
``questions`` table.  Every server hears of each filed, answered or closed question
(``crow_questions``, crow.store.listen); one with clients on that session asks
them (``SharedQuestions.heard``; a session parked there comes back first, and asks
the questions open on it as it does) and files the first answer.  The store keeps only
the first answer filed (``answer_question``), so the first answer wins across
servers as it does among one server's clients; the server running the turn then
withdraws its question everywhere (closing it cancels the other servers' askings).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson

from crow.acp import schema
from crow.ids import new_id
from crow.store.db import StoreError

from .asking import Question

if TYPE_CHECKING:
    from crow.store.base import SessionStore

    from .session import LiveSession

__all__ = ["RemoteAsking", "SharedQuestions"]

log = logging.getLogger("crow.agent")


class SharedQuestions:
    """One server's side of the shared questions."""

    def __init__(
        self,
        store: SessionStore,
        live: dict[str, LiveSession],
        wake: Callable[[str], bool],
    ) -> None:
        self.store = store
        self.live = live
        self.wake = wake  # a session parked here comes back (crow.agent.parking)
        self.filed: dict[str, asyncio.Future[str]] = {}  # ours, awaiting an answer
        self.asking: dict[str, asyncio.Task[None]] = {}  # others', put to our clients
        self._tasks: set[asyncio.Task[None]] = set()

    def asker(self, session_id: str) -> RemoteAsking:
        return RemoteAsking(self, session_id)

    def heard(self, question_id: str) -> None:
        """A question was filed, answered or closed somewhere: act on its row."""
        task = asyncio.create_task(self._read(question_id), name=f"question-{question_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def pick_up(self, session_id: str) -> None:
        """A session made live here: the questions already open on it, to our clients."""
        for question_id in await self.store.open_questions(session_id):
            self.heard(question_id)

    async def _read(self, question_id: str) -> None:
        try:
            row = await self.store.question(question_id)
        except StoreError as exc:
            log.warning("reading question %s failed: %s", question_id, exc)
            return
        if row is None:
            return
        session_id, params, outcome, closed = row
        ours = self.filed.get(question_id)
        if ours is not None:
            if outcome is not None and not ours.done():
                ours.set_result(outcome)  # answered on another server
            return
        if outcome is not None or closed:
            asking = self.asking.pop(question_id, None)
            if asking is not None:
                asking.cancel()  # answered elsewhere, or withdrawn: stop asking here
            return
        session = self.live.get(session_id)
        if session is None:
            self.wake(session_id)  # parked here: back, it asks its open ones (pick_up)
            return
        if question_id in self.asking:
            return
        request = schema.RequestPermissionRequest.model_validate(orjson.loads(params))
        self.asking[question_id] = asyncio.create_task(
            self._ask_here(question_id, session, Question(request)),
            name=f"asking-{question_id}",
        )

    async def _ask_here(self, question_id: str, session: LiveSession, question: Question) -> None:
        session.questions.add(question)  # clients attaching meanwhile are asked too
        try:
            for watcher in list(session.watchers):
                if not watcher.follower:
                    question.ask(watcher)
            outcome = await question.outcome()
            if outcome is not None:
                await self.store.answer_question(
                    question_id, orjson.dumps(outcome.to_wire()).decode()
                )
        except StoreError as exc:
            log.warning("answering question %s failed: %s", question_id, exc)
        finally:
            session.questions.discard(question)
            self.asking.pop(question_id, None)

    async def aclose(self) -> None:
        for task in [*self.asking.values(), *self._tasks]:
            task.cancel()


class RemoteAsking:
    """The clients of every other server, as one more asker of a ``Question``."""

    follower = False

    def __init__(self, shared: SharedQuestions, session_id: str) -> None:
        self.shared = shared
        self.session_id = session_id

    async def request_permission(self, params: schema.RequestPermissionRequest) -> Any:
        question_id = new_id("q")
        answer: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self.shared.filed[question_id] = answer
        try:
            await self.shared.store.file_question(
                question_id, self.session_id, orjson.dumps(params.to_wire()).decode()
            )
            outcome = await answer
        finally:
            # Answered (anywhere) or withdrawn: the other servers stop asking.  Ours
            # until the close is stored: a notice of its filing read before then finds
            # it open, and would put it to this server's clients a second time.
            closing = asyncio.ensure_future(self.shared.store.close_question(question_id))
            closing.add_done_callback(lambda _: self.shared.filed.pop(question_id, None))
            with contextlib.suppress(StoreError, asyncio.CancelledError):
                await asyncio.shield(closing)
        return schema.RequestPermissionResponse.model_validate({"outcome": orjson.loads(outcome)})
