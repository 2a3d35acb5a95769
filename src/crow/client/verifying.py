"""``--verify``: the line client asks crow serve's judge to verify its session.

The judge posts its verdict after the worker's turn went idle, and on "fail" may
prompt the worker again (its follow-up turns run in the same session), so the
client waits past the turn's end for the verdict that says it is ``final``.
"""

from __future__ import annotations

from typing import Any

from crow.acp import ClientSide, Session
from crow.extensions import VERIFY

from .render import verdict_of

__all__ = ["NO_JUDGE", "VerdictWaiter", "can_verify", "no_judge", "verify_meta"]

NO_JUDGE = "--verify needs crow serve's judge; this agent has none"
NO_JUDGE_V1 = (
    "--verify has no ACP v1 form: this agent speaks ACP v1 and has no judge; put crow "
    "proxy judge in front of it (crow conductor agent 'crow proxy judge' 'AGENT ...')"
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
    """Waits for the final verdict on the prompt sent after it was made."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.seen = set(self._verdicts())

    def _verdicts(self) -> dict[str, dict[str, Any]]:
        found = {}
        for message in self.session.projection.messages.values():
            verdict = verdict_of(message.meta)
            if verdict is not None:
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
