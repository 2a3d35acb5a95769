"""Many live sessions on one ``crow serve --http``, and a store with many stored ones.

    python bench/scale_bench.py [--parts live,list,replay] [--connections 16]
                                [--sessions 64] [--stored 100000] [--updates 100000]

- ``live``: ``crow serve --http`` (the default built-in tool servers, against the
  zero-latency model of ``bench/zero_model.py``); ``--connections`` WebSocket
  connections each open ``--sessions`` sessions with ``session/new``, all the
  connections at once, each one request after another (after one session opened and
  closed: the server's first use imports more).  Printed: ``session/new``
  p50/p99/max, and the server's memory (VmRSS from /proc, once it has settled) per
  session beyond the first round of ``--connections`` sessions.  ``--turns``: then
  one prompt in each session, and the memory after (``--wait-s S``: and S s later,
  e.g. past ``[server] unload_idle_s`` given with ``--extra``).
- ``list``: a store filled directly (the store API, one transaction) with
  ``--stored`` sessions in 100 cwds (and 10 in one more); over one WebSocket,
  ``session/list`` of the first page, of pages further on (by ``nextCursor``), with a
  ``cwd`` filter (a common cwd, the rare one):
  p50/p99 of each; then ``crow sessions`` (the store, no agent) wall time.
- ``replay``: one stored session of ``--updates`` logged updates, resumed with
  ``replayFrom`` start: time to the first replayed update, to the last, and the
  server's VmHWM (peak memory) before and after.

Run it on main's code and on a branch alternately (PYTHONPATH) to compare: a shared
machine's speed drifts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "testing"))
if not os.environ.get("PYTHONPATH"):  # else the store is filled by the code measured
    sys.path.insert(0, str(ROOT / "src"))

from crow_testing.serve_support import write_config  # noqa: E402
from http_bench import start, start_model, stop  # noqa: E402

INIT = {"protocolVersion": 2, "info": {"name": "scale", "version": "0"}}


def status(pid: int, field: str) -> float:
    """A VmRSS/VmHWM figure of ``pid``, in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return float(line.split()[1])
    return float("nan")


async def settled_rss(pid: int, quiet_s: float = 1.0) -> float:
    """VmRSS once it has stopped growing for ``quiet_s`` (tool servers start late)."""
    last, since = status(pid, "VmRSS"), time.monotonic()
    while time.monotonic() - since < quiet_s:
        await asyncio.sleep(0.2)
        now = status(pid, "VmRSS")
        if abs(now - last) > 64:
            last, since = now, time.monotonic()
    return last


class Ws:
    """One WebSocket connection: requests by id, notifications counted or awaited."""

    def __init__(self, url: str) -> None:
        self.url, self.next_id = url, 0
        self.waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.on_update: Any = None

    async def open(self) -> Ws:
        from websockets.asyncio.client import connect

        self.socket = await connect(self.url, compression=None, max_size=None, open_timeout=120)
        self.reader = asyncio.create_task(self.read())
        await self.call("initialize", INIT)
        return self

    async def read(self) -> None:
        while True:
            try:
                raw = await self.socket.recv(decode=False)
            except Exception:  # closed
                break
            if self.on_update is not None and b'"session/update"' in raw[:200]:
                self.on_update(raw)
                continue
            message = json.loads(raw)
            future = self.waiting.pop(message.get("id"), None)
            if future is not None:
                future.set_result(message)
        for future in self.waiting.values():  # the server closed the connection
            future.set_exception(ConnectionError(f"closed: {self.socket.close_reason}"))

    async def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.next_id += 1
        future = self.waiting[self.next_id] = asyncio.get_running_loop().create_future()
        message = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}
        await self.socket.send(json.dumps(message))
        answer = await future
        if "error" in answer:
            raise RuntimeError(f"{method}: {answer['error']}")
        result: dict[str, Any] = answer["result"]
        return result

    async def close(self) -> None:
        await self.socket.close()
        self.reader.cancel()


def ms(values: list[float]) -> str:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return (
        f"p50 {statistics.median(ordered) * 1e3:6.2f} ms  p99 {p99 * 1e3:6.2f} ms  "
        f"max {ordered[-1] * 1e3:6.2f} ms"
    )


def crow_env(home: Path) -> dict[str, str]:
    """The environment of a crow command: this tree's code unless PYTHONPATH names another."""
    return {"PYTHONPATH": str(ROOT / "src"), **os.environ, "CROW_HOME": str(home)}


def serve(home: Path) -> tuple[subprocess.Popen[str], str]:
    env = crow_env(home)
    process, url = start([sys.executable, "-m", "crow", "serve", "--http", "127.0.0.1:0"], env)
    return process, url.replace("http://", "ws://", 1)


