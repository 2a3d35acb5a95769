"""Asking the people watching a session for permission (ACP-V2.md §7.4).

A ``Question`` is asked of every client attached to the session when it is
raised, and of every client that attaches (resumes) while it is still open.
The first answer wins and the other askings are withdrawn with
``$/cancel_request``.  A client that has gone (its connection dropped) is
skipped and the question stays open, with the session in ``requires_action``,
until some client answers or the turn is cancelled: a person who comes back
finds the question waiting.  A client that answers with an error cannot ask
its user; once every client asked has failed that way, the outcome is None,
which never counts as approval.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import Any

from crow.acp import schema

from .watchers import Watcher

__all__ = ["Question"]

log = logging.getLogger("crow.agent")


class Question:
    def __init__(self, params: schema.RequestPermissionRequest) -> None:
        self.params = params
        self._answer: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._asking: dict[Watcher, asyncio.Task[Any]] = {}
        self._refused = False  # some client answered with an error

    def ask(self, watcher: Watcher) -> None:
        """Put the question to ``watcher`` (once while it is being asked)."""
        if self._answer.done() or watcher in self._asking:
            return
        task = asyncio.create_task(watcher.request_permission(self.params))
        self._asking[watcher] = task
        task.add_done_callback(functools.partial(self._answered, watcher))

    async def outcome(self) -> Any:
        """The first answer's outcome (a RequestPermissionOutcome).

        Cancelling the caller withdraws the question from everyone.
        """
        try:
            return await self._answer
        finally:
            for task in self._asking.values():
                task.cancel()  # withdrawn: the peer sends $/cancel_request

    def _answered(self, watcher: Watcher, task: asyncio.Task[Any]) -> None:
        if self._asking.get(watcher) is task:
            del self._asking[watcher]  # asked again if it attaches again
        if task.cancelled():
            return
        exc = task.exception()
        if exc is None:
            self._settle(task.result().outcome)
            return
        log.info("a client did not answer a permission request: %s", exc)
        self._refused = self._refused or not isinstance(exc, ConnectionError)
        if self._refused and not self._asking:
            self._settle(None)

    def _settle(self, outcome: Any) -> None:
        if not self._answer.done():
            self._answer.set_result(outcome)
