"""The ACP HTTP client reads its SSE streams as SSE (ACP-V2.md §11): an event whose
data spans several ``data:`` lines is one message, CRLF ends lines as LF does, and
comments and other fields are no messages.

The server is a raw asyncio socket server writing the bytes itself, so the test
controls the framing exactly."""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import AsyncIterator

import pytest
import trustme

from crow.acp.transports.http_client import HttpClientTransport, connect_url

INITIALIZED = json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"protocolVersion": 2}}).encode()
UPDATE = {
    "jsonrpc": "2.0",
    "method": "session/update",
    "params": {"sessionId": "s1", "update": {"sessionUpdate": "agent_message_chunk"}},
}
LISTED = {"jsonrpc": "2.0", "id": 2, "result": {"sessions": []}}


def multi_line(message: dict[str, object], newline: bytes) -> bytes:
    """The message pretty-printed, one ``data:`` line per line of it."""
    lines = json.dumps(message, indent=2).encode().split(b"\n")
    return b"".join(b"data: " + line + newline for line in lines) + newline


STREAM = (
    b": a comment first\n\n"
    + b"event: message\nid: 7\n"
    + multi_line(UPDATE, b"\n")
    + b"retry: 1000\n"
    + multi_line(LISTED, b"\r\n")
)


async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        (
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length")
        ),
        0,
    )
    await reader.readexactly(length)
    if head.startswith(b"POST"):
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nAcp-Connection-Id: c1\r\n"
            + b"Connection: close\r\n"  # one request per connection here
            + b"Content-Length: "
            + str(len(INITIALIZED)).encode()
            + b"\r\n\r\n"
            + INITIALIZED
        )
    elif head.startswith(b"GET"):
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
        )
        for i in range(0, len(STREAM), 5):  # in small pieces: lines cut anywhere
            writer.write(STREAM[i : i + 5])
            await writer.drain()
    else:
        writer.write(b"HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n")
    await writer.drain()
    writer.close()


@pytest.fixture
async def url() -> AsyncIterator[str]:
    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        yield f"http://127.0.0.1:{port}/acp"


@pytest.fixture
def authority() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
async def https_url(authority: trustme.CA) -> AsyncIterator[str]:
    served = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    authority.issue_cert("localhost").configure_cert(served)
    server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=served)
    port = server.sockets[0].getsockname()[1]
    async with server:
        yield f"https://localhost:{port}/acp"


async def test_an_https_endpoint_is_verified_with_the_context_given(
    https_url: str, authority: trustme.CA
) -> None:
    """``tls``: what the caller trusts (crow.tls for the line client), not a library's
    own default, which knows nothing of this CA."""
    trusting = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    authority.configure_trust(trusting)
    initialize = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize"}).encode()
    transport = await connect_url(https_url, tls=trusting)
    try:
        await transport.write_frames([initialize])
        async with asyncio.timeout(10):
            assert json.loads(await transport.read_frame() or b"") == json.loads(INITIALIZED)
            assert json.loads(await transport.read_frame() or b"") == UPDATE
    finally:
        await transport.aclose()
    untrusting = await connect_url(https_url)
    try:
        with pytest.raises(ConnectionError, match="CERTIFICATE_VERIFY_FAILED"):
            await untrusting.write_frames([initialize])
    finally:
        await untrusting.aclose()


async def test_a_multi_line_event_is_one_message(url: str) -> None:
    transport = HttpClientTransport(url, {})
    try:
        initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
        await transport.write_frames([json.dumps(initialize).encode()])
        async with asyncio.timeout(10):
            assert json.loads(await transport.read_frame() or b"") == json.loads(INITIALIZED)
            assert json.loads(await transport.read_frame() or b"") == UPDATE
            assert json.loads(await transport.read_frame() or b"") == LISTED
            assert await transport.read_frame() is None  # the server ended the stream
    finally:
        await transport.aclose()
