"""A small HTTP load balancer in front of several ``crow serve --http``: sticky by
``Acp-Connection-Id``.

    python bench/sticky_proxy.py http://127.0.0.1:8001 http://127.0.0.1:8002 [--port 0]

Prints ``sticky proxy at http://127.0.0.1:PORT`` on stderr once it listens.  A
``POST`` without ``Acp-Connection-Id`` (an ``initialize``) goes to the next server
in turn, and the id that server answers with is remembered: every later request
naming it (its ``POST``s, its SSE ``GET``s, its ``DELETE``) goes to the same server,
whose memory alone holds that connection.  A WebSocket (``Upgrade``) goes to the
next server in turn and stays there: it is one connection.  A request naming an
id the proxy never saw goes to the next server, which answers 404 as it should.
A server that is down gets 502 for its connections' requests: their client opens
a new connection (through the proxy, to a live server) and resumes its sessions
with its ``_crow/after`` cursor.  Requests with a body must carry Content-Length
(Crow's clients and the TS SDK's do).

Bench code, stdlib asyncio, one process: what a well-kept proxy (HAProxy, nginx
with a ``map`` on the header) does in front of Crow, kept here so the cluster
bench can measure the layout with no other install.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import sys
from urllib.parse import urlsplit

Address = tuple[str, int]
HEAD_LIMIT = 64 * 1024


class Proxy:
    def __init__(self, backends: list[Address]) -> None:
        self.backends = backends
        self.turn = itertools.cycle(backends)
        self.owner: dict[str, Address] = {}  # Acp-Connection-Id -> its server

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One client TCP connection: its requests one after another (keep-alive)."""
        upstreams: dict[Address, tuple[asyncio.StreamReader, asyncio.StreamWriter]] = {}
        try:
            while True:
                head = await _head(reader)
                if head is None:
                    return
                lines = head.decode("latin-1").split("\r\n")
                method = lines[0].split(" ", 1)[0]
                headers = _headers(lines[1:])
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                named = headers.get("acp-connection-id")
                backend = self.owner.get(named) if named else None
                backend = backend or next(self.turn)
                if "upgrade" in headers:
                    await self._tunnel(backend, head + body, reader, writer)
                    return
                try:
                    if backend not in upstreams:
                        upstreams[backend] = await asyncio.open_connection(*backend)
                    up_reader, up_writer = upstreams[backend]
                    up_writer.write(head + body)
                    await up_writer.drain()
                    answered = await self._relay(up_reader, writer)
                except (OSError, asyncio.IncompleteReadError):
                    upstreams.pop(backend, None)
                    writer.write(_BAD_GATEWAY)
                    await writer.drain()
                    continue
                if answered is None:  # the server closed after a response without length
                    return
                if named is None and answered:
                    self.owner[answered] = backend
                if method == "DELETE" and named:
                    self.owner.pop(named, None)
        except (OSError, asyncio.IncompleteReadError):
            return
        finally:
            for _, up_writer in upstreams.values():
                up_writer.close()
            writer.close()

    async def _relay(self, up: asyncio.StreamReader, writer: asyncio.StreamWriter) -> str | None:
        """Copy one response to the client; the Acp-Connection-Id it names ("" for
        none), or None when its end is the connection's."""
        head = await _head(up)
        if head is None:
            raise asyncio.IncompleteReadError(b"", None)
        writer.write(head)
        headers = _headers(head.decode("latin-1").split("\r\n")[1:])
        if "content-length" in headers:
            writer.write(await up.readexactly(int(headers["content-length"])))
        elif headers.get("transfer-encoding", "").lower() == "chunked":
            while True:  # an SSE stream is chunks until the server ends it
                size_line = await up.readuntil(b"\r\n")
                size = int(size_line.split(b";", 1)[0], 16)
                chunk = await up.readexactly(size + 2)
                writer.write(size_line + chunk)
                await writer.drain()  # written as it comes: events stay live
                if size == 0:
                    break
        else:
            while data := await up.read(65536):
                writer.write(data)
            await writer.drain()
            return None
        await writer.drain()
        return headers.get("acp-connection-id", "")

    async def _tunnel(
        self,
        backend: Address,
        first: bytes,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        """A WebSocket: bytes both ways until either side ends."""
        up_reader, up_writer = await asyncio.open_connection(*backend)
        up_writer.write(first)

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))


_BAD_GATEWAY = b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n"


async def _head(reader: asyncio.StreamReader) -> bytes | None:
    try:
        return await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if exc.partial:
            raise
        return None
    except asyncio.LimitOverrunError:
        raise asyncio.IncompleteReadError(b"", None) from None


def _headers(lines: list[str]) -> dict[str, str]:
    headers = {}
    for line in lines:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    return headers


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("backends", nargs="+", help="http://host:port of each crow serve")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    backends = []
    for url in args.backends:
        parts = urlsplit(url)
        backends.append((parts.hostname or "127.0.0.1", parts.port or 80))
    proxy = Proxy(backends)
    server = await asyncio.start_server(proxy.serve, "127.0.0.1", args.port, limit=HEAD_LIMIT)
    port = server.sockets[0].getsockname()[1]
    print(f"sticky proxy at http://127.0.0.1:{port}", file=sys.stderr, flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())
