"""The terminal of the line client: the reply on stdout, lines on stderr, and a
status line with a spinner between them.

The status line ("⠹ waiting for the model…") says what a quiet turn waits for.
It is drawn on stderr only when stderr is a terminal, only at the start of a
line and only after a moment without output, and every other write erases it
first, so it never lands inside the reply or a log line.  Redirected, nothing
of it is written.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any, TextIO

__all__ = ["ReplyStream", "Screen", "isatty"]

SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
SPIN_EVERY_S = 0.1
QUIET_BEFORE_SPIN_S = 0.3  # the status appears only after this long without output
ERASE = "\r\x1b[K"
WIDTH = 78  # a status longer than this is cut: a wrapped line cannot be erased


class Screen:
    def __init__(self, out: TextIO, err: TextIO, *, separate: bool | None = None) -> None:
        self.out = out
        self.err = err
        #: A stderr line after part of a reply line ends that line on stdout first:
        #: always when True, on a terminal when None (a pipe gets the reply's bytes only).
        self.separate = isatty(out) if separate is None else separate
        self.at_line_start = True
        self.spinning = False  # work runs: the status may be drawn
        self.shown = False  # the status is on the screen now
        self.status = "working"
        self.quiet_since = time.monotonic()
        self.frame = 0
        self.can_spin = isatty(err)
        self.tools: dict[str, str] = {}  # tool calls in flight: id -> title

    @property
    def in_place(self) -> bool:
        """A line can be updated in place (stderr is a terminal): a tool call in
        flight is shown on the status line, not as lines of its own."""
        return self.can_spin

    def show_tool(self, key: str, title: str | None) -> None:
        """A tool call in flight, shown at once on the status line; None: it is over."""
        if title is None:
            self.tools.pop(key, None)
            return
        self.tools[key] = title
        if not self.at_line_start and self.separate:  # the reply's line ends first
            self.out.write("\n")
            self.out.flush()
            self.at_line_start = True
        self.tick(force=True)

    def write(self, text: str) -> None:
        """Reply text, as it streams."""
        if not text:
            return
        self.erase()
        self.out.write(text)
        self.out.flush()
        self.at_line_start = text.endswith("\n")
        self.quiet_since = time.monotonic()

    def line(self, text: str) -> None:
        """A line of its own on stderr."""
        self.erase()
        if not self.at_line_start and self.separate:
            self.out.write("\n")
            self.at_line_start = True
        self.out.flush()
        self.err.write(text + "\n")
        self.err.flush()
        self.quiet_since = time.monotonic()

    def say(self, status: str) -> None:
        """What the work waits for now; drawn when next due."""
        self.status = status
        if self.shown:
            self.tick(force=True)

    def erase(self) -> None:
        if self.shown:
            self.err.write(ERASE)
            self.err.flush()
            self.shown = False

    def tick(self, *, force: bool = False) -> None:
        if not (self.can_spin and self.spinning and self.at_line_start):
            return
        if not force and time.monotonic() - self.quiet_since < QUIET_BEFORE_SPIN_S:
            return
        label = f"{self.status}…"
        if self.tools:  # the latest call in flight, in place of the status
            titles = list(self.tools.values())
            more = f" (+{len(titles) - 1} more)" if len(titles) > 1 else ""
            label = f"{titles[-1]}{more}"
        text = f"{SPINNER[self.frame % len(SPINNER)]} {label}"
        if len(text) > WIDTH:
            text = text[: WIDTH - 1] + "…"
        self.err.write(f"{ERASE}{text}")
        self.err.flush()
        self.shown = True
        self.frame += 1

    @contextlib.contextmanager
    def spinner(self, status: str = "working") -> Iterator[None]:
        """Spin (when quiet) for the duration of the block; erased after.  The
        caller ticks it (``spin``)."""
        self.spinning, self.quiet_since, self.status = True, time.monotonic(), status
        try:
            yield
        finally:
            self.spinning = False
            self.erase()

    @contextlib.asynccontextmanager
    async def spinning_while(self, status: str) -> AsyncIterator[None]:
        """``spinner`` with its own ticking task."""
        ticking = asyncio.create_task(self.spin())
        try:
            with self.spinner(status):
                yield
        finally:
            ticking.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await ticking

    async def spin(self) -> None:
        while True:
            await asyncio.sleep(SPIN_EVERY_S)
            self.tick()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """No status while someone is asked something."""
        spinning, self.spinning = self.spinning, False
        self.erase()
        try:
            yield
        finally:
            self.spinning, self.quiet_since = spinning, time.monotonic()


class ReplyStream:
    """A file-like for ``TextRenderer``: the reply side of a screen (or of anything
    with a ``write``, as crow chat's console)."""

    def __init__(self, screen: Any) -> None:
        self.screen = screen

    def write(self, text: str) -> int:
        self.screen.write(text)
        return len(text)

    def flush(self) -> None:
        pass


def isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False
