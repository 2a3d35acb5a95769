"""A live session: its foreground state, its running turn, who is watching.

``emit`` is the one way an update leaves the agent: it is logged in the store
(committed) and only then queued to every attached connection, with no await
in between, so all watchers see the log's order and a crash can lose nothing
a client has seen.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson

from crow.store.db import SessionRecord, Store
from crow.tools.hub import ToolHub
from crow.tools.permissions import Permissions

from .watchers import Watcher

__all__ = ["LiveSession", "new_id", "now"]


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:16]}"


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(eq=False)
class LiveSession:
    record: SessionRecord
    store: Store
    model: str  # the model that answers this session's prompts
    state: str = "idle"  # idle | running | requires_action
    stop_reason: str | None = None
    watchers: set[Watcher] = field(default_factory=set)
    turn: asyncio.Task[None] | None = None
    title: str | None = None
    permissions: Permissions | None = None
    tools: ToolHub | None = None
    tools_started: asyncio.Task[None] | None = None  # the first prompt waits for it

    async def ready_tools(self) -> ToolHub | None:
        """The session's tool hub once its servers have started (or failed)."""
        if self.tools_started is not None:
            await asyncio.shield(self.tools_started)
        return self.tools

    async def close_tools(self) -> None:
        hub, started = self.tools, self.tools_started
        self.tools, self.tools_started = None, None
        if started is not None and not started.done():
            started.cancel()
        if hub is not None:
            await hub.aclose()

    async def note(self, text: str, severity: str) -> None:
        """A message for the user from Crow itself (not the model's words)."""
        await self.emit(
            {
                "sessionUpdate": "agent_message",
                "messageId": new_id("note"),
                "content": [{"type": "text", "text": text}],
                "_meta": {"crow/notice": severity},
            }
        )

    @property
    def id(self) -> str:
        return self.record.id

    @property
    def busy(self) -> bool:
        return self.turn is not None and not self.turn.done()

    async def emit(self, update: dict[str, Any]) -> None:
        """Log ``update``, then send it to every watcher."""
        body = orjson.dumps(update)
        state = None
        if update.get("sessionUpdate") == "state_update":
            state = self.state = update["state"]
            self.stop_reason = update.get("stopReason") if state == "idle" else None
        seq = self.store.append_update(
            self.id,
            body,
            state=state,
            stop_reason=self.stop_reason if state else None,
            now=now() if state == "idle" else None,
        )
        backed_up = []
        for watcher in self.watchers:
            watcher.deliver(self.id, seq, update, body)
            if watcher.backed_up:
                backed_up.append(watcher)
        for slow in backed_up:  # a slow reader slows its turn, never drops updates
            await slow.drained()

    def state_snapshot(self) -> dict[str, Any]:
        """The current foreground state, as sent after every resume."""
        update: dict[str, Any] = {"sessionUpdate": "state_update", "state": self.state}
        if self.state == "idle" and self.stop_reason:
            update["stopReason"] = self.stop_reason
        return update
