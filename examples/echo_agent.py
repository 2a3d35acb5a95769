"""An ACP v2 echo agent: the baseline session lifecycle, in memory, over stdio.

    python examples/echo_agent.py [--chunks N] [--delay-ms D]

Each prompt is acknowledged at once with its ``messageId``, then reported as
``user_message`` → ``running`` → ``Echo: <text>`` in N ``agent_message_chunk``s
(D ms apart) → an ``agent_message`` snapshot → ``idle`` ``end_turn``, or
``idle`` ``cancelled`` after ``session/cancel`` or ``session/close`` (even one
written right behind the prompt: an acknowledged prompt always ends in idle).
History is kept for ``session/resume`` with ``replayFrom: {"type": "start"}``.

It advertises no prompt or MCP capabilities, so it takes ``text`` and
``resource_link`` blocks only and no MCP servers: anything else is ``-32602``.

stdout carries JSON-RPC only; logs go to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from crow.acp import AgentSide, InvalidParams, SessionNotFound, open_stdio, schema
from crow.acp.transports.stdio import MAX_MESSAGE_BYTES

LIST_PAGE_SIZE = 50
#: Baseline prompt blocks (ACP-V2.md §9); image, audio and resource need capabilities.
PROMPT_BLOCKS = frozenset({"text", "resource_link"})
#: MCP server types accepted: none is advertised (§5.1), so none.
MCP_SERVER_TYPES: frozenset[str] = frozenset()


@dataclass
class EchoSession:
    session_id: str
    cwd: str
    history: list[dict[str, Any]] = field(default_factory=list)  # replayable updates
    title: str | None = None
    updated_at: str = ""
    open: bool = True
    turn: asyncio.Task[None] | None = None
    # Set to end the turn: an event, not task.cancel(), so a cancel that lands
    # before the turn's first step still ends it with idle (cancelled).
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    last_stop: str | None = None

    @property
    def busy(self) -> bool:
        return self.turn is not None and not self.turn.done()


class EchoAgent:
    def __init__(self, agent: AgentSide, *, chunks: int, delay_s: float) -> None:
        self.agent = agent
        self.chunks = max(1, chunks)
        self.delay_s = delay_s
        self.sessions: dict[str, EchoSession] = {}
        for method, handler in {
            "session/new": self.new_session,
            "session/list": self.list_sessions,
            "session/resume": self.resume_session,
            "session/close": self.close_session,
            "session/prompt": self.prompt,
            "session/cancel": self.cancel,
        }.items():
            agent.handle(method, handler)

    # ---- session lifecycle --------------------------------------------------
    async def new_session(self, params: schema.NewSessionRequest) -> schema.NewSessionResponse:
        _require_absolute(params.cwd)
        _refuse_mcp_servers(params.mcp_servers)
        session = EchoSession(session_id=f"sess_{uuid.uuid4().hex[:12]}", cwd=params.cwd)
        session.updated_at = _now()
        self.sessions[session.session_id] = session
        return schema.NewSessionResponse(session_id=session.session_id)

    async def list_sessions(
        self, params: schema.ListSessionsRequest
    ) -> schema.ListSessionsResponse:
        found = [s for s in self.sessions.values() if params.cwd in (schema.UNSET, None, s.cwd)]
        start = _decode_cursor(params.cursor, len(found))
        page = found[start : start + LIST_PAGE_SIZE]
        response = schema.ListSessionsResponse(sessions=[_info(s) for s in page])
        if start + LIST_PAGE_SIZE < len(found):
            response.next_cursor = str(start + LIST_PAGE_SIZE)
        return response

    async def resume_session(
        self, params: schema.ResumeSessionRequest
    ) -> schema.ResumeSessionResponse:
        session = self._session(params.session_id, must_be_open=False)
        _refuse_mcp_servers(params.mcp_servers)
        if params.cwd != session.cwd:
            raise InvalidParams(f"cwd {params.cwd} is not this session's cwd ({session.cwd})")
        replay = params.replay_from
        if replay not in (schema.UNSET, None) and not isinstance(replay, schema.ReplayFromStart):
            raise InvalidParams(
                f"Unsupported replay cursor {getattr(replay, 'type', '?')!r}: use start",
                data={"replayFrom": getattr(replay, "type", None)},
            )
        session.open = True
        if isinstance(replay, schema.ReplayFromStart):
            for update in list(session.history):
                await self.agent.send_update(session.session_id, update)
        state: dict[str, Any] = {"sessionUpdate": "state_update"}
        if session.busy:
            state["state"] = "running"
        else:
            state["state"] = "idle"
            if session.last_stop:
                state["stopReason"] = session.last_stop
        await self.agent.send_update(session.session_id, state)  # current state, then reply
        return schema.ResumeSessionResponse()

    async def close_session(self, params: schema.CloseSessionRequest) -> None:
        session = self.sessions.get(params.session_id)
        if session is None:
            return  # closing an unknown session succeeds
        if session.busy:
            assert session.turn is not None
            session.stop.set()
            await asyncio.wait([session.turn])  # its idle/cancelled goes out first
        session.open = False

    # ---- prompts ------------------------------------------------------------
    async def prompt(self, params: schema.PromptRequest) -> schema.PromptResponse:
        session = self._session(params.session_id)
        if session.busy:
            raise InvalidParams(
                "The session is busy with a prompt: wait for idle or send session/cancel",
                data={"sessionId": session.session_id, "reason": "busy"},
            )
        if not params.prompt:
            raise InvalidParams("The prompt is empty")
        _refuse_unadvertised_blocks(params.prompt)
        content = _echoable(params.prompt)  # refused now, not after the acknowledgement
        message_id = f"msg_u_{uuid.uuid4().hex[:12]}"
        text = "".join(getattr(b, "text", "") for b in params.prompt if b.type == "text")
        session.title = session.title or text[:60]
        # Marked busy before the reply: a second prompt right behind is refused.
        session.stop = asyncio.Event()
        session.turn = self.agent.spawn(
            self.run_turn(session, message_id, content, text), name="echo-turn"
        )
        return schema.PromptResponse(message_id=message_id)

    async def run_turn(
        self, session: EchoSession, message_id: str, content: list[Any], text: str
    ) -> None:
        """Echo one prompt; whatever happens, an acknowledged prompt ends in idle."""
        sid = session.session_id
        user = {"sessionUpdate": "user_message", "messageId": message_id, "content": content}
        session.history.append(user)
        stop = "error"
        try:
            await self.agent.send_update(sid, user)
            await self.agent.send_update(sid, {"sessionUpdate": "state_update", "state": "running"})
            stop = await self._echo(session, text)
        finally:
            session.last_stop = stop
            session.updated_at = _now()
            await self.agent.send_update(
                sid, {"sessionUpdate": "state_update", "state": "idle", "stopReason": stop}
            )

    async def _echo(self, session: EchoSession, text: str) -> str:
        """Stream ``Echo: <text>``; returns the stop reason."""
        sid = session.session_id
        reply_id = f"msg_a_{uuid.uuid4().hex[:12]}"
        sent = ""
        stop = "end_turn"
        for piece in _split(f"Echo: {text}", self.chunks):
            if self.delay_s and sent:
                await self._pause(session.stop)
            if session.stop.is_set():
                stop = "cancelled"
                break
            await self.agent.send_update(
                sid,
                {
                    "sessionUpdate": "agent_message_chunk",
                    "messageId": reply_id,
                    "content": {"type": "text", "text": piece},
                },
            )
            sent += piece
        snapshot = {
            "sessionUpdate": "agent_message",
            "messageId": reply_id,
            "content": [{"type": "text", "text": sent}],
        }
        session.history.append(snapshot)
        if stop == "end_turn":
            await self.agent.send_update(sid, snapshot)
        return stop

    async def _pause(self, stop: asyncio.Event) -> None:
        """Wait between chunks; a cancel ends the wait at once."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), self.delay_s)

    async def cancel(self, params: schema.CancelSessionNotification) -> None:
        session = self.sessions.get(params.session_id)
        if session is not None and session.busy:
            session.stop.set()

    def _session(self, session_id: str, *, must_be_open: bool = True) -> EchoSession:
        session = self.sessions.get(session_id)
        if session is None or (must_be_open and not session.open):
            raise SessionNotFound(session_id)
        return session


