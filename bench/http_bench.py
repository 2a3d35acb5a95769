"""``crow serve --http`` under load: many clients over streamable HTTP and WebSocket.

    python bench/http_bench.py [--clients 100] [--prompts 10] [--chunks 10]

Each client opens its own connection and session and sends its prompts one
after another (prompt -> idle) against a scripted model that answers at once.
Reported per transport: prompts/s, session/update notifications/s, p50/p99 of
prompt -> idle, and the server's peak RSS.  Clients run in this process with
Crow's own client (``crow.acp``), the server in another.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for extra in ("src", "tests", "tests/integration"):
    sys.path.insert(0, str(ROOT / extra))

from fakemodel import ScriptedModel, Text  # noqa: E402
from serve_support import write_config  # noqa: E402

from crow.acp import ClientSide, schema  # noqa: E402
from crow.acp.transports.http_client import connect_url  # noqa: E402

INFO = schema.Implementation(name="http-bench", version="0")


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def one_client(url: str, prompts: int, latencies: list[float], counts: list[int]) -> None:
    client = ClientSide(await connect_url(url), info=INFO)
    async with client:
        client.on_update(lambda sid, update: counts.__setitem__(0, counts[0] + 1))
        await client.initialize()
        session = await client.new_session("/tmp")
        for _ in range(prompts):
            started = time.perf_counter()
            await session.run("benchmark")
            latencies.append(time.perf_counter() - started)


async def load(url: str, clients: int, prompts: int) -> dict[str, float]:
    latencies: list[float] = []
    counts = [0]
    started = time.perf_counter()
    await asyncio.gather(*(one_client(url, prompts, latencies, counts) for _ in range(clients)))
    elapsed = time.perf_counter() - started
    latencies.sort()
    return {
        "prompts_per_s": len(latencies) / elapsed,
        "updates_per_s": counts[0] / elapsed,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000,
        "seconds": elapsed,
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--prompts", type=int, default=10)
    parser.add_argument("--chunks", type=int, default=10)
    args = parser.parse_args()
    with ScriptedModel() as model, tempfile.TemporaryDirectory() as home:
        model.set_default(Text(text="word " * args.chunks, chunks=args.chunks))
        write_config(Path(home), model.base_url, extra="[tools]\nbuiltin = []\n")
        server = subprocess.Popen(
            [sys.executable, "-m", "crow", "serve", "--http", "127.0.0.1:0"],
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            env={**os.environ, "CROW_HOME": home},
        )
        try:
            assert server.stderr is not None
            url = ""
            for line in server.stderr:
                found = re.search(r"(http://\S+)", line)
                if found:
                    url = found.group(1)
                    break
            print(f"{args.clients} clients x {args.prompts} prompts, {args.chunks} chunks each")
            for name, target in (("http+sse", url), ("websocket", url.replace("http", "ws", 1))):
                r = await load(target, args.clients, args.prompts)
                print(
                    f"  {name:10} {r['prompts_per_s']:7.0f} prompts/s {r['updates_per_s']:8.0f} "
                    f"updates/s  p50 {r['p50_ms']:7.1f} ms  p99 {r['p99_ms']:7.1f} ms  "
                    f"({r['seconds']:.1f} s)"
                )
            print(f"  server peak RSS {peak_rss_mib(server.pid):.0f} MiB")
        finally:
            server.terminate()
            server.wait(timeout=10)


if __name__ == "__main__":
    asyncio.run(main())
