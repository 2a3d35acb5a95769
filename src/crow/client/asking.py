"""Answering the agent's permission requests from the line client.

``--yes`` allows once, ``--no`` rejects once, a terminal asks the person, and
without any of them the request is refused and the run says which flag to pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from typing import TYPE_CHECKING, Any

from crow.acp import schema

if TYPE_CHECKING:
    from .screen import Screen

__all__ = ["PermissionAsker"]

CANCELLED = schema.RequestPermissionResponse(outcome=schema.CancelledPermissionOutcome())


def _choose(options: list[Any], *kinds: str) -> str | None:
    for kind in kinds:
        for option in options:
            if option.kind == kind:
                return str(option.option_id)
    return None


def pick(options: list[Any], answer: str) -> str | None:
    """The option an answer names (a number, y/yes, a/always, n/no); None for
    anything else, Enter alone included: a stray Enter must never allow a command."""
    answer = answer.strip().lower()
    if answer.isdigit() and 1 <= int(answer) <= len(options):
        return str(options[int(answer) - 1].option_id)
    if answer in ("y", "yes"):
        return _choose(options, "allow_once")
    if answer in ("a", "always"):
        return _choose(options, "allow_always")
    if answer in ("n", "no"):
        return _choose(options, "reject_once")
    return None


def _selected(option_id: str) -> schema.RequestPermissionResponse:
    return schema.RequestPermissionResponse(
        outcome=schema.SelectedPermissionOutcome(option_id=option_id)
    )


class PermissionAsker:
    """mode: ``yes``, ``no``, ``ask`` (a person at a terminal) or ``refuse``."""

    def __init__(self, mode: str, *, tty_in: Any = None, tty_out: Any = None) -> None:
        self.mode = mode
        self.tty_in = tty_in
        self.tty_out = tty_out or sys.stderr
        self.refused: list[str] = []  # titles refused for want of a flag
        self.screen: Screen | None = None  # its status line is hidden while asking

    async def __call__(self, request: schema.RequestPermissionRequest) -> Any:
        options = list(request.options)
        if self.mode == "yes":
            choice = _choose(options, "allow_once", "allow_always")
        elif self.mode == "no":
            choice = _choose(options, "reject_once", "reject_always")
        elif self.mode == "ask":
            with self.screen.paused() if self.screen else contextlib.nullcontext():
                choice = await asyncio.to_thread(self.ask, request.title, options)
        else:
            self.refused.append(request.title)
            return CANCELLED
        return _selected(choice) if choice else CANCELLED

    def ask(self, title: str, options: list[Any]) -> str | None:
        """Ask on the terminal; returns an optionId, or None to cancel."""
        out = self.tty_out
        out.write(f"\n{title}\n")
        for number, option in enumerate(options, 1):
            out.write(f"  {number}) {option.name}\n")
        while True:  # Enter alone asks again: a stray Enter must never allow a command
            out.write(f"choose 1-{len(options)}: ")
            out.flush()
            line = (self.tty_in or sys.stdin).readline()
            if not line:
                return None
            choice = pick(options, line)
            if choice is not None:
                return choice
            out.write(f"  answer a number from 1 to {len(options)}, y or n\n")
