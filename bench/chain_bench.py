"""What a proxy chain costs: Crow's echo agent direct vs through crow conductor.

    python bench/chain_bench.py [--turns 200] [--chunks 200]

Four setups in one run: the agent spawned directly, and ``crow conductor agent``
with 0, 1 and 3 pass-through proxies (examples/arrow_proxy.py --prefix "") in
front of it.  A raw client (no validation, minimal parsing) sends one prompt at a
time and times each prompt → ``idle`` ("Echo: ping", one update per character:
13 updates through every hop), then sends prompts whose replies are ``--chunks``
chunks each and counts updates per second reaching the client.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
ECHO = [PY, str(ROOT / "examples" / "echo_agent.py")]
PASS = shlex.join([PY, str(ROOT / "examples" / "arrow_proxy.py"), "--prefix", ""])
IDLE = b'"state":"idle"'


class Client:
    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.next_id = 0

    async def request(self, method: str, params: dict) -> dict:
        self.next_id += 1
        rid = self.next_id
        self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        while True:
            line = await self.process.stdout.readline()  # type: ignore[union-attr]
            if not line:
                raise EOFError("the agent closed its output")
            if b'"method"' not in line and line.startswith(
                b'{"jsonrpc":"2.0","id":' + str(rid).encode()
            ):
                return json.loads(line)

    def send(self, message: dict) -> None:
        self.process.stdin.write(json.dumps(message).encode() + b"\n")  # type: ignore[union-attr]

    async def turn(self, sid: str, text: str) -> tuple[float, int]:
        """Seconds from the prompt's write to its idle, and the updates seen."""
        started = time.perf_counter()
        self.next_id += 1
        params = {"sessionId": sid, "prompt": [{"type": "text", "text": text}]}
        self.send(
            {"jsonrpc": "2.0", "id": self.next_id, "method": "session/prompt", "params": params}
        )
        updates = 0
        while True:
            line = await self.process.stdout.readline()  # type: ignore[union-attr]
            if not line:
                raise EOFError("the agent closed its output")
            if b'"session/update"' in line:
                updates += 1
                if IDLE in line:
                    return time.perf_counter() - started, updates


async def run(argv: list[str], turns: int, chunks: int) -> dict[str, float]:
    process = await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, limit=1 << 26
    )
    client = Client(process)
    try:
        await client.request(
            "initialize", {"protocolVersion": 2, "info": {"name": "bench", "version": "1"}}
        )
        sid = (await client.request("session/new", {"cwd": "/tmp"}))["result"]["sessionId"]
        for _ in range(10):  # warm-up
            await client.turn(sid, "warm")
        latencies = sorted([(await client.turn(sid, "ping"))[0] for _ in range(turns)])
        return {
            "p50_ms": statistics.median(latencies) * 1000,
            "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000,
            **await updates_per_second(client, sid, chunks),
        }
    finally:
        process.stdin.close()  # type: ignore[union-attr]
        await process.wait()


async def updates_per_second(client: Client, sid: str, chunks: int) -> dict[str, float]:
    """Replies the agent splits into ``chunks`` chunks (its --chunks)."""
    text = "w" * chunks * 4
    started = time.perf_counter()
    total = 0
    for _ in range(5):
        total += (await client.turn(sid, text))[1]
    return {"updates_per_s": total / (time.perf_counter() - started)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--chunks", type=int, default=200)
    args = parser.parse_args()
    agent = shlex.join([*ECHO, "--chunks", str(args.chunks)])
    setups = {
        "direct": [*ECHO, "--chunks", str(args.chunks)],
        "conductor, 0 proxies": [PY, "-m", "crow", "conductor", "agent", agent],
        "conductor, 1 proxy": [PY, "-m", "crow", "conductor", "agent", PASS, agent],
        "conductor, 3 proxies": [PY, "-m", "crow", "conductor", "agent", PASS, PASS, PASS, agent],
    }
    print(f"{'setup':24} {'p50 ms':>8} {'p99 ms':>8} {'updates/s':>10}")
    for name, argv in setups.items():
        figures = asyncio.run(run(argv, args.turns, args.chunks))
        print(
            f"{name:24} {figures['p50_ms']:8.2f} {figures['p99_ms']:8.2f} "
            f"{figures['updates_per_s']:10.0f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
