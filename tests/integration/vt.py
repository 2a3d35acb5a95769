"""A small terminal for tests: what a pty's reader would see on its screen.

prompt_toolkit redraws only what changed, so a status line that goes from
"queued (1)" to "queued (2)" writes a "2" and cursor moves, never the whole text:
matching the raw stream cannot see it.  ``Terminal`` applies the sequences it
writes (cursor moves, erase, autowrap on/off; colours and modes are ignored) to a
grid of rows, and keeps the rows that scroll off the top, so a test reads the
screen as a person would.
"""

from __future__ import annotations

import re
import time

import pexpect

__all__ = ["Terminal"]

_SEQUENCE = re.compile(
    r"\x1b\[([?>=]?)([0-9;]*)([ -/]*)([@-~])"  # CSI
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)"  # OSC (a title)
    r"|\x1b[()][A-Z0-9]"  # character sets
    r"|\x1b[=>78]"  # keypad modes, save/restore
)


class Terminal:
    def __init__(self, child: pexpect.spawn, rows: int, cols: int) -> None:
        self.child = child
        self.rows, self.cols = rows, cols
        self.grid = [[" "] * cols for _ in range(rows)]
        self.scrolled: list[str] = []  # rows gone off the top, oldest first
        self.row = self.col = 0
        self.autowrap = True
        self.pending = ""

    def send(self, text: str) -> None:
        self.child.send(text)

    # ---- reading the child -----------------------------------------------------------
    def read(self, seconds: float = 0.1) -> None:
        try:
            data = self.child.read_nonblocking(65536, timeout=seconds)
        except pexpect.TIMEOUT:
            return
        except pexpect.EOF:
            return
        self.feed(data)

    def wait_for(self, text: str, timeout: float = 15.0, *, screen_only: bool = True) -> str:
        """Read until ``text`` is on the screen (or anywhere, with ``screen_only``
        False); returns the screen.  Raises AssertionError with the screen."""
        end = time.monotonic() + timeout
        while True:
            shown = self.screen() if screen_only else self.everything()
            if text in shown:
                return shown
            if time.monotonic() > end:
                raise AssertionError(f"{text!r} not on the screen:\n{self.everything()}")
            self.read()

    def screen(self) -> str:
        return "\n".join("".join(row).rstrip() for row in self.grid).rstrip("\n")

    def everything(self) -> str:
        return "\n".join([*self.scrolled, self.screen()])

    # ---- applying what it wrote ------------------------------------------------------
    def feed(self, data: str) -> None:
        data = self.pending + data
        self.pending = ""
        i = 0
        while i < len(data):
            char = data[i]
            if char == "\x1b":
                found = _SEQUENCE.match(data, i)
                if found is None:
                    if len(data) - i < 16:  # cut in the middle: wait for the rest
                        self.pending = data[i:]
                        return
                    i += 1
                    continue
                if found.group(4):
                    self._csi(found.group(1), found.group(2), found.group(4))
                i = found.end()
                continue
            if char == "\r":
                self.col = 0
            elif char == "\n":
                self._down()
            elif char == "\x08":
                self.col = max(0, self.col - 1)
            elif char >= " ":
                self._put(char)
            i += 1

    def _put(self, char: str) -> None:
        if self.col >= self.cols:
            if self.autowrap:
                self.col = 0
                self._down()
            else:
                self.col = self.cols - 1
        self.grid[self.row][self.col] = char
        self.col += 1

    def _down(self) -> None:
        if self.row == self.rows - 1:
            self.scrolled.append("".join(self.grid.pop(0)).rstrip())
            self.grid.append([" "] * self.cols)
        else:
            self.row += 1

    def _csi(self, private: str, params: str, final: str) -> None:
        numbers = [int(p) if p else 0 for p in params.split(";")] if params else []
        n = numbers[0] if numbers and numbers[0] else 1
        if private == "?":
            if "7" in params.split(";"):
                self.autowrap = final == "h"
            return
        if final == "A":
            self.row = max(0, self.row - n)
        elif final == "B":
            self.row = min(self.rows - 1, self.row + n)
        elif final == "C":
            self.col = min(self.cols - 1, self.col + n)
        elif final == "D":
            self.col = max(0, self.col - n)
        elif final == "G":
            self.col = min(self.cols - 1, n - 1)
        elif final == "H":
            row = numbers[0] if numbers and numbers[0] else 1
            col = numbers[1] if len(numbers) > 1 and numbers[1] else 1
            self.row, self.col = min(self.rows, row) - 1, min(self.cols, col) - 1
        elif final == "J":
            what = numbers[0] if numbers else 0
            if what == 0:
                self.grid[self.row][self.col :] = [" "] * (self.cols - self.col)
                for row in range(self.row + 1, self.rows):
                    self.grid[row] = [" "] * self.cols
            elif what == 2:
                self.grid = [[" "] * self.cols for _ in range(self.rows)]
        elif final == "K":
            what = numbers[0] if numbers else 0
            if what == 0:
                self.grid[self.row][self.col :] = [" "] * (self.cols - self.col)
            elif what == 2:
                self.grid[self.row] = [" "] * self.cols
