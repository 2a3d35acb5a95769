"""Who watches a session: the connections its updates fan out to.

A watcher takes each update as it is logged (``deliver``, synchronous, so
every watcher sees the log's order), takes the stored log on a resume with
replay (``replay``, then ``resumed``), and can be asked for permission.  An
ACP v2 connection gets the logged bytes as they are; the v1 face
(``crow.agent.v1``) translates them.
"""

from __future__ import annotations

from typing import Any, Protocol

import orjson

from crow.acp import AgentSide, schema
from crow.acp.frames import encode_update

__all__ = ["V2Watcher", "Watcher", "update_frame"]


#: The frame made last: (body, seq, session id, frame).  An update goes to each of
#: its session's watchers in turn, and every v2 watcher's queue then holds this one
#: object rather than a copy of its own (50 watchers of a busy session: 50 times less).
_last_frame: tuple[bytes, int | None, str, bytes] = (b"", None, "", b"")


def update_frame(session_id: str, body: bytes, seq: int | None) -> bytes:
    """The update's ``session/update`` frame (``crow.acp.frames``), the same bytes
    object again for the same update."""
    global _last_frame
    last_body, last_seq, last_session, frame = _last_frame
    if body is last_body and seq == last_seq and session_id == last_session:
        return frame
    frame = encode_update(session_id, body, seq)
    _last_frame = (body, seq, session_id, frame)
    return frame


class Watcher(Protocol):
    #: A follower (Crow's own judge) watches a session without holding it: it does not
    #: keep the session loaded, start its tools, or count as the one client left.
    follower: bool

    def deliver(
        self, session_id: str, seq: int | None, update: dict[str, Any], body: bytes
    ) -> None:
        """Queue one logged update (never blocks, never raises for a gone peer);
        ``seq`` None: sent unlogged, the store having failed."""

    def replay(self, session_id: str, seq: int, body: bytes) -> None:
        """Queue one stored update of a replay (never blocks)."""

    async def resumed(self, session_id: str, state: dict[str, Any]) -> None:
        """The resume is done: ``state`` is the session's current state_update."""

    @property
    def backed_up(self) -> bool: ...

    async def drained(self) -> None: ...

    async def request_permission(self, params: schema.RequestPermissionRequest) -> Any:
        """The peer's RequestPermissionResponse (raises if it cannot answer)."""


class V2Watcher:
    """An ACP v2 connection: updates go out exactly as logged."""

    def __init__(self, side: AgentSide, *, follower: bool = False) -> None:
        self.side = side
        self.follower = follower
        self.mcp_links: Any = None  # MCP over ACP on this connection (crow.tools.acp_mcp)

    def deliver(
        self, session_id: str, seq: int | None, update: dict[str, Any], body: bytes
    ) -> None:
        self.side.peer.send_frame(update_frame(session_id, body, seq))

    def replay(self, session_id: str, seq: int, body: bytes) -> None:
        self.side.peer.send_frame(update_frame(session_id, body, seq))

    async def resumed(self, session_id: str, state: dict[str, Any]) -> None:
        """A current-state snapshot after every resume (ACP-V2.md §16, [T]).

        Queued without waiting for the writer: the session's log is locked
        while a watcher attaches, and a slow reader must not hold it."""
        self.side.peer.send_frame(update_frame(session_id, orjson.dumps(state), None))

    @property
    def backed_up(self) -> bool:
        return self.side.peer.backed_up

    async def drained(self) -> None:
        await self.side.peer.drained()

    async def request_permission(self, params: schema.RequestPermissionRequest) -> Any:
        return await self.side.request_permission(params)

    def __hash__(self) -> int:
        return hash(self.side)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, V2Watcher) and other.side is self.side
