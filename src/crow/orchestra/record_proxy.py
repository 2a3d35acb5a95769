"""``crow proxy record``: any agent's sessions, kept in a Crow session store.

    crow conductor agent "crow proxy record" "ANY-AGENT ..."

The proxy passes everything through and writes down what the agent tells the
client: each session it creates (or loads) becomes a session of the store, with
the agent's session id, and every ``session/update`` goes into its update log, so
``crow sessions``, and a ``crow serve`` on the same home, list the session and
replay it on resume.  The model transcript gets each turn's request and reply as
text, so Crow can carry the conversation on (tool calls are not in it).

v2 updates are logged as they come, except what a resume or load replays (already
logged).  Each is logged before it is passed on, and a turn's end (the ``idle``,
or a v1 prompt's answer) is passed on only once it is written: a client that saw
the turn end, then closed the chain, finds it ended in the store.  A v1 agent's
updates are logged as v2: the prompt becomes the turn's ``user_message``, its
chunks get a message id per turn, ``running`` and ``idle`` (with the answer's
stop reason) frame the turn; what v2 has no place for (modes, commands) is left
out.

A session the store already keeps as an agent's own (a Crow behind the proxy on the
same store) is left alone: it would be logged twice.

A verdict (``_meta["crow/verdict"]``) is logged as one only with a proof made with
the key the chain's verifier handed out for the session (crow.verdict_proof): the
key in the answer to a ``session/new``, ``load`` or ``resume``, when the request
asked for verifying (``_meta["crow/verify"]``) or what lies behind advertised a
verifier in its ``initialize`` answer, and no judge proxy above marked the request
``crow/verifiedAbove`` (then what lies behind is the agent being judged).  The key
is kept with the session, so crow serve hands it to the clients that replay it.
Anything else is logged as the ordinary message it is: an agent behind a judge
cannot store a verdict it gave itself.

A turn in progress holds the session's turn lease, as crow serve's own turns do:
another Crow process cannot prompt it meanwhile, and if this proxy is killed the
next Crow process closes the turn, as crash recovery does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson

from crow.acp.proxy import ProxySide
from crow.extensions import VERDICT, VERIFIED_ABOVE, VERIFY
from crow.ids import now
from crow.store.aio import AsyncStore
from crow.store.db import StoreError
from crow.store.lease import RENEW_EVERY_S, expiry, this_process
from crow.verdict_proof import KeyHandout, key_handout, proven_verdict

from .turns import TurnFolder, text_of

__all__ = ["RecordProxy"]

log = logging.getLogger("crow.proxy.record")

#: v1 update kinds that have the same shape in v2 (logged as they are).
V1_AS_IS = frozenset({"tool_call", "tool_call_update", "plan"})
#: v1 chunks that need the turn's message id to be v2.
V1_CHUNKS = frozenset({"agent_message_chunk", "agent_thought_chunk"})
TITLE_CHARS = 80


def _now() -> str:
    return now()


@dataclass
class _Recording:
    turn: TurnFolder | None = None
    reply_id: str = ""  # v1: the message id given to this turn's chunks
    thought_id: str = ""
    titled: bool = False
    verifier: KeyHandout | None = None  # the key that proves this session's verdicts


class RecordProxy:
    """Wires recording into a ``ProxySide``."""

    def __init__(self, proxy: ProxySide, store: AsyncStore, *, agent_name: str = "") -> None:
        self.proxy = proxy
        self.store = store
        self.agent_name = agent_name
        self.owner = this_process()
        self.sessions: dict[str, _Recording] = {}
        self.replaying: set[str] = set()  # sessions whose resume or load is replaying
        self.verifier_behind = False  # what lies behind said it verifies (initialize)
        self._lease_keeper: asyncio.Task[None] | None = None
        proxy.on_predecessor("_proxy/initialize", self._initialize)
        proxy.on_predecessor("session/new", self._setup("session/new"))
        proxy.on_predecessor("session/load", self._setup("session/load"))
        proxy.on_predecessor("session/resume", self._setup("session/resume"))
        proxy.on_predecessor("session/prompt", self._prompt)
        proxy.on_successor_notification("session/update", self._update)

    async def _initialize(self, params: Any) -> Any:
        result = await self.proxy.request_successor("initialize", params)
        info = (result or {}).get("agentInfo" if self.proxy.v1 else "info") or {}
        self.agent_name = str(info.get("name") or self.agent_name or "an ACP agent")
        key = "agentCapabilities" if self.proxy.v1 else "capabilities"
        meta = ((result or {}).get(key) or {}).get("_meta")
        self.verifier_behind = isinstance(meta, dict) and meta.get(VERIFY) is True
        return result

    def _setup(self, method: str) -> Callable[[Any], Awaitable[Any]]:
        async def setup(params: Any) -> Any:
            asked = (params or {}).get("sessionId")
            replays = asked if method != "session/new" and isinstance(asked, str) else None
            if replays is not None:
                self.replaying.add(replays)
            try:
                result = await self.proxy.request_successor(method, params)
            finally:
                if replays is not None:
                    self.replaying.discard(replays)
            sid = replays or (result or {}).get("sessionId")
            if isinstance(sid, str):
                await self._open(sid, str((params or {}).get("cwd") or "."))
                self._learn_key(sid, params, result)
            return result

        return setup

    async def _open(self, sid: str, cwd: str) -> None:
        """The session in the store (made if it is new to it)."""
        try:
            record = await self.store.get_session(sid)
            if record is None:
                config = {
                    "recordedFrom": self.agent_name,
                    "protocolVersion": self.proxy.protocol_version,
                }
                record = await self.store.create_session(
                    session_id=sid, cwd=cwd, now=_now(), config=config
                )
        except StoreError as exc:
            log.error("cannot record session %s: %s", sid, exc)
            return
        if "recordedFrom" not in record.config:
            # A session this store keeps already: the agent is a Crow on this store.
            # Recording it too would log every update twice.
            log.warning("not recording %s: the agent keeps it in this store itself", sid)
            return
        self.sessions.setdefault(sid, _Recording(titled=record.title is not None))

    def _learn_key(self, sid: str, params: Any, result: Any) -> None:
        """Keep the verifier's key for the session (see the module's docstring for
        when what lies behind is taken for a verifier)."""
        recording = self.sessions.get(sid)
        meta = (params or {}).get("_meta")
        meta = meta if isinstance(meta, dict) else {}
        asked = meta.get(VERIFY) not in (None, False) or self.verifier_behind
        trusted = asked and not meta.get(VERIFIED_ABOVE)
        handout = key_handout((result or {}).get("_meta")) if trusted else None
        if recording is None or handout is None:
            return
        recording.verifier = handout
        fields = {"verifyKey": handout.key, "verifier": handout.verifier}
        _quietly(self.store.submit(_set_config, self.store.sync, sid, fields))

    async def _prompt(self, params: Any) -> Any:
        sid = (params or {}).get("sessionId")
        recording = self.sessions.get(sid) if isinstance(sid, str) else None
        if recording is None:
            return await self.proxy.request_successor("session/prompt", params)
        assert isinstance(sid, str)
        request = text_of((params or {}).get("prompt"))
        recording.turn = TurnFolder(request=request)
        self._transcribe(sid, {"role": "user", "content": request})
        if not recording.titled and request.strip():
            recording.titled = True
            title = request.strip().splitlines()[0][:TITLE_CHARS]
            _quietly(self.store.submit(self.store.sync.update_session, sid, title=title))
        if self.proxy.v1:
            recording.reply_id = f"msg_a_{uuid.uuid4().hex[:12]}"
            recording.thought_id = f"msg_t_{uuid.uuid4().hex[:12]}"
            user: dict[str, Any] = {
                "sessionUpdate": "user_message",
                "messageId": f"msg_u_{uuid.uuid4().hex[:12]}",
                "content": (params or {}).get("prompt") or [],
            }
            self._log(sid, user)
            self._log(sid, {"sessionUpdate": "state_update", "state": "running"})
        try:
            result = await self.proxy.request_successor("session/prompt", params)
        except BaseException:
            if self.proxy.v1:  # the turn ended without an answer: close it in the log
                self._end(sid, recording, "cancelled")
            raise
        if self.proxy.v1:  # the client learns the turn ended once the record says so
            await _written(self._end(sid, recording, (result or {}).get("stopReason")))
        return result

    async def _update(self, params: Any) -> None:
        """Log the update, then pass it on (a turn's end once it is logged)."""
        ended = self._record(params)
        if ended is not None:
            await _written(ended)
        await self.proxy.notify_predecessor("session/update", params)

    def _record(self, params: Any) -> asyncio.Future[int] | None:
        """Log one update from the agent; the write when it ends a turn."""
        sid = params.get("sessionId") if isinstance(params, dict) else None
        update = params.get("update") if isinstance(params, dict) else None
        recording = self.sessions.get(sid) if isinstance(sid, str) else None
        if recording is None or not isinstance(update, dict) or sid in self.replaying:
            return None
        assert isinstance(sid, str)
        update = _unless_unproven(sid, recording, update)
        if recording.turn is not None:
            recording.turn.apply(update)
        if self.proxy.v1:
            update = self._as_v2(recording, update)
            if update is not None:
                self._log(sid, update)
            return None
        written = self._log(sid, update)
        if update.get("sessionUpdate") == "state_update" and update.get("state") == "idle":
            self._transcribe_reply(sid, recording)
            return written
        return None

    def _as_v2(self, recording: _Recording, update: dict[str, Any]) -> dict[str, Any] | None:
        kind = update.get("sessionUpdate")
        if kind in V1_AS_IS:
            return update
        if kind in V1_CHUNKS and recording.turn is not None:
            message_id = (
                recording.reply_id if kind == "agent_message_chunk" else recording.thought_id
            )
            return {**update, "messageId": message_id}
        return None

    def _end(self, sid: str, recording: _Recording, stop_reason: Any) -> asyncio.Future[int]:
        idle = {"sessionUpdate": "state_update", "state": "idle"}
        idle["stopReason"] = str(stop_reason or "end_turn")
        written = self._log(sid, idle)
        self._transcribe_reply(sid, recording)
        return written

    def _transcribe_reply(self, sid: str, recording: _Recording) -> None:
        turn, recording.turn = recording.turn, None
        if turn is not None:
            reply = turn.view(None).reply
            self._transcribe(sid, {"role": "assistant", "content": reply})

    # ---- the store ----------------------------------------------------------------
    # Every write is submitted at once, without waiting: the store keeps the order
    # of submission, so the log has the order the updates came in, whatever the
    # tasks that submitted them do next.
    def _log(self, sid: str, update: dict[str, Any]) -> asyncio.Future[int]:
        """Log one update, as crow serve logs its own (``sessionUpdate`` first)."""
        kind = update.get("sessionUpdate")
        body = orjson.dumps({"sessionUpdate": kind, **update})
        state = update.get("state") if kind == "state_update" else None
        if state in ("running", "requires_action"):
            self._take_lease(sid)
        stop = update.get("stopReason") if state == "idle" else None
        written = self.store.append_update(sid, body, state=state, stop_reason=stop, now=_now())
        _quietly(written)
        return written

    def _transcribe(self, sid: str, message: dict[str, Any]) -> None:
        _quietly(self.store.submit(self.store.sync.append_message, sid, message))

    def _take_lease(self, sid: str) -> None:
        sync = self.store.sync
        lease = {"owner": self.owner, "pid": os.getpid(), "expires": expiry()}
        _quietly(self.store.submit(sync.acquire_turn, sid, **lease))
        if self._lease_keeper is None or self._lease_keeper.done():
            self._lease_keeper = asyncio.create_task(self._keep_leases(), name="lease-keeper")

    async def _keep_leases(self) -> None:
        """Renew this process's leases while it holds any (idle gives them back)."""
        while True:
            await asyncio.sleep(RENEW_EVERY_S)
            try:
                if not await self.store.renew_leases(self.owner, expiry()):
                    return
            except StoreError as exc:
                log.warning("could not renew turn leases: %s", exc)

    async def aclose(self) -> None:
        if self._lease_keeper is not None:
            self._lease_keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._lease_keeper
        await self.store.aclose()


def _unless_unproven(sid: str, recording: _Recording, update: dict[str, Any]) -> dict[str, Any]:
    """``update``; a verdict without a valid proof, as the ordinary message it is."""
    meta = update.get("_meta")
    if not isinstance(meta, dict) or VERDICT not in meta:
        return update
    key = recording.verifier.key if recording.verifier is not None else None
    if proven_verdict(key, sid, meta, text_of(update.get("content"))) is not None:
        return update
    log.warning("session %s: a verdict without a valid proof, recorded as a message", sid)
    return {**update, "_meta": {k: v for k, v in meta.items() if k != VERDICT}}


def _set_config(store: Any, sid: str, fields: dict[str, Any]) -> None:
    """Merge ``fields`` into the stored session's config (on the store's thread)."""
    record = store.get_session(sid)
    if record is not None:
        store.update_session(sid, config={**record.config, **fields})


def _quietly(pending: asyncio.Future[Any]) -> None:
    """A store write whose failure costs the record, never the conversation."""

    def report(done: asyncio.Future[Any]) -> None:
        if not done.cancelled() and done.exception() is not None:
            log.error("recording failed: %s", done.exception())

    pending.add_done_callback(report)


async def _written(pending: asyncio.Future[Any]) -> None:
    """Wait for a store write; its failure is ``_quietly``'s to report."""
    with contextlib.suppress(Exception):
        await asyncio.shield(pending)
