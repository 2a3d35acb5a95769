"""One link of the conductor (crow.orchestra.conductor): its connection to the client, a
proxy or the agent, the trace of what passes on it, and the reading of a component's
stderr in lines of bounded length."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import AsyncIterator
from typing import IO, Any

import orjson

from crow.acp.connection import Connection, Event, RequestId
from crow.acp.errors import MessageTooLarge
from crow.acp.jsonrpc import Transport
from crow.acp.router import MessageTransport

__all__ = ["STDERR_LINE_BYTES", "STDERR_TAIL", "Link", "Trace", "capped_lines"]

#: Lines of a component's stderr kept for the error that reports its exit.
STDERR_TAIL = 20
#: The longest stderr line passed on whole; a longer one is cut, and says so.  A
#: component's line of any length must not stop the reading (a full pipe would then
#: block the component for good).
STDERR_LINE_BYTES = 8 * 1024


class Trace:
    """``--trace FILE``: every message on every link, one JSON line each."""

    def __init__(self, file: IO[bytes]) -> None:
        self.file = file

    def record(self, link: str, direction: str, message: Any) -> None:
        entry = {"t": round(time.time(), 6), "link": link, "dir": direction, "message": message}
        with contextlib.suppress(TypeError, ValueError, OSError):
            self.file.write(orjson.dumps(entry, default=str) + b"\n")
            self.file.flush()


class Link:
    """One of the conductor's connections: to the client, a proxy or the agent."""

    def __init__(self, name: str, transport: Transport, trace: Trace | None) -> None:
        self.name = name
        self.transport = transport
        self.connection = Connection(id_prefix=f"{name}/")
        self.out = MessageTransport(transport)  # ordered writes of whole messages
        self.trace = trace
        self.process: asyncio.subprocess.Process | None = getattr(transport, "process", None)
        self.stderr_tail: deque[str] = deque(maxlen=STDERR_TAIL)
        self.command = ""
        self.stopping = False  # we are closing it: its end is no failure

    def send(self, message: dict[str, Any]) -> None:
        if self.trace is not None:
            self.trace.record(self.name, "out", message)
        self.out.send_nowait(message)

    def answer(
        self, rid: RequestId, *, result: Any = None, error: dict[str, Any] | None = None
    ) -> None:
        """Reply to the request ``rid`` this link sent us, once (later replies are dropped)."""
        if not self.connection.owes_reply(rid):
            return
        if error is not None:
            self.send(self.connection.relay_error(rid, error))
        else:
            self.send(self.connection.result(rid, result))

    async def read_events(self) -> list[Event] | None:
        """The events of the next frame; None at the end of input."""
        try:
            frame = await self.transport.read_frame()
        except MessageTooLarge as exc:
            return self.connection.receive_oversized(getattr(exc, "prefix", b""))
        if frame is None:
            return None
        if self.trace is not None:
            try:
                self.trace.record(self.name, "in", orjson.loads(frame))
            except orjson.JSONDecodeError:
                self.trace.record(self.name, "in", frame.decode("utf-8", "replace"))
        return self.connection.receive(frame)


async def capped_lines(stream: asyncio.StreamReader, cap: int) -> AsyncIterator[str]:
    """The lines of ``stream``, each cut to ``cap`` bytes (with a note of what was cut);
    read in chunks, so a line of any length is read through, never held whole."""
    line, dropped = bytearray(), 0
    while chunk := await stream.read(64 * 1024):
        *ends, rest = chunk.split(b"\n")
        for end in ends:
            yield _line_text(line, end, dropped, cap)
            line, dropped = bytearray(), 0
        room = cap - len(line)
        line += rest[: max(room, 0)]
        dropped += max(len(rest) - room, 0)
    if line or dropped:
        yield _line_text(line, b"", dropped, cap)


def _line_text(line: bytearray, end: bytes, dropped: int, cap: int) -> str:
    room = cap - len(line)
    whole = bytes(line) + end[: max(room, 0)]
    dropped += max(len(end) - room, 0)
    text = whole.decode("utf-8", "replace").rstrip()
    return f"{text} … ({dropped} more bytes cut)" if dropped else text
