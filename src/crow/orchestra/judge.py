"""The judge: an ordinary ACP client of a worker's session that wakes when a turn
the worker did goes idle, asks its own model whether the turn did what was asked,
and puts the verdict into the session for every client to see.

    watch(client, session_id)    attach, and yield each finished turn (TurnView)
    ask(router, model, turn)     the judge model's Verdict (a forced tool call;
                                 JSON in the text as a fallback; else "unknown")
    post(client, session_id, v)  the verdict as an agent_message with
                                 _meta["crow/verdict"] (Crow's _crow/verdict)
    run_check(command, cwd)      evidence: a command run by Crow's terminal MCP
                                 server (time-limited); a failing check fails the turn
    verify(...)                  the loop: judge, and on "fail" prompt the worker with
                                 the reasons (``_meta["crow/from"] = "judge"``), up to
                                 max_rounds; a person's prompt or a cancel ends it

Only turns seen live count: the judge attaches without replay, and an ``idle``
that comes before a turn's ``user_message`` and ``running`` is the state the
worker was already in (the quickstart's completion rule), not a turn to judge.

The values (TurnView, Verdict, parse_verdict, ...) live in crow.orchestra.verdict and
the check in crow.orchestra.evidence; they are named here too, for callers of the judge.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from typing import Any

from crow.acp import AcpError, ClientSide, schema
from crow.extensions import (
    FROM,
    INSERT,
    JUDGING,
    MAX_VERDICT_CHARS,
    POST_JUDGING,
    POST_VERDICT,
)
from crow.models.errors import ModelError
from crow.models.events import TextDelta, ToolCallDelta
from crow.models.router import ModelRouter

from .evidence import run_check
from .turns import LiveTurns
from .verdict import (
    Check,
    Round,
    ToolCallView,
    TurnView,
    Verdict,
    follow_up_text,
    parse_verdict,
    verdict_meta,
)

__all__ = [
    "DEFAULT_RUBRIC",
    "Check",
    "Round",
    "ToolCallView",
    "TurnView",
    "Verdict",
    "ask",
    "follow_up_text",
    "parse_verdict",
    "post",
    "run_check",
    "verdict_meta",
    "verify",
    "watch",
]

DEFAULT_RUBRIC = (
    "Did the agent do what the user asked? Are its claims backed by the output of the "
    "tools it ran? If checks were run, did they pass?"
)
INSTRUCTIONS = (
    "You judge the work of a coding agent. You are shown the user's request, the tool "
    "calls the agent made with their input and output, and the agent's reply. Judge by "
    "this rubric: {rubric}\nAnswer by calling the verdict tool once: pass (true or "
    "false), reasons (short sentences naming what you checked), confidence (0 to 1)."
)
VERDICT_TOOL = {
    "type": "function",
    "function": {
        "name": "verdict",
        "description": "Your verdict on the agent's turn.",
        "parameters": {
            "type": "object",
            "properties": {
                "pass": {"type": "boolean", "description": "The turn did what was asked."},
                "reasons": {"type": "array", "items": {"type": "string"}},
                "confidence": {"type": "number", "minimum": 0, "maximum": 1},
            },
            "required": ["pass", "reasons"],
        },
    },
}
FORCE_VERDICT = {"type": "function", "function": {"name": "verdict"}}
# ---- watching ------------------------------------------------------------------------


async def watch(
    client: ClientSide,
    session_id: str,
    cwd: str | None = None,
    *,
    replay_after: int | None = None,
    attached: Callable[[], None] | None = None,
    register: bool = False,
) -> AsyncIterator[TurnView]:
    """Attach to ``session_id`` and yield each turn that ends after that;
    ``attached()`` is called once the judge watches.  ``register``: become the
    session's judge (``_meta["crow/judging"]``), the one client crow serve takes
    verdicts from; crow serve's own judge is one already.

    With ``replay_after`` (a ``_crow/after`` cursor: the seq of the last update
    already judged, 0 for the start) the turns logged after it are read first, and one
    that ended before the judge came (the judge was down) is yielded too."""
    turns = LiveTurns(client, session_id)
    client.on_update(turns)
    if cwd is None:
        cwd = await _cwd_of(client, session_id)
    turns.replaying = replay_after is not None
    try:  # the replay, then the current state, arrive before the answer
        meta = {JUDGING: True} if register else None
        await client.resume_session(
            session_id, cwd, replay_after=replay_after, replay=False, meta=meta
        )
    finally:
        turns.replaying = False
    if attached is not None:
        attached()
    try:
        while True:
            yield await turns.done.get()
    finally:
        client.off_update(turns)


async def _cwd_of(client: ClientSide, session_id: str) -> str:
    cursor = None
    while True:
        page = await client.list_sessions(cursor=cursor)
        for info in page.sessions:
            if info.session_id == session_id:
                return str(info.cwd)
        cursor = getattr(page, "next_cursor", None)
        if not isinstance(cursor, str):
            raise LookupError(f"no session {session_id} on this agent")


# ---- judging -------------------------------------------------------------------------


async def ask(
    router: ModelRouter, model: str, turn: TurnView, rubric: str = DEFAULT_RUBRIC
) -> Verdict:
    """The judge model's verdict on ``turn``."""
    messages = [
        {"role": "system", "content": INSTRUCTIONS.format(rubric=rubric)},
        {"role": "user", "content": turn.render()},
    ]
    text: list[str] = []
    calls: dict[int, dict[str, str]] = {}
    stream = router.stream(model, messages, tools=[VERDICT_TOOL], tool_choice=FORCE_VERDICT)
    async for event in stream:
        if isinstance(event, TextDelta):
            text.append(event.text)
        elif isinstance(event, ToolCallDelta):
            call = calls.setdefault(event.index, {"name": "", "arguments": ""})
            call["name"] += event.name or ""
            call["arguments"] += event.arguments
    found = [calls[i] for i in sorted(calls)]
    answer = "".join(text).strip()
    for call in found:
        answer += f"\n{call['name']}({call['arguments']})"
    return replace(
        parse_verdict(found, "".join(text)), shown=messages[1]["content"], answer=answer.strip()
    )