# ---- live: many sessions open at once -------------------------------------------------
async def one_turn_each(sockets: list[Ws], ids: dict[Ws, list[str]]) -> None:
    """A prompt in every session (each connection's one after another), to its idle."""

    async def turns(ws: Ws) -> None:
        idle: asyncio.Queue[None] = asyncio.Queue()
        ws.on_update = lambda raw: idle.put_nowait(None) if b'"state":"idle"' in raw else None
        for sid in ids[ws]:
            prompt = [{"type": "text", "text": "hello"}]
            await ws.call("session/prompt", {"sessionId": sid, "prompt": prompt})
            await idle.get()

    await asyncio.gather(*(turns(ws) for ws in sockets))


async def live(
    url: str, pid: int, connections: int, per: int, turns: bool = False, wait_s: float = 0
) -> None:
    sockets = [await Ws(url).open() for _ in range(connections)]
    warm = await sockets[0].call("session/new", {"cwd": "/tmp", "mcpServers": []})
    await sockets[0].call("session/close", {"sessionId": warm["sessionId"]})  # first-use imports
    before = await settled_rss(pid)
    times: list[float] = []

    ids: dict[Ws, list[str]] = {ws: [] for ws in sockets}

    async def one_round(ws: Ws) -> None:
        started = time.perf_counter()
        made = await ws.call("session/new", {"cwd": "/tmp", "mcpServers": []})
        times.append(time.perf_counter() - started)
        ids[ws].append(made["sessionId"])

    await asyncio.gather(*(one_round(ws) for ws in sockets))  # the first session of each
    first = await settled_rss(pid)

    async def rest(ws: Ws) -> None:
        for _ in range(per - 1):
            await one_round(ws)

    await asyncio.gather(*(rest(ws) for ws in sockets))
    after = await settled_rss(pid, quiet_s=2.0)
    total = connections * per
    print(f"live: {connections} WebSocket connections x {per} sessions = {total} sessions")
    print(f"  session/new        {ms(times)}")
    print(
        f"  server RSS: {before / 1024:.0f} MiB connected, {first / 1024:.0f} MiB with "
        f"{connections} sessions, {after / 1024:.0f} MiB with {total}"
    )
    per_session = (after - first) / (total - connections)
    print(f"  per session beyond the first {connections}: {per_session:.0f} KiB")
    if turns:
        await one_turn_each(sockets, ids)
        turned = await settled_rss(pid, quiet_s=2.0)
        grown = (turned - after) / total
        print(f"  after one turn in each: {turned / 1024:.0f} MiB, {grown:.0f} KiB more a session")
        if wait_s:
            await asyncio.sleep(wait_s)
            rested = await settled_rss(pid, quiet_s=2.0)
            print(f"  {wait_s:.0f} s later: {rested / 1024:.0f} MiB")
    for ws in sockets:
        await ws.close()


# ---- list: many stored sessions ------------------------------------------------------
def fill_sessions(home: Path, count: int) -> None:
    from crow.store.db import SqliteStore

    store = SqliteStore(home / "crow.db")
    try:
        with store._transaction():  # one commit (create_session is a transaction of its own)
            for n in range(count):
                stamp = f"2026-{1 + n // 2_700_000 % 12:02d}-01T{n // 3600 % 24:02d}:" + (
                    f"{n // 60 % 60:02d}:{n % 60:02d}.000Z"
                )
                cwd = "/work/rare" if n % 10_000 == 0 else f"/work/p{n % 100}"
                store._insert_session(session_id=f"sess_{n:016x}", cwd=cwd, now=stamp)
                store.update_session(f"sess_{n:016x}", title=f"topic {n}")
    finally:
        store.close()


async def listing(url: str, rounds: int) -> None:
    ws = await Ws(url).open()
    first: list[float] = []
    further: list[float] = []
    by_cwd: list[float] = []
    rare: list[float] = []
    cursor = None
    await ws.call("session/list", {})  # warm: the store's pages in the cache
    await ws.call("session/list", {"cwd": "/work/p7"})
    for _ in range(rounds):
        started = time.perf_counter()
        page = await ws.call("session/list", {})
        first.append(time.perf_counter() - started)
        params = {"cursor": cursor} if cursor else {}
        started = time.perf_counter()
        page = await ws.call("session/list", params)
        further.append(time.perf_counter() - started)
        cursor = page.get("nextCursor")
        started = time.perf_counter()
        await ws.call("session/list", {"cwd": "/work/p7"})
        by_cwd.append(time.perf_counter() - started)
        started = time.perf_counter()
        await ws.call("session/list", {"cwd": "/work/rare"})
        rare.append(time.perf_counter() - started)
    await ws.close()
    print(f"  session/list, first page         {ms(first)}")
    print(f"  session/list, page after page    {ms(further)}")
    print(f"  session/list, cwd of 1,000       {ms(by_cwd)}")
    print(f"  session/list, cwd of 10          {ms(rare)}")


