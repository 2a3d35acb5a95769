"""Colours for the line client's lines, on a terminal only.

Colour is on when the stream is a terminal, ``NO_COLOR`` is unset or empty
(no-color.org), ``TERM`` is not ``dumb`` and ``--no-color`` was not given.
Lines are painted with plain SGR sequences, so the same strings serve ``crow
run``'s stderr and ``crow chat``'s screen (prompt_toolkit reads them as ANSI).
Each kind of line has one role; the text is never changed, only wrapped.
"""

from __future__ import annotations

import os
from typing import Any

from .screen import isatty

__all__ = ["Paint", "wants_colour"]

RESET = "\x1b[0m"
#: SGR parameters per role.
ROLES = {
    "you": "1",  # your prompts: bold
    "them": "1;35",  # another client's prompts: bold magenta
    "judge": "1;33",  # the judge's follow-up prompts: bold yellow
    "ok": "32",  # ✓ a tool call done, a verdict passed
    "fail": "31",  # ✗ a tool call failed, a verdict failed, an error
    "busy": "36",  # → a tool call running, the status line
    "note": "2",  # Crow's notes, thoughts, turn endings: dim
    "queued": "2;3",  # held prompts: dim italic
    "diff+": "32",
    "diff-": "31",
    "diff@": "36",
}

#: The role of an activity line by its first character.
MARKS = {"✓": "ok", "✗": "fail", "→": "busy", "·": "busy", "⊘": "note", "…": "note"}


def wants_colour(stream: Any, *, no_color: bool = False) -> bool:
    """Colour for ``stream``: a terminal, and nobody said no."""
    if no_color or os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    return isatty(stream)


class Paint:
    """``paint(role, text)``: ``text`` in the role's colour, or as it is."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def __call__(self, role: str, text: str) -> str:
        code = ROLES.get(role)
        if not self.enabled or code is None or not text:
            return text
        # Each line on its own: a terminal that scrolls keeps no attribute across lines.
        return "\n".join(f"\x1b[{code}m{line}{RESET}" if line else "" for line in text.split("\n"))

    def mark(self, line: str) -> str:
        """An activity line's colour from its mark (``✓`` done, ``✗`` failed, ``→``
        running…); a line without one (a note, a thought) is dim."""
        return self(MARKS.get(line[:1], "note"), line) if line else line
