"""``crow chat``'s connection to its agent, made again when a server goes away.

A spawned agent that exits ends the chat.  A server reached by ``--url`` may be
restarted (an upgrade, a crash, a laptop waking up): the chat then connects again
with backoff and resumes its session from its cursor, the last
``_meta["crow/seq"]`` it saw (``replayFrom: {"type": "_crow/after"}``): it gets
only what it missed, into the projection it already had.  The token is looked up
again each time (a restarted ``crow serve --http`` may have a new one in its
runtime file).  A server that no longer knows the session ends the retrying.
"""

from __future__ import annotations

import argparse
import contextlib
import random
from collections.abc import Awaitable, Callable
from typing import Any

from crow.acp import AcpError, ClientSide, Session, SessionNotFound

from .args import serve_options
from .connect import AgentUnavailable, connect

__all__ = ["Link", "backoff"]

#: The first wait before connecting again, doubled per failure up to ``MAX_WAIT_S``.
FIRST_WAIT_S = 0.5
MAX_WAIT_S = 10.0


def backoff(failures: int) -> float:
    """The wait after ``failures`` failed attempts: doubling, capped, with jitter
    (clients that lost one server do not all come back at once)."""
    ceiling = min(MAX_WAIT_S, FIRST_WAIT_S * 2**failures)
    return random.uniform(ceiling / 2, ceiling)


class Link:
    """Owns the current ``ClientSide``; ``reopen`` replaces it."""

    def __init__(
        self,
        args: argparse.Namespace,
        *,
        on_permission: Any,
        on_update: Callable[[str, Any], None],
    ) -> None:
        self.args = args
        self.on_permission = on_permission
        self.on_update = on_update
        self.client: ClientSide | None = None
        self._stack: contextlib.AsyncExitStack | None = None

    @property
    def can_reconnect(self) -> bool:
        return bool(self.args.url)

    async def open(self) -> ClientSide:
        """Connect (and initialize); raises AgentUnavailable."""
        stack = contextlib.AsyncExitStack()
        try:
            client = await stack.enter_async_context(
                connect(
                    self.args.command,
                    url=self.args.url,
                    token=self.args.token,
                    on_permission=self.on_permission,
                    serve_options=serve_options(self.args),
                )
            )
        except BaseException:
            await stack.aclose()
            raise
        client.on_update(self.on_update)
        self._stack, self.client = stack, client
        return client

    async def close(self) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            with contextlib.suppress(Exception):
                await stack.aclose()

    async def reopen(
        self,
        session: Session,
        *,
        cwd: str,
        meta: dict[str, Any] | None,
        waiting: Callable[[int, float, str], Awaitable[None]],
    ) -> Session:
        """Connect again until it works and resume ``session`` after its cursor;
        ``waiting(attempt, seconds, why)`` waits before each new attempt.  Raises
        SessionNotFound when the server no longer has the session."""
        old = self.client
        seq = old.seqs.get(session.id) if old is not None else None
        projection = session.projection
        failures = 0
        while True:
            await self.close()
            try:
                client = await self.open()
                projection.turns.clear()  # the prompts of the lost connection
                client.projections[session.id] = projection
                if seq is not None:
                    client.seqs[session.id] = seq
                return await client.resume_session(
                    session.id,
                    cwd,
                    replay=False,
                    replay_after=seq,
                    meta=meta,
                )
            except SessionNotFound:
                raise
            except (AgentUnavailable, AcpError, ConnectionError, OSError) as exc:
                why = getattr(exc, "message", None) or str(exc) or type(exc).__name__
                delay = backoff(failures)
                failures += 1
                await waiting(failures, delay, why)
