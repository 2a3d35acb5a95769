"""Verdicts in sessions: who may post one, what ``_crow/verdict`` writes, and a
session's verify setting (and whether crow serve's own judge follows it).

A judge (crow.orchestra.judge, in this process or another) posts its verdict on a
worker's turn.  The agent puts it into the worker session as an ``agent_message``
with ``_meta["crow/verdict"]``, so every watcher sees it and a resume replays it.
The judge's reasoning (what its model was asked, what it answered) goes into the
judge's own session, one per worker session: an ordinary Crow session, listed,
resumable, and promptable ("why did you fail it?"); the verdict links to it with
``judgeSessionId``.

Only the session's judge may post: crow serve's own (the follower connection) while
it verifies the session, else the one client that registered as the judge by
resuming with ``_meta["crow/judging"]`` (``crow judge``).  Every verdict is signed
with the session's key (crow.verdict_proof), which the answers to ``session/new``
and ``session/resume`` hand to clients and nothing else ever shows.

The worker's stored config keeps ``judgedSeq``, the log seq of the last verdict: a
judge that comes back (after a restart) replays from there and judges a turn that
ended while it was away; and ``verifyKey``/``verifier``, the key and who signs.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from crow.acp import InvalidParams
from crow.extensions import JUDGING, MAX_VERDICT_CHARS, MODEL, VERDICT, VERDICTS, VERIFY
from crow.ids import new_id, now
from crow.observe import metrics
from crow.verdict_proof import KeyHandout, new_key, sign

from .host import SessionHost
from .session import LiveSession
from .updates import agent_message, text_content, tool_call_update, user_message
from .watchers import Watcher

__all__ = [
    "EXTERNAL",
    "RESIDENT",
    "close_judging",
    "ensure_key",
    "handout",
    "is_judge",
    "judge_if_verified",
    "judging",
    "judging_started",
    "may_judge",
    "post_verdict",
    "resident_verifies",
    "verify_setting",
]

#: The longest judge prompt or answer kept in the judge's session.
MAX_REASONING_CHARS = 200_000
#: How much of the last verdict's text ``session/list`` shows.
LIST_VERDICT_CHARS = 200
#: Who signs a session's verdicts: crow serve's own judge, or a registered ``crow judge``.
RESIDENT, EXTERNAL = "crow serve", "crow judge"


def resident_verifies(config: dict[str, Any], every_session: bool) -> bool:
    """Whether crow serve's own judge verifies a session with this stored ``config``
    (a judge's own session never is)."""
    if "judgeOf" in config:
        return False
    return bool((config.get("verify") or {}).get("on")) or every_session


async def judge_if_verified(
    agent: SessionHost, session: LiveSession, setting: dict[str, Any] | None = None
) -> None:
    """Store a new verify ``setting`` (None: unchanged); then the resident judge
    follows the session if it is to be verified, and stops following if not.
    Verifying starts with the next turn: the history is taken as judged."""
    config = session.record.config
    if setting is not None:
        config = {**config, "verify": setting}
    verified = resident_verifies(config, agent.config.judge.every_session)
    if verified and "judgedSeq" not in config:
        last = await agent.store.submit(agent.store.sync.last_seq, session.id)
        config = {**config, "judgedSeq": last}
    if config is not session.record.config:
        session.record = replace(session.record, config=config)
        await agent.store.update_session(session.id, config=config)
    if verified:
        session.judge = None  # crow serve's own judge takes over from a client's
        await ensure_key(agent, session, RESIDENT)
    if agent.judge is None:
        return
    if verified:
        agent.judge.follow(session)
    else:
        agent.judge.unfollow(session.id)


def is_judge(agent: SessionHost, session: LiveSession, watcher: Watcher) -> bool:
    """Whether ``watcher`` is the session's judge."""
    resident = resident_verifies(session.record.config, agent.config.judge.every_session)
    return resident if watcher.follower else (session.judge is watcher and not resident)


def may_judge(
    agent: SessionHost, session: LiveSession, watcher: Watcher, setting: dict[str, Any] | None
) -> None:
    """Raise unless ``watcher`` (a client resuming with ``_meta["crow/judging"]`` and
    verify ``setting``) may become the session's judge: one judge per session, and
    crow serve's own first.  Checked before the resume changes anything."""
    config = session.record.config if setting is None else {"verify": setting}
    if resident_verifies(config, agent.config.judge.every_session):
        raise InvalidParams(
            "crow serve's own judge verifies this session: resume it with "
            f'_meta["{VERIFY}"] = false first to judge it yourself',
            data={"sessionId": session.id, "reason": "judged"},
        )
    if session.judge is not None and session.judge is not watcher:
        raise InvalidParams(
            "another client judges this session: only one judge posts verdicts",
            data={"sessionId": session.id, "reason": "judged"},
        )


def judging(meta: Any) -> bool:
    """A resume's ``_meta["crow/judging"]``."""
    return isinstance(meta, dict) and meta.get(JUDGING) is True


async def ensure_key(agent: SessionHost, session: LiveSession, verifier: str) -> str:
    """The session's verdict key (made on first need) and who signs with it now."""
    config = session.record.config
    key = config.get("verifyKey")
    if isinstance(key, str) and config.get("verifier") == verifier:
        return key
    fields: dict[str, Any] = {"verifier": verifier}
    if not isinstance(key, str):
        key = fields["verifyKey"] = new_key()
    await _remember(agent, session, **fields)
    return key


def handout(session: LiveSession) -> dict[str, Any] | None:
    """The ``_meta`` of a ``session/new`` or ``session/resume`` answer: the key that
    proves the session's verdicts, once it has one."""
    config = session.record.config
    key, verifier = config.get("verifyKey"), config.get("verifier")
    if not isinstance(key, str) or not isinstance(verifier, str):
        return None
    return KeyHandout(verifier, key).to_meta()


async def post_verdict(
    agent: SessionHost, watcher: Watcher, params: dict[str, Any]
) -> dict[str, Any]:
    """``_crow/verdict``: put a judge's verdict into a live session, for everyone,
    signed; refused (and nothing posted) unless ``watcher`` is the session's judge."""
    worker = agent.live_session(str(params.get("sessionId")))
    if not is_judge(agent, worker, watcher):
        raise InvalidParams(
            "only the session's judge may post a verdict (crow serve's own while it "
            f'verifies the session, else a client that resumed it with _meta["{JUDGING}"])',
            data={"sessionId": worker.id, "reason": "notJudge"},
        )
    text, verdict = params.get("text"), params.get("verdict")
    if not isinstance(text, str) or not text.strip() or len(text) > MAX_VERDICT_CHARS:
        raise InvalidParams(f"text must be a line of 1 to {MAX_VERDICT_CHARS} characters")
    if not isinstance(verdict, dict) or verdict.get("verdict") not in VERDICTS:
        raise InvalidParams(f"verdict.verdict must be one of {', '.join(VERDICTS)}")
    reasoning = _reasoning(params.get("reasoning"))
    verifier = RESIDENT if watcher.follower else EXTERNAL
    key = await ensure_key(agent, worker, verifier)
    answer: dict[str, Any] = {}
    if reasoning is not None:
        judge = await _record_reasoning(agent, worker, *reasoning, verdict.get("judgeModel"))
        verdict = {**verdict, "judgeSessionId": judge}
        answer["judgeSessionId"] = judge
    message_id = new_id("msg")
    signed = sign(key, worker.id, {**verdict, "verifier": verifier}, text)
    metrics.verdict(str(verdict["verdict"]))
    seq = await worker.emit(agent_message(message_id, text, {VERDICT: signed}))
    if seq is not None:  # the list shows the last one (crow.agent.params.session_info)
        last = {"verdict": verdict["verdict"], "text": text[:LIST_VERDICT_CHARS]}
        await _remember(agent, worker, judgedSeq=seq, lastVerdict=last)
    await close_judging(agent, worker, "completed")  # after its verdict: it ends the work
    return {"messageId": message_id, **answer}


async def judging_started(
    agent: SessionHost, watcher: Watcher, params: dict[str, Any]
) -> dict[str, Any]:
    """``_crow/judging``: the session's judge starts on a turn.  The session shows a
    tool call (kind ``think``) listed as background work until the verdict."""
    worker = agent.live_session(str(params.get("sessionId")))
    if not is_judge(agent, worker, watcher):
        raise InvalidParams(
            "only the session's judge may say it judges a turn",
            data={"sessionId": worker.id, "reason": "notJudge"},
        )
    turn = params.get("turnMessageId")
    if not isinstance(turn, str) or not turn:
        raise InvalidParams("turnMessageId must be the id of the turn's user message")
    await close_judging(agent, worker, "failed")  # one left open by a judge that stopped
    call_id = new_id("judging")
    await worker.emit(
        tool_call_update(
            call_id,
            title="The judge checks the turn",
            kind="think",
            status="in_progress",
            _meta={JUDGING: turn},
        )
    )
    await _remember(agent, worker, judgingCall=call_id)
    await worker.set_background(call_id, {"type": "tool_call", "toolCallId": call_id})
    return {"toolCallId": call_id}


async def close_judging(agent: SessionHost, worker: LiveSession, status: str) -> None:
    """End the judging tool call the session shows, if one is open: ``completed``
    (its verdict follows) or ``failed`` (the judge stopped)."""
    call_id = worker.record.config.get("judgingCall")
    if not isinstance(call_id, str):
        return
    await worker.emit(tool_call_update(call_id, status=status))
    await _remember(agent, worker, judgingCall=None)
    await worker.set_background(call_id, None)


def verify_setting(meta: Any, *, authenticated: bool) -> dict[str, Any] | None:
    """A ``session/new`` or ``session/resume``'s ``_meta["crow/verify"]``: the
    session's verify settings, ``{}`` for "off", or None when it does not say.
    A check command runs on this machine: only an authenticated client may name one."""
    value = meta.get(VERIFY) if isinstance(meta, dict) else None
    if value is None:
        return None
    if value is False:
        return {}
    if value is True:
        return {"on": True}
    if not isinstance(value, dict):
        raise InvalidParams(f"_meta.{VERIFY} must be true, false or an object")
    setting: dict[str, Any] = {"on": True}
    rounds = value.get("maxRounds")
    if rounds is not None:
        if type(rounds) is not int or not 1 <= rounds <= 20:
            raise InvalidParams(f"_meta.{VERIFY}.maxRounds must be a whole number from 1 to 20")
        setting["maxRounds"] = rounds
    for key in ("rubric", "check"):
        text = value.get(key)
        if text is None:
            continue
        if not isinstance(text, str) or not text.strip() or len(text) > 4000:
            raise InvalidParams(f"_meta.{VERIFY}.{key} must be a non-empty string")
        setting[key] = text
    if "check" in setting and not authenticated:
        raise InvalidParams(
            f"_meta.{VERIFY}.check runs a command: this server has no token, so its "
            "clients may not name one (set it in [judge] check)"
        )
    return setting


def _reasoning(value: Any) -> tuple[str, str] | None:
    if value is None:
        return None
    prompt = value.get("prompt") if isinstance(value, dict) else None
    answer = value.get("answer") if isinstance(value, dict) else None
    if not isinstance(prompt, str) or not isinstance(answer, str):
        raise InvalidParams("reasoning must be an object with prompt and answer strings")
    return prompt[:MAX_REASONING_CHARS], answer[:MAX_REASONING_CHARS] or "(no answer)"


async def _record_reasoning(
    agent: SessionHost, worker: LiveSession, prompt: str, answer: str, model: Any
) -> str:
    """Add one exchange to the worker's judge session (made on first use, or anew
    when somebody is prompting it); returns its id."""
    judge = await _judge_session(agent, worker)
    await judge.emit(user_message(new_id("msg"), text_content(prompt), origin="judge"))
    meta = {MODEL: model} if isinstance(model, str) else None
    await judge.emit(agent_message(new_id("msg"), answer, meta))
    await agent.store.append_message(judge.id, {"role": "user", "content": prompt})
    await agent.store.append_message(judge.id, {"role": "assistant", "content": answer})
    agent.unload_if_unwatched(judge)
    return judge.id


async def _judge_session(agent: SessionHost, worker: LiveSession) -> LiveSession:
    known = worker.record.config.get("judgeSessionId")
    if isinstance(known, str):
        live = agent.live.get(known)
        if live is not None and not live.busy:
            return live
        record = None if live is not None else await agent.store.get_session(known)
        if record is not None:
            return agent.activate(record)
    title = f"judge of {worker.title or worker.id}"
    record = await agent.store.create_session(
        session_id=new_id("sess"),
        cwd=worker.record.cwd,
        now=now(),
        config={"model": agent.config.judge.model or agent.config.chain[0], "judgeOf": worker.id},
    )
    await agent.store.update_session(record.id, title=title)
    judge = agent.activate(replace(record, title=title))
    await _remember(agent, worker, judgeSessionId=judge.id)
    return judge


async def _remember(agent: SessionHost, session: LiveSession, **fields: Any) -> None:
    """Keep ``fields`` in the session's stored config."""
    config = {**session.record.config, **fields}
    session.record = replace(session.record, config=config)
    await agent.store.update_session(session.id, config=config)
