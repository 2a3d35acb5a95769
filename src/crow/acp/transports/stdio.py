"""Newline-delimited JSON over a pair of byte streams (ACP-V2.md §2).

One message per line.  A line longer than ``MAX_MESSAGE_BYTES`` is discarded up
to its newline and reported as ``MessageTooLarge`` (carrying the line's first
bytes, so the peer can still answer with the request's id); the stream stays
usable.  A partial last line at EOF is dropped.

``StdioTransport`` wraps asyncio streams: the agent's own stdin/stdout
(``open_stdio``) or a child process's pipes (``spawn``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import stat
import sys
from collections.abc import Sequence
from typing import Any

from ..errors import MessageTooLarge

__all__ = ["MAX_MESSAGE_BYTES", "StdioTransport", "open_stdio", "spawn"]

#: The largest message accepted: prompts carry base64 images and embedded files,
#: so the limit sits well above any sane message (the TS SDK has none at all).
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
#: How much of an oversized line is kept to find its id.
_PREFIX_BYTES = 256
_READ_CHUNK = 256 * 1024
#: How long a child gets to exit after its stdin closes before it is killed.
CHILD_EXIT_WAIT_S = 2.0


class StdioTransport:
    """Frames are lines: ``read_frame`` splits, ``write_frames`` joins."""

    def __init__(
        self,
        reader: asyncio.StreamReader | Any,
        writer: asyncio.StreamWriter | Any,
        *,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
        process: asyncio.subprocess.Process | None = None,
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._max = max_message_bytes
        self._buffer = bytearray()
        self._lines: list[bytes | _Oversized] = []
        self._discarding: bytes | None = None  # prefix of an oversized line being skipped
        self._eof = False
        self.process = process

    async def read_frame(self) -> bytes | None:
        while not self._lines:
            if self._eof:
                return None
            chunk = await self._reader.read(_READ_CHUNK)
            if not chunk:
                self._eof = True  # a partial last line is dropped (§2)
                continue
            self._feed(chunk)
        line = self._lines.pop(0)
        if isinstance(line, _Oversized):
            raise line.error()
        return line

    def _feed(self, chunk: bytes) -> None:
        start = 0
        while (at := chunk.find(b"\n", start)) >= 0:
            piece = chunk[start:at]
            start = at + 1
            if self._discarding is not None:
                self._lines.append(_Oversized(self._discarding))
                self._discarding = None
            elif len(self._buffer) + len(piece) > self._max:
                self._lines.append(
                    _Oversized(bytes(self._buffer[:_PREFIX_BYTES]) or piece[:_PREFIX_BYTES])
                )
                self._buffer.clear()
            else:
                line = bytes(self._buffer + piece) if self._buffer else piece
                self._buffer.clear()
                if line.strip():
                    self._lines.append(line)
        if self._discarding is None:
            self._buffer += chunk[start:]
            if len(self._buffer) > self._max:  # no newline yet: drop the line as it comes
                self._discarding = bytes(self._buffer[:_PREFIX_BYTES])
                self._buffer.clear()

    async def write_frames(self, frames: Sequence[bytes]) -> None:
        self._writer.write(b"\n".join(frames) + b"\n")
        await self._writer.drain()

    async def aclose(self) -> None:
        with contextlib.suppress(Exception):
            if not self._writer.is_closing():
                self._writer.close()
        if self.process is not None:
            await _reap(self.process)


class _Oversized:
    """Stands in the line queue where an oversized line was dropped."""

    def __init__(self, prefix: bytes) -> None:
        self.prefix = prefix

    def error(self) -> MessageTooLarge:
        exc = MessageTooLarge()
        exc.prefix = self.prefix  # type: ignore[attr-defined]
        return exc


async def _reap(process: asyncio.subprocess.Process) -> None:
    """Give the child a moment to exit on its own after EOF, then kill it."""
    try:
        await asyncio.wait_for(process.wait(), CHILD_EXIT_WAIT_S)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()


async def open_stdio(*, max_message_bytes: int = MAX_MESSAGE_BYTES) -> StdioTransport:
    """This process's stdin/stdout as a transport (the agent side).

    Pipes and sockets go through the event loop; a regular file or /dev/null
    (which epoll refuses) is read and written from a worker thread instead.
    """
    loop = asyncio.get_running_loop()
    stdin, stdout = sys.stdin.fileno(), sys.stdout.fileno()
    reader: Any = _ThreadReader(stdin)
    writer: Any = _ThreadWriter(stdout)
    if _pollable(stdin):
        reader = asyncio.StreamReader(limit=_READ_CHUNK * 2)
        await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(stdin, "rb", 0, closefd=False)
        )
    if _pollable(stdout):
        w_transport, w_protocol = await loop.connect_write_pipe(
            asyncio.streams.FlowControlMixin, os.fdopen(stdout, "wb", 0, closefd=False)
        )
        writer = asyncio.StreamWriter(w_transport, w_protocol, None, loop)
    return StdioTransport(reader, writer, max_message_bytes=max_message_bytes)


def _pollable(fd: int) -> bool:
    """Pipes, sockets and terminals work with epoll; files and /dev/null do not."""
    mode = os.fstat(fd).st_mode
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or os.isatty(fd)


class _ThreadReader:
    """``StreamReader.read`` for a descriptor the event loop cannot watch."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    async def read(self, n: int) -> bytes:
        return await asyncio.to_thread(os.read, self.fd, n)


class _ThreadWriter:
    """The ``StreamWriter`` calls the transport makes, for a plain file descriptor."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.closed = False

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view) :]

    async def drain(self) -> None:
        return None

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True


async def spawn(
    command: str | Sequence[str],
    *,
    cwd: str | None = None,
    env: dict[str, str] | None = None,
    max_message_bytes: int = MAX_MESSAGE_BYTES,
) -> StdioTransport:
    """Start an agent subprocess; its stderr goes to ours.

    The agent runs in a session of its own: Ctrl-C at a terminal signals the whole
    foreground process group, and the client, not the agent, decides what it means
    (``crow run`` cancels the turn).  The agent still ends with the client: its stdin
    closes when the client exits, however it exits.

    Raises ConnectionError (with a one-line reason) when it cannot be started.
    """
    argv = shlex.split(command) if isinstance(command, str) else list(command)
    if not argv:
        raise ConnectionError("no agent command given")
    try:
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            cwd=cwd,
            env=env,
            limit=_READ_CHUNK * 2,
            start_new_session=True,
        )
    except OSError as exc:
        raise ConnectionError(f"cannot start the agent {argv[0]!r}: {exc.strerror}") from exc
    assert process.stdout is not None and process.stdin is not None
    return StdioTransport(
        process.stdout, process.stdin, max_message_bytes=max_message_bytes, process=process
    )
