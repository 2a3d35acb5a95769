"""What the ``crow`` command does when the reader of its output goes away.

``crow run --json … | head -1`` closes the pipe after one line.  Python ignores
SIGPIPE, so the next write raises ``BrokenPipeError``: from a callback inside the
event loop that is a logged traceback per update while the turn runs on.  Going
back to SIGPIPE's default is no cure either: it would also kill Crow when the
*agent's* stdin pipe breaks, which Crow reports instead.

So the commands that write for a person (not ``crow serve`` and the others whose
stdout is the wire) run with ``sys.stdout`` and ``sys.stderr`` guarded (``guard``):

- stdout's reader gone: the descriptor is pointed at /dev/null (nothing buffered
  can fail later, at exit), and the command leaves at once with
  ``EXIT_READER_GONE`` (141: 128 + SIGPIPE, as a shell reports a process SIGPIPE
  ended), with no traceback and no message (there is no one to read it): by the
  ``leave`` function ``guard`` was given, from wherever the write was (an
  exception raised in an event loop's callback would only be logged).  A command
  with a turn to cancel first registers ``on_gone``: it is called instead, once,
  and the command cancels its turn and leaves with that code itself.
- stderr's reader gone: it goes to /dev/null too, and the command carries on.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable
from typing import Any, TextIO

__all__ = ["EXIT_READER_GONE", "GuardedStream", "guard", "on_gone", "unguard"]

#: The exit status of a command whose reader went away (the shell's for SIGPIPE).
EXIT_READER_GONE = 141


class GuardedStream:
    """A text stream whose writes survive the reader going away (see the module)."""

    def __init__(self, stream: TextIO, *, leave: Callable[[int], Any] | None) -> None:
        self._stream = stream
        self._leave = leave  # stdout: how the command ends; stderr (None): it carries on
        self.gone = False
        self.callbacks: list[Callable[[], None]] = []

    def write(self, text: str) -> int:
        if not self.gone:
            try:
                return self._stream.write(text)
            except BrokenPipeError:
                self._went()
        return len(text)

    def flush(self) -> None:
        if not self.gone:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._went()

    def _went(self) -> None:
        self.gone = True
        with contextlib.suppress(OSError, ValueError):  # what is buffered goes nowhere
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)
        if self._leave is None:
            return
        if self.callbacks:
            for callback in self.callbacks:
                callback()
            return
        self._leave(EXIT_READER_GONE)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def guard(leave: Callable[[int], Any]) -> None:
    """Guard ``sys.stdout`` and ``sys.stderr`` of this process (once); ``leave(code)``
    ends the process when stdout's reader is gone and nobody registered ``on_gone``."""
    if not isinstance(sys.stdout, GuardedStream):
        sys.stdout = GuardedStream(sys.stdout, leave=leave)
    if not isinstance(sys.stderr, GuardedStream):
        sys.stderr = GuardedStream(sys.stderr, leave=None)


def unguard() -> None:
    """Undo ``guard`` (for a command whose stdout turns out to be the wire)."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if isinstance(stream, GuardedStream):
            setattr(sys, name, stream._stream)


def on_gone(callback: Callable[[], None]) -> bool:
    """Call ``callback`` (once) instead of leaving when stdout's reader goes away;
    False if stdout is not guarded (then nothing will call it)."""
    stream = sys.stdout
    if not isinstance(stream, GuardedStream):
        return False
    stream.callbacks.append(callback)
    return True
