"""Which tool calls run, which ask, which are refused.

A decision comes from, first to last: the yolo switch; an "always" answer given
in this session; an "always" answer saved in ``permissions.toml``; the policy
for the tool itself (``[memory] remember/forget``, for a trusted server's
tool); the policy for the tool's kind (defaults: reads and searches run, edits, deletes and
commands ask).  Only a trusted server (a built-in, or one marked ``trusted`` in
config.toml) chooses its tools' kind: the others' tools are decided as ``other``,
so a third-party "read-only" tool still asks.  An answer Crow does not recognise
is a rejection, never an approval (ACP-V2.md §7.4).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from crow.config import Paths, ToolSettings, save_permission

from .hub import ToolInfo

__all__ = ["OPTIONS", "Answer", "Permissions"]

# optionId: (ACP option kind, label, what it means)
OPTIONS: dict[str, tuple[str, str]] = {
    "allow_once": ("allow_once", "Allow once"),
    "allow_session": ("allow_always", "Always allow in this session"),
    "allow_saved": ("allow_always", "Always allow (save to permissions.toml)"),
    "reject_once": ("reject_once", "Reject"),
    "reject_session": ("reject_always", "Always reject in this session"),
}


@dataclass(frozen=True)
class Answer:
    allowed: bool
    remember: str | None = None  # None, "session" or "saved"


ANSWERS = {
    "allow_once": Answer(True),
    "allow_session": Answer(True, "session"),
    "allow_saved": Answer(True, "saved"),
    "reject_once": Answer(False),
    "reject_session": Answer(False, "session"),
}
REJECTED = Answer(False)


@dataclass
class Permissions:
    settings: ToolSettings
    paths: Paths
    session: dict[str, str] = field(default_factory=dict)  # tool -> allow | deny

    def decide(self, tool: ToolInfo) -> str:
        """``allow``, ``deny`` or ``ask``."""
        if self.settings.yolo:
            return "allow"
        remembered = self.session.get(tool.qualified) or self.settings.remembered.get(
            tool.qualified
        )
        if remembered is not None:
            return remembered
        policy = self.settings.tool_policies.get(tool.qualified)
        if policy is not None and tool.trusted:
            return policy
        kind = tool.permission_kind
        return self.settings.permissions.get(kind, self.settings.permissions["other"])

    def answer(self, tool: ToolInfo, option_id: str | None) -> Answer:
        """What an outcome means, remembering "always" answers."""
        answer = ANSWERS.get(option_id or "", REJECTED)
        if answer.remember is not None:
            decision = "allow" if answer.allowed else "deny"
            self.session[tool.qualified] = decision
            if answer.remember == "saved":
                save_permission(self.paths, tool.qualified, decision)
        return answer