def crow_sessions(home: Path, rounds: int) -> None:
    env = crow_env(home)
    argv = [sys.executable, "-m", "crow", "sessions"]
    subprocess.run(argv, env=env, capture_output=True, check=True)  # warm
    walls = []
    for _ in range(rounds):
        started = time.perf_counter()
        subprocess.run(argv, env=env, capture_output=True, check=True)
        walls.append(time.perf_counter() - started)
    print(f"  crow sessions: median {statistics.median(walls):.3f} s, max {max(walls):.3f} s")


# ---- replay: one long session ---------------------------------------------------------
def fill_updates(home: Path, count: int) -> str:
    from crow.store.db import SqliteStore

    store = SqliteStore(home / "crow.db")
    sid = "sess_" + "f" * 16
    body = json.dumps(
        {
            "sessionUpdate": "agent_message_chunk",
            "messageId": "msg_bench",
            "content": {"type": "text", "text": "word " * 20},
        }
    ).encode()
    try:
        store.create_session(session_id=sid, cwd="/tmp", now="2026-12-02T00:00:00.000Z")
        warm = "sess_" + "e" * 16  # resumed first: the server's first resume imports more
        store.create_session(session_id=warm, cwd="/tmp", now="2026-12-02T00:00:00.000Z")
        store.append_updates([(warm, body, None, None, None)] * 10)  # type: ignore[arg-type]
        for start_at in range(0, count, 10_000):
            batch = [(sid, body, None, None, None)] * min(10_000, count - start_at)
            store.append_updates(batch)  # type: ignore[arg-type]
    finally:
        store.close()
    return sid


async def replay(url: str, pid: int, sid: str, count: int) -> None:
    ws = await Ws(url).open()
    seen: list[float] = []
    done = asyncio.get_running_loop().create_future()

    def on_update(raw: bytes) -> None:
        seen.append(time.perf_counter())
        if len(seen) >= count and not done.done():
            done.set_result(None)

    warm = await Ws(url).open()
    await warm.call("session/resume", {"sessionId": "sess_" + "e" * 16, "cwd": "/tmp"})
    await warm.close()
    ws.on_update = on_update
    hwm = status(pid, "VmHWM")
    started = time.perf_counter()
    params = {"sessionId": sid, "cwd": "/tmp", "replayFrom": {"type": "start"}}
    resumed = asyncio.create_task(ws.call("session/resume", params))
    await asyncio.wait([done, resumed], return_when=asyncio.FIRST_COMPLETED)
    await resumed  # its error, if it failed
    try:
        await asyncio.wait_for(done, 120)
    except TimeoutError:
        print(f"replay: only {len(seen)} of {count} updates came")
        raise
    print(f"replay: resume of a session of {count} updates, replayFrom start")
    print(
        f"  first update after {(seen[0] - started) * 1e3:.1f} ms, last after "
        f"{(seen[-1] - started) * 1e3:.0f} ms, "
        f"answer after {(time.perf_counter() - started) * 1e3:.0f} ms"
    )
    print(
        f"  server peak RSS (VmHWM) {hwm / 1024:.0f} MiB before, "
        f"{status(pid, 'VmHWM') / 1024:.0f} MiB after"
    )
    await ws.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default="live,list,replay")
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--sessions", type=int, default=64, help="per connection")
    parser.add_argument("--stored", type=int, default=100_000)
    parser.add_argument("--updates", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=50, help="session/list calls of each kind")
    parser.add_argument("--turns", action="store_true", help="live: then a turn in each")
    parser.add_argument("--wait-s", type=float, default=0, help="live: RSS again this later")
    parser.add_argument("--extra", default="", help="more config.toml, e.g. a [server] table")
    args = parser.parse_args()
    parts = args.parts.split(",")
    model, base_url = start_model(10)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            if "live" in parts:
                home = Path(tmp) / "live"
                write_config(home, base_url, extra=args.extra)
                server, url = serve(home)
                try:
                    asyncio.run(
                        live(
                            url,
                            server.pid,
                            args.connections,
                            args.sessions,
                            args.turns,
                            args.wait_s,
                        )
                    )
                finally:
                    stop(server)
            if "list" in parts:
                home = Path(tmp) / "list"
                write_config(home, base_url, extra=args.extra)
                started = time.perf_counter()
                fill_sessions(home, args.stored)
                took = time.perf_counter() - started
                print(f"list: {args.stored} stored sessions ({took:.0f} s to fill)")
                server, url = serve(home)
                try:
                    asyncio.run(listing(url, args.rounds))
                finally:
                    stop(server)
                crow_sessions(home, 3)
            if "replay" in parts:
                home = Path(tmp) / "replay"
                write_config(home, base_url, extra=args.extra)
                sid = fill_updates(home, args.updates)
                server, url = serve(home)
                try:
                    asyncio.run(replay(url, server.pid, sid, args.updates))
                finally:
                    stop(server)
    finally:
        stop(model)


if __name__ == "__main__":
    main()
