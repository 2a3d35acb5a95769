"""The judge inside ``crow serve``: it verifies the sessions clients ask it to.

A client turns verifying on for a session with ``_meta["crow/verify"]`` on
``session/new`` or ``session/resume`` (``crow run --verify``), or ``[judge]
every_session`` turns it on for all.  The agent then tells this judge to follow
the session, and the judge is what ``crow judge --url`` is, an ordinary ACP v2
client, only over an in-process connection whose watchers are followers (they
hold no session: a session nobody else watches is unloaded, and the judge stops
following it until a client comes back).

Following replays the session from its ``judgedSeq`` (the log seq of its last
verdict) with the ``_crow/after`` cursor.  A turn that ended while no judge was
there (the server was killed mid-verdict) is judged then: nothing is left
unjudged or judged twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from crow.acp import AcpError, ClientSide, Transport, schema
from crow.config import Config
from crow.models.router import ModelRouter

from .judge import DEFAULT_RUBRIC, verify

__all__ = ["ResidentJudge"]

log = logging.getLogger("crow.judge")


class ResidentJudge:
    """Follows sessions to verify (crow.agent.service.Follower)."""

    def __init__(
        self, config: Config, router: ModelRouter, connect: Callable[[], Transport]
    ) -> None:
        self.config, self.router, self._connect = config, router, connect
        self._client: ClientSide | None = None
        self._connecting = asyncio.Lock()
        self._following: dict[str, asyncio.Task[None]] = {}

    def follow(self, session: Any) -> None:
        """Judge each turn of ``session`` (a live session) from its last verdict on."""
        running = self._following.get(session.id)
        if running is not None and not running.done():
            return
        config = session.record.config
        task = asyncio.create_task(
            self._judge(
                session.id,
                session.record.cwd,
                config.get("verify") or {},
                config.get("judgedSeq", 0),
            ),
            name=f"judge-{session.id}",
        )
        self._following[session.id] = task

    def unfollow(self, session_id: str) -> None:
        task = self._following.pop(session_id, None)
        if task is not None:
            task.cancel()

    async def aclose(self) -> None:
        tasks = list(self._following.values())
        self._following.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._client is not None:
            await self._client.aclose()

    async def _judge(
        self, session_id: str, cwd: str, setting: dict[str, Any], judged_seq: int
    ) -> None:
        settings = self.config.judge
        model = settings.model or self.config.chain[0]
        try:
            client = await self._connected()
            verdicts = verify(
                client,
                self.router,
                model,
                session_id,
                rubric=setting.get("rubric") or settings.rubric or DEFAULT_RUBRIC,
                check=setting.get("check") or settings.check,
                check_timeout_s=settings.check_timeout_s,
                max_rounds=setting.get("maxRounds") or settings.max_rounds,
                cwd=cwd,
                replay_after=judged_seq if isinstance(judged_seq, int) else 0,
            )
            async for done in verdicts:
                log.info("%s: %s", session_id, done.verdict.line())
        except (AcpError, ConnectionError) as exc:
            log.warning("stopped judging %s: %s", session_id, exc)
        except Exception:
            log.exception("the judge of %s failed", session_id)
        finally:
            if self._following.get(session_id) is asyncio.current_task():
                del self._following[session_id]
            if self._client is not None:
                self._client.projections.pop(session_id, None)

    async def _connected(self) -> ClientSide:
        async with self._connecting:
            if self._client is None or self._client.closed.is_set():
                client = ClientSide(
                    self._connect(), info=schema.Implementation(name="crow-judge", version="2")
                )
                await client.__aenter__()
                try:
                    await client.initialize()
                except BaseException:
                    with contextlib.suppress(Exception):
                        await client.aclose()
                    raise
                self._client = client
            return self._client
