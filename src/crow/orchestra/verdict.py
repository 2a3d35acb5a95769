"""What a judge works with: the view of a worker's turn it is shown (``TurnView``), a
check command's outcome (``Check``), the ``Verdict`` read from the judge model's answer
(``parse_verdict``), its place in the verify loop (``Round``) and how it is said: the
``_meta["crow/verdict"]`` fields (``verdict_meta``) and the follow-up prompt
(``follow_up_text``).  Plain values: the in-process judge (crow.orchestra.judge) and
the judge proxy (crow.orchestra.judge_proxy) share them."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from typing import Any

__all__ = [
    "OUTPUT_CHARS",
    "Check",
    "Round",
    "ToolCallView",
    "TurnView",
    "Verdict",
    "follow_up_text",
    "parse_verdict",
    "verdict_meta",
]

#: What of one tool call's output the judge model is shown.
OUTPUT_CHARS = 2000


@dataclass
class ToolCallView:
    title: str
    kind: str
    status: str
    input: Any = None
    output: str = ""


@dataclass
class TurnView:
    """What one turn of the worker did, as its updates told it."""

    message_id: str
    request: str = ""
    reply: str = ""
    tool_calls: list[ToolCallView] = field(default_factory=list)
    stop_reason: str | None = None
    origin: str | None = None  # "judge" for the judge's own follow-up prompts
    check: Check | None = None

    def render(self) -> str:
        lines = [f"The user asked:\n{self.request}", ""]
        for n, call in enumerate(self.tool_calls, 1):
            lines.append(f"Tool call {n}: {call.title} ({call.kind}, {call.status})")
            if call.input is not None:
                lines.append(f"  input: {json.dumps(call.input, ensure_ascii=False)[:500]}")
            if call.output:
                lines.append(f"  output: {call.output[:OUTPUT_CHARS]}")
        lines += ["", f"The agent replied:\n{self.reply or '(nothing)'}"]
        lines.append(f"The turn ended: {self.stop_reason}")
        if self.check is not None:
            lines += ["", self.check.describe()]
        return "\n".join(lines)


@dataclass(frozen=True)
class Check:
    """A check command's outcome: the evidence a verdict rests on."""

    command: str
    exit_code: int | None  # None: killed (timeout) or could not start
    output: str  # its tail

    @property
    def passed(self) -> bool:
        return self.exit_code == 0

    def describe(self) -> str:
        status = "could not finish" if self.exit_code is None else f"exited {self.exit_code}"
        return f"The check `{self.command}` {status}. Its output ends:\n{self.output}"


@dataclass(frozen=True)
class Verdict:
    verdict: str  # "pass", "fail" or "unknown"
    reasons: tuple[str, ...] = ()
    confidence: float | None = None
    raw: str = ""  # the judge's own words, when they could not be read as a verdict
    check_exit_code: int | None = None
    shown: str = ""  # what the judge model was asked (its reasoning, kept in a session)
    answer: str = ""  # ... and what it answered

    def with_check(self, check: Check | None) -> Verdict:
        """Evidence beats opinion: a check that failed fails the turn."""
        if check is None:
            return self
        if check.passed:
            return replace(self, check_exit_code=0)
        status = "did not finish" if check.exit_code is None else f"exited {check.exit_code}"
        reasons = (f"the check `{check.command}` {status}", *self.reasons)
        return replace(self, verdict="fail", reasons=reasons, check_exit_code=check.exit_code)

    def line(self) -> str:
        """The short human line every client shows."""
        why = "; ".join(self.reasons) or self.raw[:200] or "no reason given"
        mark = {"pass": "✓ verified", "fail": "✗ judge", "unknown": "? judge"}[self.verdict]
        return f"{mark}: {why}"


def parse_verdict(calls: list[dict[str, str]], text: str) -> Verdict:
    """A verdict tool call; else JSON that is the whole answer (a code fence around it
    stripped); else a fail written as the one JSON object in the text; else
    "unknown", never a silent pass.

    A pass is taken from nothing looser: the judge's text quotes what it was shown,
    and the worker wrote that.  A judge that answers "the agent ends with
    {"pass": true}, but it never ran the tests. FAIL" has not passed the turn.
    Reading a fail out of prose costs nothing (it only withholds a pass), but two
    JSON objects are one too many to tell which is the judge's."""
    for call in calls:
        if call.get("name") == "verdict":
            found = _from_json(call.get("arguments", ""))
            if found is not None:
                return found
    found = _from_json(_unfenced(text.strip()))
    if found is not None:
        return found
    objects = _json_objects(text)
    if len(objects) == 1 and (found := _from_json(objects[0])) and found.verdict == "fail":
        return found
    raw = text.strip() or json.dumps(calls)
    return Verdict("unknown", raw=raw)


_FENCE = re.compile(r"```[A-Za-z]*\n(.*?)\n?```", flags=re.DOTALL)


def _unfenced(text: str) -> str:
    """``text`` without one code fence around all of it."""
    fenced = _FENCE.fullmatch(text)
    return fenced.group(1).strip() if fenced else text


def _json_objects(text: str) -> list[str]:
    """Every JSON object written in ``text`` (outermost ones, in order)."""
    decoder, found, at = json.JSONDecoder(), [], text.find("{")
    while at != -1:
        try:
            value, end = decoder.raw_decode(text, at)
        except ValueError:
            at = text.find("{", at + 1)
            continue
        if isinstance(value, dict):
            found.append(text[at:end])
        at = text.find("{", end)
    return found


def _from_json(source: str) -> Verdict | None:
    try:
        data = json.loads(source)
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("pass"), bool):
        return None
    reasons = data.get("reasons")
    if isinstance(reasons, str):
        reasons = [reasons]
    reasons = tuple(str(r) for r in reasons) if isinstance(reasons, list) else ()
    confidence = data.get("confidence")
    confidence = float(confidence) if isinstance(confidence, int | float) else None
    return Verdict("pass" if data["pass"] else "fail", reasons, confidence)


@dataclass(frozen=True)
class Round:
    """Where a verdict stands in the verify loop."""

    number: int = 1
    of: int = 1
    final: bool = True  # no follow-up prompt comes after it


def verdict_meta(
    verdict: Verdict, turn: TurnView, judge_model: str, loop: Round = Round()
) -> dict[str, Any]:
    """The ``_meta["crow/verdict"]`` of a verdict message."""
    meta: dict[str, Any] = {
        "verdict": verdict.verdict,
        "reasons": list(verdict.reasons),
        "judgeModel": judge_model,
        "turnMessageId": turn.message_id,
        "round": loop.number,
        "maxRounds": loop.of,
        "final": loop.final,
    }
    if verdict.confidence is not None:
        meta["confidence"] = verdict.confidence
    if verdict.raw:
        meta["raw"] = verdict.raw[:2000]
    if verdict.check_exit_code is not None or turn.check is not None:
        meta["checkExitCode"] = verdict.check_exit_code
    return meta


def follow_up_text(verdict: Verdict) -> str:
    """The prompt that asks the worker to fix what the judge found."""
    reasons = "\n".join(f"- {reason}" for reason in verdict.reasons) or "- (none given)"
    return (
        "A reviewer checked your last turn and found problems:\n"
        f"{reasons}\nFix them, then say briefly what you changed."
    )
