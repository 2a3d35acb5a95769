"""``crow chat``'s terminal: finished lines scroll above the input line, and a live
area between them shows what is still changing.

The input line stays open while turns run (the chat follows its session, whoever
drives it), so nothing may be written over it.  Everything goes through here:

- ``line`` puts finished lines into the scrollback, above the prompt (through
  prompt_toolkit's ``run_in_terminal`` while a prompt is on the screen, in the
  order they came, several at a time);
- ``write`` takes the streamed reply: its finished lines go up, the line still
  growing is shown in the live area (wrapped; a very long one goes up a row at a
  time);
- ``show_tool`` keeps one line per tool call in flight in the live area, updated
  in place; the call's end is a ``line``;
- ``status`` is what a busy session does (a spinner), with how many prompts are
  queued, and ``held`` lists yours.

The live area and the prompt are one prompt_toolkit message (``message``), drawn
again on every change and by the spinner's refresh.
"""

from __future__ import annotations

import shutil
import time
from typing import TextIO

from prompt_toolkit.application import get_app_or_none, run_in_terminal
from prompt_toolkit.formatted_text import ANSI
from prompt_toolkit.utils import get_cwidth

from .paint import Paint
from .screen import SPINNER

__all__ = ["Console"]

#: Rows of a growing reply line shown live; past them, finished rows scroll up.
MAX_LIVE_ROWS = 8
#: How many of your held prompts the live area lists.
MAX_HELD_ROWS = 3
SPIN_EVERY_S = 0.1


class Console:
    in_place = True  # tool calls in flight update in place

    def __init__(self, out: TextIO, paint: Paint) -> None:
        self.out = out
        self.paint = paint
        self.partial = ""  # the reply's line that is still growing
        self.tools: dict[str, str] = {}  # tool calls in flight: id -> title
        self.status: str | None = None  # what the busy session does; None when idle
        self.hint = ""  # the keys that apply now
        self.queued = 0  # prompts held now (everyone's)
        self.held: list[str] = []  # yours, in order
        self.pending: list[str] = []  # lines waiting to go up
        self.flushing = False

    # ---- the scrollback ------------------------------------------------------------
    def line(self, text: str) -> None:
        """Finished lines, above the prompt (the reply's growing line ends first)."""
        self.end_reply()
        self.pending.append(text)
        self.flush()

    def write(self, text: str) -> None:
        """Streamed reply text."""
        text = self.partial + text
        finished, newline, self.partial = text.rpartition("\n")
        if newline:
            self.pending.append(finished)
        rows = _rows(self.partial, self.width())
        if len(rows) > MAX_LIVE_ROWS:  # a long paragraph: its first rows go up
            self.pending.extend(rows[:-1])
            self.partial = rows[-1]
        self.flush()
        self.refresh()

    def end_reply(self) -> None:
        if self.partial:
            self.pending.append(self.partial)
            self.partial = ""

    def flush(self) -> None:
        """Write the pending lines: above a running prompt, or straight out."""
        app = get_app_or_none()
        if app is not None and app.is_running:
            if not self.flushing and self.pending:
                self.flushing = True
                run_in_terminal(self._write_pending)
        else:
            self._write_pending()

    def _write_pending(self) -> None:
        self.flushing = False
        if self.pending:
            lines, self.pending = self.pending, []
            self.out.write("\n".join(lines) + "\n")
            self.out.flush()

    # ---- the live area -------------------------------------------------------------
    def show_tool(self, key: str, title: str | None) -> None:
        """A tool call in flight, on a live row of its own; None: it is over."""
        if title is None:
            self.tools.pop(key, None)
        else:
            self.tools[key] = title
        self.refresh()

    def say(self, status: str | None, hint: str = "") -> None:
        self.status, self.hint = status, hint
        self.refresh()

    def refresh(self) -> None:
        app = get_app_or_none()
        if app is not None and app.is_running:
            app.invalidate()

    def message(self, prompt: str) -> ANSI:
        """The live area, then ``prompt``: the input line's message."""
        spin = SPINNER[int(time.monotonic() / SPIN_EVERY_S) % len(SPINNER)]
        rows: list[str] = []
        rows += _rows(self.partial, self.width())
        rows += [self.paint("busy", f"{spin} {title}") for title in self.tools.values()]
        if self.status:
            queued = f" · queued ({self.queued})" if self.queued else ""
            said = _fit(f"{spin} {self.status}…{queued}", self.width())
            room = self.width() - 1 - get_cwidth(said)
            hint = f"  {self.hint}" if self.hint and room >= len(self.hint) + 2 else ""
            rows.append(self.paint("busy", said) + self.paint("note", hint))
        for text in self.held[:MAX_HELD_ROWS]:
            rows.append(self.paint("queued", f"  queued: {text}"))
        if len(self.held) > MAX_HELD_ROWS:
            rows.append(self.paint("queued", f"  … {len(self.held) - MAX_HELD_ROWS} more"))
        return ANSI("\n".join([*rows, prompt]))

    def width(self) -> int:
        app = get_app_or_none()
        try:
            if app is not None:
                return max(20, app.output.get_size().columns)
        except Exception:  # no size: the fallback will do
            pass
        return max(20, shutil.get_terminal_size().columns)


def _rows(text: str, width: int) -> list[str]:
    """``text`` cut into rows that fit ``width`` columns (none for no text)."""
    rows: list[str] = []
    row, used = "", 0
    for char in text:
        size = get_cwidth(char)
        if used + size > width - 1:
            rows.append(row)
            row, used = "", 0
        row += char
        used += size
    if row:
        rows.append(row)
    return rows


def _fit(text: str, width: int) -> str:
    """``text`` cut to one row (a status row is never wrapped)."""
    rows = _rows(text, width)
    return rows[0][:-1] + "…" if len(rows) > 1 else text
