"""uvicorn's WebSocket protocol, writing a burst of messages in one socket write.

A turn sends its updates in bursts: the deltas of one read of the model's
reply, then the whole reply with its usage, then ``idle``.  uvicorn's
sans-I/O protocol (``websockets-sansio``) makes one ``transport.write`` per
message: a send system call and, on loopback, a wakeup of the reader each time,
about 20 per prompt under load.  ``BurstWebSocketProtocol`` frames each message
at once but writes the frames an app sent in one pass of the event loop
together: about 8 writes per prompt, and 2% less of ``crow serve``'s CPU
(``bench/paired_cpu.py``).

Nothing else changes.  Frames keep their order: the websockets connection
queues them, and uvicorn's own writes (close, ping, pong) take what is queued
first.  Backpressure still holds: a send waits while the transport is paused,
and a burst past ``FLUSH_AT_BYTES`` is written at once, so a reader that stops
reading pauses the sender as soon as before, give or take one burst.

It is given to uvicorn as its ``ws`` protocol class (``crow.serve.http``); it lives in
``crow.serve``, not ``crow.acp``, which stays free of uvicorn's internals.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.utils import ClientDisconnected
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.exceptions import InvalidState

__all__ = ["FLUSH_AT_BYTES", "BurstWebSocketProtocol"]

#: Frames waiting for the end of the loop pass past this are written at once.
FLUSH_AT_BYTES = 64 * 1024


class BurstWebSocketProtocol(WebSocketsSansIOProtocol):
    """``websockets-sansio`` with the data frames of one loop pass in one write."""

    _flush_handle: asyncio.Handle | None = None
    _unflushed = 0

    async def send(self, message: Any) -> None:
        if message["type"] != "websocket.send" or not self._open_for_data():
            self._flush()  # what was sent before goes first
            await super().send(message)
            return
        await self.writable.wait()
        if self.disconnected:
            raise ClientDisconnected
        text, data = message.get("text"), message.get("bytes")
        try:
            if data is not None:
                self.conn.send_binary(data)
            elif text is not None:
                data = text.encode()
                self.conn.send_text(data)
        except InvalidState:
            raise ClientDisconnected from None
        self._unflushed += len(data or b"")
        if self._unflushed >= FLUSH_AT_BYTES:
            self._flush()
        elif self._flush_handle is None:
            self._flush_handle = self.loop.call_soon(self._flush)

    def _open_for_data(self) -> bool:
        """Accepted, not closing, and not answered with a plain HTTP response."""
        return self.handshake_complete and not self.close_sent and self.initial_response is None

    def _flush(self) -> None:
        """Write every frame queued so far, in one write."""
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        self._unflushed = 0
        output = self.conn.data_to_send()
        if output and not self.transport.is_closing():
            self.transport.write(b"".join(output))

    def connection_lost(self, exc: Exception | None) -> None:
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        super().connection_lost(exc)
