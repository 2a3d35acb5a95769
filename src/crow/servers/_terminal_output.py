"""Output handling for the terminal server: UTF-8-safe byte buffers and progress streaming.

Owns the head-and-tail capture of a ``run`` (``HeadTail``), the progress notifications sent
while a command runs (``ProgressStream``), cutting bytes without splitting a UTF-8
character, and the status lines (``[exit code N]`` ...) that end a result.  It does not own
the processes (``_terminal_process``) nor the background ring buffers (``_terminal_jobs``).
"""

from __future__ import annotations

import asyncio
import codecs
import logging
import signal
from contextlib import suppress

from mcp.server.mcpserver import Context

# The terminal server's logger, whichever of its modules logs.
logger = logging.getLogger("crow.servers.terminal")

#: Progress notifications are coalesced over at most this long.
COALESCE_S = 0.05
#: Output waiting to be streamed beyond this (a slow client) is dropped, with a note.
MAX_PENDING_PROGRESS = 1024 * 1024


def _is_continuation(byte: int) -> bool:
    return 0x80 <= byte <= 0xBF


def _trim_start(data: bytes) -> bytes:
    """Drop up to 3 leading UTF-8 continuation bytes (the end of a character cut off)."""
    i = 0
    while i < min(3, len(data)) and _is_continuation(data[i]):
        i += 1
    return data[i:]


def utf8_end(data: bytes | bytearray, end: int) -> int:
    """``end`` moved back so ``data[:end]`` does not stop inside a UTF-8 character."""
    if end >= len(data) or end <= 0:
        return max(0, min(end, len(data)))
    i = end
    while i > 0 and end - i < 4 and _is_continuation(data[i]):
        i -= 1
    if i > 0 and end - i < 4 and data[i] >= 0xC0:
        return i
    return end


def decode(data: bytes | bytearray) -> str:
    return bytes(data).decode("utf-8", errors="replace")


class HeadTail:
    """The first and the last halves of at most ``limit`` bytes, and the count of the rest."""

    def __init__(self, limit: int) -> None:
        self.tail_size = max(limit, 2) // 2
        self.head_size = max(limit, 2) - self.tail_size
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        if len(self.head) < self.head_size:
            take = self.head_size - len(self.head)
            self.head += chunk[:take]
            chunk = chunk[take:]
        if chunk:
            self.tail += chunk
            if len(self.tail) > self.tail_size:
                del self.tail[: len(self.tail) - self.tail_size]

    @property
    def omitted(self) -> int:
        return self.total - len(self.head) - len(self.tail)

    def text(self) -> str:
        if not self.omitted:
            return decode(self.head + self.tail)
        head = decode(self.head[: utf8_end(self.head, len(self.head))])
        tail = decode(_trim_start(bytes(self.tail)))
        if head and not head.endswith("\n"):
            head += "\n"
        return f"{head}[... {self.omitted} bytes of output truncated ...]\n{tail}"


def with_status(output: str, status: str) -> str:
    if output and not output.endswith("\n"):
        output += "\n"
    return f"{output}{status}"


def status_line(code: int | None, sig: str | None, *, running: bool = False) -> str:
    if running:
        return "[running]"
    if sig is not None:
        number = getattr(signal.Signals, sig, None)
        return f"[terminated by signal {int(number) if number is not None else sig}]"
    return f"[exit code {code}]"


class ProgressStream:
    """Sends output to the client as progress notifications while a command runs.

    The first piece goes at once; later ones wait at most ``COALESCE_S`` so a chatty
    command makes a notification per ~50 ms, not per read.
    """

    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx
        self._pending = bytearray()
        self._dropped = 0
        self._seen = 0
        self._progress = 0.0
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._wake = asyncio.Event()
        self._closing = asyncio.Event()
        self._broken = False
        self._task = asyncio.create_task(self._loop(), name="terminal-progress")

    def feed(self, chunk: bytes) -> None:
        if self._broken:
            return
        self._seen += len(chunk)
        self._pending += chunk
        if len(self._pending) > MAX_PENDING_PROGRESS:
            cut = len(self._pending) - MAX_PENDING_PROGRESS // 2
            del self._pending[:cut]
            self._dropped += cut
            self._decoder.reset()
        self._wake.set()

    async def _flush(self, final: bool = False) -> None:
        data = bytes(self._pending)
        self._pending.clear()
        prefix = ""
        if self._dropped:
            prefix = f"[... {self._dropped} bytes not streamed ...]\n"
            data = _trim_start(data)
            self._dropped = 0
        text = prefix + self._decoder.decode(data, final=final)
        if not text:
            return
        # progress: the bytes of output so far (kept strictly increasing, as the spec asks)
        self._progress = max(float(self._seen), self._progress + 1)
        try:
            await self._ctx.report_progress(self._progress, None, text)
        except Exception:
            logger.debug("progress notification failed; streaming stops", exc_info=True)
            self._broken = True

    async def _loop(self) -> None:
        while not self._broken:
            await self._wake.wait()
            self._wake.clear()
            await self._flush()
            if self._closing.is_set():
                return
            with suppress(TimeoutError):
                await asyncio.wait_for(self._closing.wait(), COALESCE_S)

    async def close(self, *, flush: bool) -> None:
        """Stop; with ``flush``, send what is still pending first (before the result)."""
        self._closing.set()
        self._wake.set()
        if flush:
            await self._task
            if not self._broken:
                await self._flush(final=True)
        else:
            self._task.cancel()
            with suppress(asyncio.CancelledError):
                await self._task