def _split(text: str, parts: int) -> list[str]:
    size = max(1, -(-len(text) // parts))
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _refuse_unadvertised_blocks(prompt: list[Any]) -> None:
    for block in prompt:
        if block.type not in PROMPT_BLOCKS:
            raise InvalidParams(
                f"Prompt blocks of type {block.type!r} are not accepted: this agent "
                f"takes {sorted(PROMPT_BLOCKS)} (see its prompt capabilities)",
                data={"type": block.type},
            )


def _echoable(prompt: list[Any]) -> list[Any]:
    """The prompt's blocks as they go back in ``user_message``."""
    try:
        return [block.to_wire() for block in prompt]
    except ValueError as exc:  # pydantic stops at its depth limit
        raise InvalidParams(f"The prompt cannot be echoed: {exc}") from None


def _refuse_mcp_servers(servers: Any) -> None:
    for server in servers if schema.is_set(servers) and servers else []:
        if server.type not in MCP_SERVER_TYPES:
            raise InvalidParams(
                f"MCP servers of type {server.type!r} are not accepted: "
                "this agent advertises no MCP transport",
                data={"type": server.type},
            )


def _require_absolute(path: str) -> None:
    if not path.startswith("/"):
        raise InvalidParams(f"cwd must be an absolute path, got {path!r}", data={"cwd": path})


def _decode_cursor(cursor: Any, total: int) -> int:
    if cursor in (schema.UNSET, None):
        return 0
    if not (isinstance(cursor, str) and cursor.isdigit() and int(cursor) <= total):
        raise InvalidParams("Invalid cursor: pass back a nextCursor from session/list")
    return int(cursor)


def _info(session: EchoSession) -> schema.SessionInfo:
    info = schema.SessionInfo(session_id=session.session_id, cwd=session.cwd)
    info.updated_at = session.updated_at
    if session.title:
        info.title = session.title
    return info


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=1, help="split each reply into N chunks")
    parser.add_argument("--delay-ms", type=float, default=0, help="pause between chunks")
    parser.add_argument("--max-message-bytes", type=int, default=MAX_MESSAGE_BYTES)
    parser.add_argument(
        "--accept-batches", action="store_true", help="answer JSON-RPC batches as arrays"
    )
    args = parser.parse_args()
    agent = AgentSide(
        await open_stdio(max_message_bytes=args.max_message_bytes),
        info=schema.Implementation(name="crow-echo-agent", title="Crow echo agent", version="0.1"),
        capabilities=schema.AgentCapabilities(session=schema.SessionCapabilities()),
        accept_batches=args.accept_batches,
    )
    EchoAgent(agent, chunks=args.chunks, delay_s=args.delay_ms / 1000)
    await agent.serve()


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="echo-agent: %(levelname)s %(message)s")
    asyncio.run(main())
