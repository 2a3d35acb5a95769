"""``--verify``: the line client asks crow serve's judge to verify its session.

The judge posts its verdict after the worker's turn went idle, and on "fail" may
prompt the worker again (its follow-up turns run in the same session), so the
client waits past the turn's end for the verdict that says it is ``final``.

A verdict counts only with a proof made with the key the session's answer handed
out (crow.verdict_proof): ``Verdicts`` tells which messages are verdicts, and
every other message, whatever its ``_meta`` says, is shown as what it is.
"""

from __future__ import annotations

from typing import Any

from crow.acp import ClientSide, Message, Session
from crow.extensions import NOTICE, VERIFY
from crow.verdict_proof import KeyHandout, key_handout, proven_verdict

__all__ = [
    "NO_JUDGE",
    "NO_KEY",
    "VerdictWaiter",
    "Verdicts",
    "can_verify",
    "no_judge",
    "unknown_line",
    "verify_meta",
]

NO_JUDGE = "--verify needs crow serve's judge; this agent has none"
NO_JUDGE_V1 = (
    "--verify has no ACP v1 form: this agent speaks ACP v1 and has no judge; put crow "
    "proxy judge in front of it (crow conductor agent 'crow proxy judge' 'AGENT ...')"
)
NO_KEY = (
    f"--verify: the agent answered without a verifier's key (_meta {VERIFY}), so no "
    "verdict of its could be told from a forged one"
)
#: How much of what the judge said an "unknown" explanation quotes.
QUOTE_CHARS = 160


class Verdicts:
    """Which messages of a session are verdicts its verifier gave (proof checked)."""

    def __init__(self, session_id: str, handout: KeyHandout | None) -> None:
        self.session_id = session_id
        self.handout = handout

    @classmethod
    def of_session(cls, session: Session) -> Verdicts:
        """From the key in the answer that opened (or resumed) ``session``."""
        return cls(session.id, key_handout(getattr(session.response, "meta", None)))

    @property
    def verifier(self) -> str | None:
        return self.handout.verifier if self.handout is not None else None

    def of(self, message: Message | None) -> dict[str, Any] | None:
        """The message's ``_meta["crow/verdict"]`` if its proof holds, else None."""
        if message is None or self.handout is None:
            return None
        return proven_verdict(self.handout.key, self.session_id, message.meta, message.text)

    def is_note(self, message: Message | None) -> bool:
        """A message from Crow itself (``_meta["crow/notice"]``) or a proven verdict,
        not the agent's words."""
        if message is None:
            return False
        meta = message.meta
        return (isinstance(meta, dict) and NOTICE in meta) or self.of(message) is not None


def unknown_line(verdict: dict[str, Any]) -> str:
    """Why an "unknown" verdict is not a pass, in one line for people."""
    said = " ".join(str(verdict.get("raw") or "; ".join(verdict.get("reasons") or [])).split())
    if len(said) > QUOTE_CHARS:
        said = said[:QUOTE_CHARS].rsplit(" ", 1)[0] + " …"
    quoted = f"; it said: {said}" if said else ""
    return (
        f"the judge gave no verdict{quoted} (use a judge model that makes tool calls, "
        "[judge] model, or a check command, --check CMD)"
    )


def can_verify(client: ClientSide) -> bool:
    """The agent has a judge (crow serve says so in its capabilities' ``_meta``)."""
    capabilities = getattr(client.agent, "capabilities", None)
    meta = getattr(capabilities, "meta", None)
    return isinstance(meta, dict) and meta.get(VERIFY) is True


def no_judge(client: ClientSide) -> str:
    """Why ``--verify`` cannot be had from this agent, in one line."""
    return NO_JUDGE_V1 if client.v1 is not None else NO_JUDGE


def verify_meta(check: str | None) -> dict[str, Any]:
    """The ``_meta`` that turns verifying on for a session."""
    return {VERIFY: {"check": check} if check else True}


class VerdictWaiter:
    """Waits for the final verdict on the prompt sent after it was made, from the
    verifier the session's answer named."""

    def __init__(self, session: Session, verdicts: Verdicts | None = None) -> None:
        self.session = session
        self.verdicts = verdicts or Verdicts.of_session(session)
        self.seen = set(self._verdicts())

    def _verdicts(self) -> dict[str, dict[str, Any]]:
        found = {}
        for message in self.session.projection.messages.values():
            verdict = self.verdicts.of(message)
            if verdict is not None and verdict.get("verifier") == self.verdicts.verifier:
                found[message.message_id] = verdict
        return found

    def final(self) -> dict[str, Any] | None:
        """The final verdict posted since, if any."""
        for message_id, verdict in self._verdicts().items():
            if message_id not in self.seen and verdict.get("final", True):
                return verdict
        return None

    async def wait(self) -> dict[str, Any] | None:
        """The final verdict; None when a turn was cancelled (the judge skips those)."""
        projection = self.session.projection
        while True:
            verdict = self.final()
            if verdict is not None:
                return verdict
            if projection.state == "idle" and projection.stop_reason == "cancelled":
                return None
            await self.session.client.next_update(self.session.id)
