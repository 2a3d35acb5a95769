"""A lean load generator for ACP over streamable HTTP + SSE or WebSocket.

    python bench/http_load.py URL [--clients 100] [--prompts 10] [--warmup 1]
                              [--rate PROMPTS_PER_S]

Each client opens its own connection and session, then sends its prompts one
after another and times each from the prompt's POST (or frame) to the idle
``state_update`` that ends its turn.  That is a closed loop: it finds the
server's throughput, and the latency then is mostly queueing (clients / rate).
``--rate`` makes it open: all clients together offer that many prompts per
second, each client on its own schedule, and each prompt is timed from when it
was due, so a server that falls behind is charged for the wait.

It measures servers, not clients: raw asyncio sockets for HTTP (keep-alive
POSTs, chunked SSE, no JSON parsing of updates: a byte search for
``"state":"running"`` then ``"state":"idle"``), the ``websockets`` client
without compression for WebSocket.  Prints one JSON line:
prompts, seconds, prompts_per_s, updates_per_s, p50_ms, p99_ms, max_ms.
Run it in its own process, away from the server it measures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import time
from typing import Any
from urllib.parse import urlsplit

RUNNING = b'"state":"running"'
IDLE = b'"state":"idle"'


def rpc(rid: int, method: str, params: dict[str, Any]) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params}).encode()


def prompt_params(session_id: str) -> dict[str, Any]:
    return {"sessionId": session_id, "prompt": [{"type": "text", "text": "benchmark"}]}


INIT = rpc(1, "initialize", {"protocolVersion": 2, "info": {"name": "load", "version": "0"}})


class Http:
    """One keep-alive HTTP/1.1 connection: requests one at a time, or one SSE stream."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, authority: str
    ) -> None:
        self.reader, self.writer, self.authority = reader, writer, authority

    @classmethod
    async def open(cls, host: str, port: int) -> Http:
        # The Host header names the server as the URL did: crow serve checks it.
        return cls(*await asyncio.open_connection(host, port), f"{host}:{port}")

    def send(self, method: str, path: str, headers: dict[str, str], body: bytes = b"") -> None:
        lines = [f"{method} {path} HTTP/1.1", f"Host: {self.authority}"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        if body or method == "POST":
            lines.append(f"Content-Length: {len(body)}")
        self.writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + body)

    async def head(self) -> tuple[int, dict[str, str]]:
        raw = await self.reader.readuntil(b"\r\n\r\n")
        status_line, *header_lines = raw.decode("latin-1").split("\r\n")
        headers = {}
        for line in header_lines:
            if ":" in line:
                name, value = line.split(":", 1)
                headers[name.strip().lower()] = value.strip()
        return int(status_line.split()[1]), headers

    async def request(
        self, method: str, path: str, headers: dict[str, str], body: bytes = b""
    ) -> tuple[int, dict[str, str], bytes]:
        self.send(method, path, headers, body)
        status, response_headers = await self.head()
        if "content-length" in response_headers:
            content = await self.reader.readexactly(int(response_headers["content-length"]))
        elif response_headers.get("transfer-encoding") == "chunked":
            content = b"".join([chunk async for chunk in self.chunks()])
        else:
            content = b""
        return status, response_headers, content

    async def chunks(self) -> Any:
        while True:
            size = int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                await self.reader.readuntil(b"\r\n")
                return
            yield (await self.reader.readexactly(size + 2))[:-2]

    def close(self) -> None:
        self.writer.close()


class SseStream:
    """The events of one SSE response, as the raw bytes of their data lines."""

    def __init__(self, http: Http) -> None:
        self.http = http
        self.buffer = b""
        self.source = http.chunks()

    async def next_event(self) -> bytes:
        while b"\n\n" not in self.buffer:
            self.buffer += await self.source.__anext__()
        event, self.buffer = self.buffer.split(b"\n\n", 1)
        return event


