"""An in-process transport pair: two peers in one event loop, no bytes on a wire.

Frames still pass as bytes, so everything above the transport (parsing, ids,
errors) runs exactly as over stdio.  Used by tests, and by in-process clients.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

__all__ = ["MemoryTransport", "memory_pair"]


class MemoryTransport:
    def __init__(self, inbox: asyncio.Queue[bytes | None], outbox: asyncio.Queue[bytes | None]):
        self._inbox = inbox
        self._outbox = outbox
        self._closed = False

    async def read_frame(self) -> bytes | None:
        if self._closed:
            return None
        frame = await self._inbox.get()
        if frame is None:
            self._closed = True
        return frame

    async def write_frames(self, frames: Sequence[bytes]) -> None:
        if self._closed:
            raise ConnectionError("the memory transport is closed")
        for frame in frames:
            self._outbox.put_nowait(frame)

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            self._outbox.put_nowait(None)  # the other side reads EOF
            self._inbox.put_nowait(None)  # and so does our own reader


def memory_pair() -> tuple[MemoryTransport, MemoryTransport]:
    """Two connected transports: what one writes, the other reads."""
    a_to_b: asyncio.Queue[bytes | None] = asyncio.Queue()
    b_to_a: asyncio.Queue[bytes | None] = asyncio.Queue()
    return MemoryTransport(b_to_a, a_to_b), MemoryTransport(a_to_b, b_to_a)
