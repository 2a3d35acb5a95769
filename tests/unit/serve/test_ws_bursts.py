"""``BurstWebSocketProtocol``: a real uvicorn server with it, a real WebSocket client.

The server's socket writes are counted by a transport that passes everything on.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest
import uvicorn
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from crow.serve.ws_bursts import FLUSH_AT_BYTES, BurstWebSocketProtocol


class CountingTransport:
    """The server's transport, with its writes counted."""

    def __init__(self, transport: Any, writes: list[int]) -> None:
        self._transport = transport
        self._writes = writes

    def write(self, data: bytes) -> None:
        self._writes.append(len(data))
        self._transport.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


WRITES: list[int] = []


class CountedBursts(BurstWebSocketProtocol):
    def connection_made(self, transport: Any) -> None:
        super().connection_made(CountingTransport(transport, WRITES))


class CountedStock(WebSocketsSansIOProtocol):
    def connection_made(self, transport: Any) -> None:
        super().connection_made(CountingTransport(transport, WRITES))


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """On "N SIZE [close]": N text messages of SIZE characters, sent without a pause."""
    if scope["type"] == "lifespan":
        while True:
            kind = (await receive())["type"]
            await send({"type": f"{kind}.complete"})
            if kind == "lifespan.shutdown":
                return
    await receive()  # websocket.connect
    await send({"type": "websocket.accept"})
    while True:
        message = await receive()
        if message["type"] == "websocket.disconnect":
            return
        count, size, *close = message["text"].split()
        for n in range(int(count)):
            await send({"type": "websocket.send", "text": f"{n}:".ljust(int(size), "x")})
        if close:
            await send({"type": "websocket.close", "code": 4000, "reason": "done"})
            return


@contextlib.asynccontextmanager
async def serving(protocol: type) -> AsyncIterator[str]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, ws=protocol, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        await asyncio.sleep(0.01)
    try:
        yield f"ws://127.0.0.1:{port}/"
    finally:
        server.should_exit = True
        await task


async def burst(protocol: type, command: str) -> tuple[list[str], list[int]]:
    """Ask for a burst; what the client received, and the server's writes for it."""
    async with serving(protocol) as url, connect(url, max_size=None) as client:
        WRITES.clear()
        await client.send(command)
        received = []
        with contextlib.suppress(ConnectionClosed):
            while len(received) < int(command.split()[0]):
                received.append(str(await asyncio.wait_for(client.recv(), 10)))
        return received, list(WRITES)


async def test_a_burst_of_messages_goes_out_in_one_write_in_order():
    received, writes = await burst(CountedBursts, "20 50")
    assert [m.split(":")[0] for m in received] == [str(n) for n in range(20)]
    assert len(writes) == 1  # the stock protocol makes 20 (next test)


async def test_the_stock_protocol_writes_each_message_alone():
    received, writes = await burst(CountedStock, "20 50")
    assert len(received) == 20 and len(writes) == 20


async def test_a_close_after_a_burst_comes_after_its_messages():
    async with serving(CountedBursts) as url, connect(url) as client:
        await client.send("5 10 close")
        received = []
        with pytest.raises(ConnectionClosed):
            while True:
                received.append(str(await asyncio.wait_for(client.recv(), 10)))
        assert [m.split(":")[0] for m in received] == ["0", "1", "2", "3", "4"]
        assert (client.close_code, client.close_reason) == (4000, "done")


@pytest.mark.parametrize("size", [FLUSH_AT_BYTES // 4])
async def test_a_burst_past_the_flush_size_is_written_as_it_goes(size):
    received, writes = await burst(CountedBursts, f"12 {size}")
    assert [m.split(":")[0] for m in received] == [str(n) for n in range(12)]
    assert len(writes) == 3  # every 4 messages: FLUSH_AT_BYTES each