# ---- reporting and the loop ----------------------------------------------------------


async def post(
    client: ClientSide,
    session_id: str,
    verdict: Verdict,
    turn: TurnView,
    judge_model: str,
    loop: Round = Round(),  # noqa: B008 (a frozen dataclass: one value for every call)
) -> dict[str, Any]:
    """Put ``verdict`` into the session (and the judge's reasoning into the judge's
    own session); returns the agent's answer: ``messageId``, ``judgeSessionId``."""
    params: dict[str, Any] = {
        "sessionId": session_id,
        "text": verdict.line()[:MAX_VERDICT_CHARS],
        "verdict": verdict_meta(verdict, turn, judge_model, loop),
    }
    if verdict.shown:
        params["reasoning"] = {"prompt": verdict.shown, "answer": verdict.answer}
    answer = await client.peer.request(POST_VERDICT, params)
    return answer if isinstance(answer, dict) else {}


@dataclass(frozen=True)
class Judged:
    turn: TurnView
    verdict: Verdict
    followed_up: bool  # the worker was prompted to fix what the judge found


async def verify(
    client: ClientSide,
    router: ModelRouter,
    model: str,
    session_id: str,
    *,
    rubric: str = DEFAULT_RUBRIC,
    check: str | None = None,
    check_timeout_s: float = 300.0,
    max_rounds: int = 1,
    cwd: str | None = None,
    replay_after: int | None = None,
    attached: Callable[[], None] | None = None,
    register: bool = False,
) -> AsyncIterator[Judged]:
    """Judge every turn of the session; on "fail", prompt the worker with the reasons
    and judge its next turn, up to ``max_rounds`` verdicts per person's prompt.
    ``replay_after``, ``register``: see ``watch``."""
    cwd = cwd or await _cwd_of(client, session_id)
    rounds = 0
    turns = watch(
        client, session_id, cwd, replay_after=replay_after, attached=attached, register=register
    )
    async for turn in turns:
        rounds = rounds + 1 if turn.origin == "judge" else 1
        if turn.stop_reason == "cancelled":
            continue  # somebody stopped it: nothing to judge, and the loop ends
        await _judging(client, session_id, turn)
        if check:
            turn.check = await run_check(check, cwd, check_timeout_s)
        try:
            verdict = await ask(router, model, turn, rubric)
        except ModelError as exc:  # said in the session: never a silent pass
            verdict = Verdict("unknown", raw=f"the judge's model failed: {exc}")
        verdict = verdict.with_check(turn.check)
        again = verdict.verdict == "fail" and rounds < max_rounds
        await post(client, session_id, verdict, turn, model, Round(rounds, max_rounds, not again))
        followed = again and await _follow_up(client, session_id, verdict)
        yield Judged(turn, verdict, followed)


async def _judging(client: ClientSide, session_id: str, turn: TurnView) -> None:
    """Tell the worker the judge is at work (it shows so, as background work); an agent
    that knows nothing of it (not Crow) is judged all the same."""
    params = {"sessionId": session_id, "turnMessageId": turn.message_id}
    with contextlib.suppress(AcpError):
        await client.peer.request(POST_JUDGING, params)


async def _follow_up(client: ClientSide, session_id: str, verdict: Verdict) -> bool:
    """Ask the worker to fix what the judge found; False when the session is busy (a
    person took over) or gone."""
    request = schema.PromptRequest(
        session_id=session_id,
        prompt=[schema.TextContent(text=follow_up_text(verdict))],
        # Never held behind a person's prompt: the judge does not prompt a busy session.
        meta={FROM: "judge", INSERT: "reject"},
    )
    try:
        await client.call("session/prompt", request)
    except AcpError:
        return False
    return True
