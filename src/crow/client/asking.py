"""Answering the agent's permission requests from the line client.

``--yes`` allows once, ``--no`` rejects once, a terminal asks the person, and
without any of them the request is refused and the run says which flag to pass.

A question shows what will happen (``what_it_does``): the diff of an edit or a
write (the first lines, then "… N more"), the command and its directory, the URL
of a fetch.  At a terminal, ``crow run`` reads the answer without a thread, so
Ctrl-C (which cancels the turn) also ends the question at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from typing import TYPE_CHECKING, Any

from crow.acp import SessionProjection, schema

from .paint import Paint

if TYPE_CHECKING:
    from .screen import Screen

__all__ = ["CANCELLED", "PermissionAsker", "pick", "question_lines", "what_it_does"]

CANCELLED = schema.RequestPermissionResponse(outcome=schema.CancelledPermissionOutcome())
#: Lines of a diff (or of a long command) a question shows before "… N more".
PREVIEW_LINES = 8


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


def what_it_does(
    request: schema.RequestPermissionRequest,
    projection: SessionProjection | None = None,
    paint: Paint | None = None,
) -> list[str]:
    """Lines saying what allowing ``request`` lets happen (indented, maybe painted)."""
    paint = paint or Paint(False)
    subject = request.subject
    if isinstance(subject, schema.CommandPermissionSubject):
        return [
            *_cut([f"$ {line}" for line in subject.command.splitlines() or [""]]),
            f"in {subject.cwd}",
        ]
    if not isinstance(subject, schema.ToolCallPermissionSubject):
        return []
    call = subject.tool_call
    raw = call.raw_input
    if raw in (schema.UNSET, None) and projection is not None:
        known = projection.tool_calls.get(call.tool_call_id)
        raw = known.fields.get("raw_input") if known else None
    raw = raw if isinstance(raw, dict) else {}
    for item in call.content if isinstance(call.content, list) else []:
        patch = getattr(getattr(item, "patch", None), "text", None)
        if getattr(item, "type", None) == "diff" and isinstance(patch, str):
            return _diff_lines(patch, paint)
    kind = call.kind if isinstance(call.kind, str) else None
    if isinstance(raw.get("url"), str) and kind in (None, "fetch", "search", "other"):
        return [raw["url"]]
    if isinstance(raw.get("command"), str):
        return _cut([f"$ {line}" for line in raw["command"].splitlines() or [""]])
    return []


def _diff_lines(patch: str, paint: Paint) -> list[str]:
    """A git patch as the file's name, then its hunks' lines."""
    lines: list[str] = []
    for line in patch.splitlines():
        if line.startswith("diff --git "):
            continue
        if line.startswith("new file mode"):
            lines.append("(a new file)")
        elif line.startswith("+++ "):
            lines.insert(0, line[4:])
        elif line.startswith("--- "):
            continue
        elif line.startswith("@@"):
            lines.append(paint("diff@", line))
        elif line.startswith("+"):
            lines.append(paint("diff+", line))
        elif line.startswith("-"):
            lines.append(paint("diff-", line))
        else:
            lines.append(line)
    return _cut(lines, keep=PREVIEW_LINES + 1)  # the file's name is not a diff line


def _cut(lines: list[str], keep: int = PREVIEW_LINES) -> list[str]:
    if len(lines) <= keep:
        return lines
    return [*lines[:keep], f"… {len(lines) - keep} more lines"]


def question_lines(
    request: schema.RequestPermissionRequest,
    projection: SessionProjection | None = None,
    paint: Paint | None = None,
) -> list[str]:
    """The question as shown: title, description, what it does, the options."""
    lines = [f"? {request.title}"]
    description = getattr(request, "description", None)
    if isinstance(description, str) and description:
        lines.append(f"  {description}")
    lines += [f"    {line}" for line in what_it_does(request, projection, paint)]
    lines += [f"  {n}) {option.name}" for n, option in enumerate(request.options, 1)]
    return lines


class PermissionAsker:
    """mode: ``yes``, ``no``, ``ask`` (a person at a terminal) or ``refuse``."""

    def __init__(self, mode: str, *, tty_in: Any = None, tty_out: Any = None) -> None:
        self.mode = mode
        self.tty_in = tty_in
        self.tty_out = tty_out or sys.stderr
        self.refused: list[str] = []  # titles refused for want of a flag
        self.screen: Screen | None = None  # its status line is hidden while asking
        self.projection: SessionProjection | None = None  # what the tool call said
        self.paint = Paint(False)

    async def __call__(self, request: schema.RequestPermissionRequest) -> Any:
        options = list(request.options)
        if self.mode == "yes":
            choice = _choose(options, "allow_once", "allow_always")
        elif self.mode == "no":
            choice = _choose(options, "reject_once", "reject_always")
        elif self.mode == "ask":
            with self.screen.paused() if self.screen else contextlib.nullcontext():
                choice = await self.ask(request)
        else:
            self.refused.append(request.title)
            return CANCELLED
        return _selected(choice) if choice else CANCELLED

    async def ask(self, request: schema.RequestPermissionRequest) -> str | None:
        """Ask on the terminal; returns an optionId, or None to cancel.  Cancelling
        the caller (Ctrl-C cancels the turn) ends the question at once."""
        out = self.tty_out
        options = list(request.options)
        lines = question_lines(request, self.projection, self.paint)
        out.write("\n" + "\n".join(lines) + "\n")
        lines_in = _LineReader(self.tty_in or sys.stdin)
        try:
            while True:  # Enter alone asks again: a stray Enter must never allow a command
                out.write(f"choose 1-{len(options)}: ")
                out.flush()
                line = await lines_in.readline()
                if not line:
                    return None
                choice = pick(options, line)
                if choice is not None:
                    return choice
                out.write(f"  answer a number from 1 to {len(options)}, y or n\n")
        except asyncio.CancelledError:
            out.write("\n")
            out.flush()
            raise


class _LineReader:
    """Lines from a terminal read on the event loop (no thread left blocked on it)."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.buffer = b""
        self.loop = asyncio.get_running_loop()
        self.fd: int | None = None
        with contextlib.suppress(AttributeError, ValueError, OSError):
            self.fd = stream.fileno()

    async def readline(self) -> str:
        if self.fd is None:  # not a file: a thread it is (tests pass a StringIO)
            return str(await asyncio.to_thread(self.stream.readline))
        while b"\n" not in self.buffer:
            await self._readable(self.fd)
            data = os.read(self.fd, 4096)
            if not data:
                line, self.buffer = self.buffer, b""
                return line.decode(errors="replace")
            self.buffer += data
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line.decode(errors="replace") + "\n"

    async def _readable(self, fd: int) -> None:
        ready = self.loop.create_future()

        def wake() -> None:
            if not ready.done():
                ready.set_result(None)

        self.loop.add_reader(fd, wake)
        try:
            await ready
        finally:
            self.loop.remove_reader(fd)
