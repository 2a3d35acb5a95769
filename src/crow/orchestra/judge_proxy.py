"""``crow proxy judge``: the judge as a chain component, in front of any ACP agent.

    crow conductor agent "crow proxy judge" "ANY-AGENT ..."

The proxy passes everything through and reads along: the prompts going to the
agent and the updates coming back.  When a turn ends (v2: the agent's ``idle``
after its ``running``; v1: the prompt's answer) it asks the judge model about the
turn (crow.orchestra.judge.ask, with the check command's result as evidence) and
sends the client the verdict: an agent message whose ``_meta["crow/verdict"]`` is
the one crow serve's own judge writes.  In v2 it comes right after the ``idle``;
in v1, where nothing follows a turn's answer, just before that answer.

With ``--max-rounds N`` (v2) a failing verdict prompts the agent with the reasons
(``_meta["crow/from"] = "judge"``) and the next turn is judged too, up to N
verdicts per prompt; a client's prompt or ``session/cancel`` ends the loop.

It advertises ``_meta["crow/verify"]`` in its ``initialize`` answer, so
``crow run --verify`` waits for its verdict; a session's ``_meta["crow/verify"]``
(``{"check": CMD}`` included) is taken by the proxy and not passed on, so a Crow
agent behind it does not judge the turn a second time.  Its verdicts are the
proxy's own: the agent does not store them, so they do not replay on resume.

It is the session's verifier: the answer to ``session/new``, ``session/load`` and
``session/resume`` carries its key for the session in ``_meta["crow/verify"]``
(whatever the agent said there is replaced), and each verdict a proof made with
it (crow.verdict_proof).  The agent never sees the key, and what it sends is
stripped of ``crow/verdict`` and ``crow/from`` (said once in the log): the agent
being judged can neither give itself a verdict nor pass its words off as the
judge's.  Only the user message of the proxy's own follow-up prompt is marked as
the judge's.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any

from crow.acp.proxy import ProxySide
from crow.extensions import FROM, INSERT, MAX_VERDICT_CHARS, VERDICT, VERIFIED_ABOVE, VERIFY
from crow.verdict_proof import KeyHandout, new_key, sign

from .evidence import run_check
from .turns import TurnFolder, text_of
from .verdict import Check, Round, TurnView, Verdict, follow_up_text, verdict_meta

__all__ = ["JudgeProxy", "with_check"]

log = logging.getLogger("crow.proxy.judge")

#: The name this proxy signs its verdicts with.
VERIFIER = "crow proxy judge"
#: What the agent behind may not put in an update's ``_meta``.
JUDGES_ONLY = (VERDICT, FROM)

#: Judges a turn: (turn, the session's cwd, its check command) -> verdict.
JudgeFn = Callable[[TurnView, str, "str | None"], Awaitable[Verdict]]


@dataclass
class _Session:
    cwd: str
    check: str | None
    key: str = field(default_factory=new_key)  # proves this proxy's verdicts
    turn: TurnFolder | None = None
    rounds: int = 0  # verdicts since the client's last prompt
    follow_up_pending: bool = False  # the next user message is the follow-up's


class JudgeProxy:
    """Wires the judge into a ``ProxySide``."""

    def __init__(
        self,
        proxy: ProxySide,
        judge: JudgeFn,
        *,
        judge_model: str,
        check: str | None = None,
        max_rounds: int = 1,
    ) -> None:
        self.proxy = proxy
        self.judge = judge
        self.judge_model = judge_model
        self.check = check
        self.max_rounds = max_rounds
        self.sessions: dict[str, _Session] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._stripped_said = False
        proxy.on_predecessor("_proxy/initialize", self._initialize)
        for method in ("session/new", "session/load", "session/resume"):
            proxy.on_predecessor(method, self._setup(method))
        proxy.on_predecessor("session/prompt", self._prompt)
        proxy.on_predecessor_notification("session/cancel", self._cancel)
        proxy.on_successor_notification("session/update", self._update)

    async def _initialize(self, params: Any) -> Any:
        result = await self.proxy.request_successor("initialize", params)
        if isinstance(result, dict):
            key = "agentCapabilities" if self.proxy.v1 else "capabilities"
            capabilities = result.setdefault(key, {})
            if isinstance(capabilities, dict):
                capabilities.setdefault("_meta", {})[VERIFY] = True
        return result

    def _setup(self, method: str) -> Callable[[Any], Awaitable[Any]]:
        async def setup(params: Any) -> Any:
            params = dict(params or {})
            meta = dict(params.get("_meta") or {})
            asked = meta.pop(VERIFY, None)  # ours: the agent behind must not judge too
            meta[VERIFIED_ABOVE] = True  # what hands out a key below is not a verifier
            params["_meta"] = meta
            result = await self.proxy.request_successor(method, params)
            sid = params.get("sessionId") or (result or {}).get("sessionId")
            if isinstance(sid, str) and isinstance(result, dict):
                check = asked.get("check") if isinstance(asked, dict) else None
                session = self.sessions[sid] = _Session(
                    str(params.get("cwd") or "."), check if isinstance(check, str) else self.check
                )
                meta = result["_meta"] = dict(result.get("_meta") or {})
                meta.update(KeyHandout(VERIFIER, session.key).to_meta())
            return result

        return setup

    def _session(self, params: Any) -> tuple[str, _Session | None]:
        sid = params.get("sessionId") if isinstance(params, dict) else None
        return (sid, self.sessions.get(sid)) if isinstance(sid, str) else ("", None)

    async def _prompt(self, params: Any) -> Any:
        sid, session = self._session(params)
        if session is not None:
            session.rounds = 0  # a person's prompt starts the loop over
            session.follow_up_pending = False
            session.turn = TurnFolder(request=text_of((params or {}).get("prompt")))
        result = await self.proxy.request_successor("session/prompt", params)
        if self.proxy.v1 and session is not None and session.turn is not None:
            turn, session.turn = session.turn, None  # v1: the answer ends the turn
            await self._judge(sid, session, turn.view(result.get("stopReason")))
        return result

    async def _cancel(self, params: Any) -> None:
        _, session = self._session(params)
        if session is not None:
            session.rounds = self.max_rounds  # a cancel ends the verify loop
        await self.proxy.notify_successor("session/cancel", params)

    async def _update(self, params: Any) -> None:
        params = self._as_the_agents(params)
        await self.proxy.notify_predecessor("session/update", params)
        sid, session = self._session(params)
        update = params.get("update") if isinstance(params, dict) else None
        if session is None or session.turn is None or not isinstance(update, dict):
            return
        session.turn.apply(update)
        ended = update.get("sessionUpdate") == "state_update" and update.get("state") == "idle"
        if ended and session.turn.active and not self.proxy.v1:
            turn, session.turn = session.turn, None
            self._spawn(self._judge(sid, session, turn.view(update.get("stopReason"))))

    def _as_the_agents(self, params: Any) -> Any:
        """The agent's update without the judge's marks (``crow/verdict``, ``crow/from``),
        but for the user message of this proxy's own follow-up prompt."""
        update = params.get("update") if isinstance(params, dict) else None
        if not isinstance(update, dict):
            return params
        _, session = self._session(params)
        meta = update.get("_meta")
        ours = (
            session is not None
            and session.follow_up_pending
            and update.get("sessionUpdate") == "user_message"
        )
        if ours:
            assert session is not None
            session.follow_up_pending = False
            meta = {**(meta if isinstance(meta, dict) else {}), FROM: "judge"}
        elif isinstance(meta, dict) and any(key in meta for key in JUDGES_ONLY):
            if not self._stripped_said:
                self._stripped_said = True
                log.warning(
                    "the agent sent %s in an update's _meta: removed (only this proxy "
                    "gives verdicts; said once)",
                    " and ".join(key for key in JUDGES_ONLY if key in meta),
                )
            meta = {k: v for k, v in meta.items() if k not in JUDGES_ONLY}
        else:
            return params
        return {**params, "update": {**update, "_meta": meta}}

    def _spawn(self, coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _judge(self, sid: str, session: _Session, turn: TurnView) -> None:
        if turn.stop_reason == "cancelled":
            return  # somebody stopped it: nothing to judge
        session.rounds += 1
        try:
            verdict = await self.judge(turn, session.cwd, session.check)
        except Exception as exc:  # said to the client: never a silent pass
            log.exception("the judge failed")
            verdict = Verdict("unknown", raw=f"the judge failed: {exc}")
        again = verdict.verdict == "fail" and session.rounds < self.max_rounds and not self.proxy.v1
        loop = Round(session.rounds, self.max_rounds, not again)
        await self._tell(sid, verdict, turn, loop)
        if again and not await self._follow_up(sid, session, verdict):
            # No next round after all: the verdict stands, and says so (a client
            # waits for the final one).
            reasons = (*verdict.reasons, "the agent did not take the follow-up prompt")
            last = Round(session.rounds, self.max_rounds, True)
            await self._tell(sid, replace(verdict, reasons=reasons), turn, last)

    async def _tell(self, sid: str, verdict: Verdict, turn: TurnView, loop: Round) -> None:
        await self.proxy.notify_predecessor(
            "session/update", self._verdict(sid, verdict, turn, loop)
        )

    def _verdict(self, sid: str, verdict: Verdict, turn: TurnView, loop: Round) -> dict[str, Any]:
        line = verdict.line()[:MAX_VERDICT_CHARS]
        text = {"type": "text", "text": line}
        fields = {**verdict_meta(verdict, turn, self.judge_model, loop), "verifier": VERIFIER}
        meta: dict[str, Any] = {VERDICT: sign(self.sessions[sid].key, sid, fields, line)}
        update: dict[str, Any]
        if self.proxy.v1:
            update = {"sessionUpdate": "agent_message_chunk", "content": text, "_meta": meta}
        else:
            message_id = f"msg_v_{uuid.uuid4().hex[:12]}"
            update = {
                "sessionUpdate": "agent_message",
                "messageId": message_id,
                "content": [text],
                "_meta": meta,
            }
        return {"sessionId": sid, "update": update}

    async def _follow_up(self, sid: str, session: _Session, verdict: Verdict) -> bool:
        text = follow_up_text(verdict)
        session.turn = TurnFolder(request=text, origin="judge")
        session.follow_up_pending = True
        params = {
            "sessionId": sid,
            "prompt": [{"type": "text", "text": text}],
            "_meta": {FROM: "judge", INSERT: "reject"},  # never held behind a person's
        }
        try:
            await self.proxy.request_successor("session/prompt", params)
        except Exception as exc:
            log.warning("the follow-up prompt was refused: %s", exc)
            session.turn, session.follow_up_pending = None, False
            return False
        return True


def with_check(judge: JudgeFn, timeout_s: float = 300.0) -> JudgeFn:
    """``judge`` with the check command's result as evidence (run first, time-limited,
    through Crow's terminal MCP server)."""

    async def judged(turn: TurnView, cwd: str, check: str | None) -> Verdict:
        evidence: Check | None = await run_check(check, cwd, timeout_s) if check else None
        verdict = await judge(replace(turn, check=evidence), cwd, check)
        return verdict.with_check(evidence)

    return judged