class HttpClient:
    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.host, self.port, self.path = parts.hostname or "", parts.port or 80, parts.path
        if parts.query:  # crow serve's printed URL carries ?token=
            self.path += f"?{parts.query}"
        self.updates = 0

    async def start(self) -> None:
        self.posts = await Http.open(self.host, self.port)
        status, headers, _ = await self.posts.request(
            "POST", self.path, {"Content-Type": "application/json"}, INIT
        )
        assert status == 200, status
        self.connection = headers["acp-connection-id"]
        own = await self.stream(None)
        await self.post(rpc(2, "session/new", {"cwd": "/tmp", "mcpServers": []}))
        while True:
            event = await own.next_event()
            if event.startswith(b"data:") and b'"id":2' in event:
                self.session = json.loads(event[5:])["result"]["sessionId"]
                break
        self.events = await self.stream(self.session)
        self.next_id = 3

    async def stream(self, session: str | None) -> SseStream:
        http = await Http.open(self.host, self.port)
        headers = {"Accept": "text/event-stream", "Acp-Connection-Id": self.connection}
        if session is not None:
            headers["Acp-Session-Id"] = session
        http.send("GET", self.path, headers)
        status, _ = await http.head()
        assert status == 200, status
        return SseStream(http)

    async def post(self, body: bytes, session: str | None = None) -> None:
        headers = {"Content-Type": "application/json", "Acp-Connection-Id": self.connection}
        if session is not None:
            headers["Acp-Session-Id"] = session
        try:
            status, _, _ = await self.posts.request("POST", self.path, headers, body)
        except (asyncio.IncompleteReadError, ConnectionError):
            # The server closed the idle keep-alive connection (uvicorn: after 5 s).
            self.posts.close()
            self.posts = await Http.open(self.host, self.port)
            status, _, _ = await self.posts.request("POST", self.path, headers, body)
        assert status == 202, status

    async def finish(self) -> None:
        """End the connection (DELETE), as a client that is done does."""
        headers = {"Acp-Connection-Id": self.connection}
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            await self.posts.request("DELETE", self.path, headers)  # unless already closed
        for http in (self.posts, self.events.http):
            http.close()

    async def turn(self) -> None:
        self.next_id += 1
        await self.post(
            rpc(self.next_id, "session/prompt", prompt_params(self.session)), self.session
        )
        running = False
        while True:
            event = await self.events.next_event()
            self.updates += 1
            if not running:
                running = RUNNING in event
            elif IDLE in event:
                return


class WsClient:
    def __init__(self, url: str) -> None:
        self.url = url
        self.updates = 0

    async def start(self) -> None:
        from websockets.asyncio.client import connect

        self.socket = await connect(self.url, compression=None, max_size=None, open_timeout=120)
        await self.socket.send(INIT.decode())
        await self.socket.recv()
        await self.socket.send(rpc(2, "session/new", {"cwd": "/tmp", "mcpServers": []}).decode())
        while True:
            message = await self.socket.recv()
            if '"id":2' in message and '"result"' in message:
                self.session = json.loads(message)["result"]["sessionId"]
                break
        self.next_id = 3

    async def finish(self) -> None:
        await self.socket.close()

    async def turn(self) -> None:
        self.next_id += 1
        await self.socket.send(
            rpc(self.next_id, "session/prompt", prompt_params(self.session)).decode()
        )
        running = False
        while True:
            message = await self.socket.recv(decode=False)
            self.updates += 1
            if not running:
                running = RUNNING in message
            elif IDLE in message:
                return


async def ready_client(url: str, warmup: int) -> Any:
    client: Any = WsClient(url) if url.startswith("ws") else HttpClient(url)
    await client.start()
    for _ in range(warmup):
        await client.turn()
    client.updates = 0
    return client


async def timed_turns(
    client: Any, prompts: int, latencies: list[float], interval: float = 0.0, phase: float = 0.0
) -> None:
    """Closed loop (``interval`` 0): back to back.  Open: one prompt every
    ``interval`` seconds from ``phase``, each timed from when it was due."""
    due = time.perf_counter() + phase
    for _ in range(prompts):
        if interval:
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
        started = due if interval else time.perf_counter()
        await client.turn()
        latencies.append(time.perf_counter() - started)
        due += interval


async def load(
    url: str, clients: int, prompts: int, warmup: int, rate: float = 0.0
) -> dict[str, float]:
    """Connect every client (and warm up) first, then time the prompts alone."""
    ready = await asyncio.gather(*(ready_client(url, warmup) for _ in range(clients)))
    latencies: list[float] = []
    interval = clients / rate if rate else 0.0
    started = time.perf_counter()
    await asyncio.gather(
        *(
            timed_turns(client, prompts, latencies, interval, interval * n / clients)
            for n, client in enumerate(ready)
        )
    )
    elapsed = time.perf_counter() - started
    await asyncio.gather(*(client.finish() for client in ready))
    latencies.sort()
    return {
        "prompts": len(latencies),
        "seconds": round(elapsed, 3),
        "prompts_per_s": round(len(latencies) / elapsed, 1),
        "updates_per_s": round(sum(c.updates for c in ready) / elapsed, 1),
        "p50_ms": round(statistics.median(latencies) * 1000, 2),
        "p99_ms": round(latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000, 2),
        "max_ms": round(latencies[-1] * 1000, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--prompts", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=1, help="untimed prompts per client first")
    parser.add_argument(
        "--rate", type=float, default=0.0, help="prompts/s offered by all clients (0: closed loop)"
    )
    args = parser.parse_args()
    result = asyncio.run(load(args.url, args.clients, args.prompts, args.warmup, args.rate))
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
