"""The ACP session methods: ``session/new``, ``list``, ``resume``, ``close``, ``delete``
and ``set_config_option``, over the agent's live sessions (crow.agent.service).

A session made live gets its tool servers (crow.agent.tooling), started again on a
resume only when its servers or roots changed; its verify setting and judge
(crow.agent.verdicts); and, on a resume, the log it asked to replay.  Who may end
what is said in crow.agent.service.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any, Protocol

import orjson

from crow.acp import InvalidParams, InvalidRequest, SessionNotFound, schema
from crow.ids import new_id, now
from crow.store.db import SessionRecord, StoreError, StoreUnavailable

from . import commands, verdicts
from .cluster import Cluster
from .host import SessionHost
from .params import absolute, directories, existing_directory, replay_cursor, session_info
from .parking import Parking, Returning
from .recovery import close_interrupted_turns, is_orphaned
from .session import LiveSession
from .tooling import client_servers, start_tools
from .watchers import Watcher

__all__ = ["MethodsHost", "SessionMethods", "clients"]


class MethodsHost(SessionHost, Protocol):
    """What the session methods need of the agent besides its live sessions."""

    clients_authenticated: bool  # False: its clients may not name MCP servers
    owner: str  # the name this process takes turn leases under
    cluster: Cluster

    def learn_model(self, name: str) -> None: ...

    def maybe_quiet(self) -> None: ...

    def config_options(self, session: LiveSession) -> list[schema.SessionConfigOption]: ...


class SessionMethods:
    """The session methods of one agent; every connection's watcher calls them."""

    def __init__(self, host: MethodsHost) -> None:
        self.host = host
        #: The sessions each connection opened (some may be closed since): counting a
        #: connection's open sessions looks at these, not at every live session.
        self.opened: dict[Watcher, set[str]] = {}
        #: Idle sessions clients still have open, out of memory (crow.agent.parking).
        self.parking = Parking(host, self.load, self.restart)

    async def new_session(
        self, watcher: Watcher, params: schema.NewSessionRequest
    ) -> schema.NewSessionResponse:
        cwd = existing_directory(absolute(params.cwd, "cwd"), "cwd")
        dirs = [
            existing_directory(d, "additionalDirectories")
            for d in directories(params.additional_directories)
        ]
        servers = self.client_servers(params.mcp_servers)
        verify = verdicts.verify_setting(params.meta, authenticated=self.host.clients_authenticated)
        self.check_session_limit(watcher)
        config: dict[str, Any] = {"model": self.host.config.chain[0]}
        if verify:
            config.update(verify=verify, judgedSeq=0)
        announce = commands.available_commands_update()
        body = orjson.dumps(announce)
        record = await self.host.store.create_session(
            session_id=new_id("sess"),
            cwd=cwd,
            now=now(),
            additional_directories=dirs,
            config=config,
            updates=[body],  # its log's seq 1, stored with it (one transaction)
        )
        session = self.host.activate(record)
        session.delivered = 1
        session.watchers.add(watcher)
        self.opened.setdefault(watcher, set()).add(session.id)
        self.start_tools(session, servers, dirs, watcher)
        await verdicts.judge_if_verified(self.host, session)
        # To its client once the response has gone (the reply is sent in this task's
        # step); whoever attaches sooner (a judge) replays it from the log.
        asyncio.get_running_loop().call_soon(watcher.deliver, session.id, 1, announce, body)
        response = schema.NewSessionResponse(
            session_id=record.id,
            config_options=self.host.config_options(session),
            available_commands=commands.available_commands(),
        )
        if (keys := verdicts.handout(session)) is not None:
            response.meta = keys
        return response

    async def list_sessions(
        self, watcher: Watcher, params: schema.ListSessionsRequest
    ) -> schema.ListSessionsResponse:
        cwd = None if params.cwd in (schema.UNSET, None) else absolute(params.cwd, "cwd")
        cursor = None if params.cursor in (schema.UNSET, None) else params.cursor
        try:
            records, next_cursor = await self.host.store.list_sessions(cwd=cwd, cursor=cursor)
        except StoreUnavailable:
            raise
        except StoreError as exc:
            raise InvalidParams(str(exc), data={"cursor": cursor}) from None
        response = schema.ListSessionsResponse(sessions=[session_info(r) for r in records])
        if next_cursor is not None:
            response.next_cursor = next_cursor
        return response

    async def resume_session(
        self, watcher: Watcher, params: schema.ResumeSessionRequest
    ) -> schema.ResumeSessionResponse:
        record = await self.host.store.get_session(params.session_id)
        if record is None:
            raise SessionNotFound(params.session_id)
        if params.cwd != record.cwd:
            raise InvalidParams(
                f"cwd {params.cwd} is not this session's cwd ({record.cwd})",
                data={"cwd": params.cwd, "sessionCwd": record.cwd},
            )
        replay = replay_cursor(params.replay_from)
        servers = self.client_servers(params.mcp_servers)
        dirs = directories(params.additional_directories)
        verify = verdicts.verify_setting(params.meta, authenticated=self.host.clients_authenticated)
        session = await self.parking.revive(record.id)  # (parked: it comes back)
        if (session is None or watcher not in session.watchers) and not watcher.follower:
            self.check_session_limit(watcher)
        if session is None:
            session = await self.load(record)
        with self.attaching(session):
            if watcher.follower:  # the judge reads; it leaves tools and settings alone
                await session.attach(watcher, replay)
                return schema.ResumeSessionResponse()
            judging = verdicts.judging(params.meta)
            if judging:
                verdicts.may_judge(self.host, session, watcher, verify)
            if dirs != session.record.additional_directories:
                await self.host.store.update_session(record.id, additional_directories=dirs)
            if not session.busy:  # the complete new set of servers and roots (§5.3)
                self.start_tools(session, servers, dirs, watcher)
            await session.attach(watcher, replay)
            self.opened.setdefault(watcher, set()).add(session.id)
            if session.held:  # the queue as it is now (a replay has none of its history)
                update = session.held.snapshot(watcher)
                watcher.deliver(session.id, None, update, orjson.dumps(update))
            await verdicts.judge_if_verified(self.host, session, verify)
            if judging:
                session.judge = watcher
                await verdicts.ensure_key(self.host, session, verdicts.EXTERNAL)
            response = schema.ResumeSessionResponse(
                config_options=self.host.config_options(session),
                available_commands=commands.available_commands(),
            )
            if (keys := verdicts.handout(session)) is not None:
                response.meta = keys
            return response

    @contextlib.contextmanager
    def attaching(self, session: LiveSession) -> Iterator[None]:
        """While a client attaches (its replay may take a while before it watches),
        another client's close must not unload the session from under it."""
        session.attaching += 1
        try:
            yield
        except BaseException:
            session.attaching -= 1
            self.host.unload_if_unwatched(session)  # nobody came after all
            raise
        session.attaching -= 1

    async def close_session(self, watcher: Watcher, params: schema.CloseSessionRequest) -> None:
        """Detach the caller; the last watcher to leave also ends the turn and
        unloads the session (its tool servers stop)."""
        session = self.host.live.get(params.session_id)
        if session is None:
            self.parking.leave(params.session_id, watcher)
            return  # unknown, parked or already closed: success (§5.4)
        if session.judge is watcher:
            session.judge = None
        if clients(session.watchers - {watcher}):
            session.held.withdraw("its client closed the session", watcher)
            session.watchers.discard(watcher)
            return  # others still watch: their turn goes on
        session.held.withdraw("the session was closed (session/close)")
        await session.end_turn("session/close")  # the caller sees the turn end first
        session.watchers.discard(watcher)
        self.host.unload_if_unwatched(session)

    async def delete_session(self, watcher: Watcher, params: schema.DeleteSessionRequest) -> None:
        self.parking.drop(params.session_id)
        session = self.host.live.pop(params.session_id, None)
        if session is not None:
            session.held.withdraw("the session was deleted")
            await session.end_turn("session/close")
            session.watchers.clear()
            await session.close_tools()
            self.host.maybe_quiet()
        await self.host.store.delete_session(params.session_id)

    async def set_config_option(
        self, watcher: Watcher, params: schema.SetSessionConfigOptionRequest
    ) -> schema.SetSessionConfigOptionResponse:
        session = await self.host.live_session(params.session_id)
        if params.config_id != "model":
            raise InvalidParams(
                f"Unknown config option {params.config_id!r}", data={"configId": params.config_id}
            )
        value = getattr(params, "value", None)
        if params.type != "id" or value not in self.host.config.models:
            raise InvalidParams(
                f"model must be one of {sorted(self.host.config.models)}, got {value!r}",
                data={"configId": "model", "value": value},
            )
        await self.host.switch_model(session, value)
        return schema.SetSessionConfigOptionResponse(
            config_options=self.host.config_options(session)
        )

    async def load(self, record: SessionRecord, returning: Returning | None = None) -> LiveSession:
        """Make a stored session live, closing first a turn its dead owner left.  A
        turn another live server runs: on a shared store its clients here watch it
        (and cannot prompt until it ends); on a file no update would reach them.
        ``returning`` (a parked session's handle, crow.agent.parking) is given the
        session the moment it is made live, before anything can reach it."""
        elsewhere = record.owner is not None and record.owner != self.host.owner
        if elsewhere and not is_orphaned(record) and not self.host.store.shared:
            raise InvalidParams(
                f"Session {record.id} is running a turn in another Crow process "
                f"(pid {record.owner_pid}): wait for it to finish",
                data={"sessionId": record.id, "reason": "busy"},
            )
        if is_orphaned(record):
            await self.host.store.submit(close_interrupted_turns, self.host.store.sync)
            record = await self.host.store.get_session(record.id) or record
        live = self.host.live.get(record.id)
        if live is not None:
            return live
        if self.host.cluster.questions is None:
            return self._activate(record, returning)
        # A shared store: other servers append too.  Live updates start after what
        # the log holds now; the questions already open there are asked here too.
        delivered = await self.host.store.last_seq(record.id)
        live = self.host.live.get(record.id)  # made live meanwhile
        if live is not None:
            return live
        session = self._activate(record, returning, delivered)
        await self.host.cluster.questions.pick_up(session.id)
        return session

    def _activate(
        self, record: SessionRecord, returning: Returning | None, delivered: int = 0
    ) -> LiveSession:
        session = self.host.activate(record)
        session.delivered = delivered
        if returning is not None:
            returning(session)
        return session

    async def named(self, session_id: str) -> LiveSession:
        """The live session a request names, brought back if it was parked; raises
        SessionNotFound (-32002) if it is not open here."""
        session = await self.parking.revive(session_id)
        if session is None:
            raise SessionNotFound(session_id)
        return session

    async def restart(self, session: LiveSession) -> None:
        """A parked session back: its tools start at its next turn, as they were (Crow's
        own servers over its directories), and its judge follows it again."""
        self.start_tools(session, [], session.record.additional_directories, None)
        await verdicts.judge_if_verified(self.host, session)

    def forget(self, watcher: Watcher) -> None:
        """A connection has gone: the parked sessions it had open lose it."""
        for session_id in self.opened.pop(watcher, ()):
            self.parking.leave(session_id, watcher)

    def client_servers(self, servers: Any) -> list[Any]:
        return client_servers(servers, self.host.config, allowed=self.host.clients_authenticated)

    def start_tools(
        self, session: LiveSession, servers: list[Any], dirs: list[str], watcher: Watcher | None
    ) -> None:
        """Start the session's tool servers unless the same set already runs: a
        resume that names the same servers and roots keeps them (and their
        background jobs).  A replaced set is closed in the background, so a
        cancelled resume never leaves the session without tools."""
        setup = (tuple(servers), tuple(dirs))
        if session.tool_setup is not None and session.tool_setup == setup:
            return
        old = session.detach_tools()
        links = getattr(watcher, "mcp_links", None)
        start_tools(session, self.host.config, servers, dirs, links, self.host.maybe_quiet)
        self.host.learn_model(session.model)  # while the tool servers start
        session.tool_setup = setup
        if old is not None:
            self.host.spawn(old, name=f"retool-{session.id}")

    def check_session_limit(self, watcher: Watcher) -> None:
        """``[server] max_sessions_per_connection``: a connection at it opens no more."""
        limit = self.host.config.server.max_sessions_per_connection
        ids = self.opened.get(watcher, set())
        if len(ids) < limit:
            return  # (it holds those it closed since, too: only a full one is looked at)
        live, parking = self.host.live, self.parking
        ids &= {
            i
            for i in ids
            if ((s := live.get(i)) is not None and watcher in s.watchers)
            or parking.watched_by(i, watcher)
        }
        if len(ids) >= limit:
            raise InvalidRequest(
                f"Too many open sessions on this connection (limit {limit}, "
                "[server] max_sessions_per_connection): close one with session/close first"
            )


def clients(watchers: set[Watcher]) -> bool:
    """Whether any of ``watchers`` is a client (not a follower)."""
    return any(not w.follower for w in watchers)
