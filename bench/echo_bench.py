"""Echo-agent throughput over stdio: Crow's echo agent against the TS SDK's.

    python bench/echo_bench.py [--prompts 2000] [--chunks 20] [--sessions 1 8] [--repeat 3]

For each agent and each session count S, one client process opens S sessions
and keeps one prompt in flight per session (prompt → wait for idle → next)
until N prompts have completed.  Reported per run: prompts/s, session/update
notifications/s, and p50/p99 of prompt sent → idle received.  The best of
``--repeat`` runs is kept (a 2-core machine is noisy).

The client is deliberately thin (raw lines, ``json.loads``, no validation), so
the figures measure the agents, not the client.  ``--client crow`` measures
Crow's own ``ClientSide`` (validation plus projection) against Crow's agent.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "testing"))

from crow_testing.rawclient import RawClient  # noqa: E402

AGENTS = {
    "crow": [sys.executable, str(ROOT / "examples" / "echo_agent.py")],
    "ts-sdk": ["node", str(ROOT / "tests" / "interop" / "ts" / "echo_agent.mjs"), "--plain"],
}


async def run_raw(argv: list[str], prompts: int, chunks: int, sessions: int) -> dict[str, float]:
    proc = await asyncio.create_subprocess_exec(
        *argv,
        "--chunks",
        str(chunks),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        limit=1 << 24,
    )
    client = RawClient(proc)
    await client.request(
        "initialize", {"protocolVersion": 2, "info": {"name": "bench", "version": "0"}}
    )
    sids = [
        (await client.request("session/new", {"cwd": os.getcwd()}))["sessionId"]
        for _ in range(sessions)
    ]
    client.updates = 0
    latencies: list[float] = []
    per_session = prompts // sessions

    async def worker(sid: str) -> None:
        for _ in range(per_session):
            latencies.append(await client.run_prompt(sid))

    started = time.perf_counter()
    await asyncio.gather(*(worker(s) for s in sids))
    elapsed = time.perf_counter() - started
    updates = client.updates
    assert proc.stdin is not None
    proc.stdin.close()
    await proc.wait()
    client.reader.cancel()
    return summarize(len(latencies), updates, elapsed, latencies)


async def run_crow_client(
    argv: list[str], prompts: int, chunks: int, sessions: int
) -> dict[str, float]:
    from crow.acp import ClientSide, schema, spawn

    transport = await spawn([*argv, "--chunks", str(chunks)])
    counted = [0]
    latencies: list[float] = []
    async with ClientSide(transport, info=schema.Implementation(name="bench", version="0")) as c:
        c.on_update(lambda sid, update: counted.__setitem__(0, counted[0] + 1))
        await c.initialize()
        opened = [await c.new_session(os.getcwd()) for _ in range(sessions)]
        counted[0] = 0

        async def worker(session: Any) -> None:
            for _ in range(prompts // sessions):
                started = time.perf_counter()
                await session.run("benchmark " * 20)
                latencies.append(time.perf_counter() - started)

        started = time.perf_counter()
        await asyncio.gather(*(worker(s) for s in opened))
        elapsed = time.perf_counter() - started
    return summarize(len(latencies), counted[0], elapsed, latencies)


async def startup_and_exit(argv: list[str]) -> tuple[float, float]:
    """Seconds from spawn to initialize answered, and from stdin EOF mid-turn to exit."""
    started = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        *argv,
        "--chunks",
        "1000",
        "--delay-ms",
        "100",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        limit=1 << 24,
    )
    client = RawClient(proc)
    await client.request(
        "initialize", {"protocolVersion": 2, "info": {"name": "bench", "version": "0"}}
    )
    to_initialize = time.perf_counter() - started
    sid = (await client.request("session/new", {"cwd": os.getcwd()}))["sessionId"]
    await client.request(
        "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "x"}]}
    )
    while sid not in client.running:
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.2)  # mid-turn: chunks are flowing
    assert proc.stdin is not None
    closed = time.perf_counter()
    proc.stdin.close()
    await proc.wait()
    client.reader.cancel()
    return to_initialize, time.perf_counter() - closed


def summarize(done: int, updates: int, elapsed: float, latencies: list[float]) -> dict[str, float]:
    latencies.sort()
    return {
        "prompts_per_s": done / elapsed,
        "updates_per_s": updates / elapsed,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000,
    }


def best(runs: list[dict[str, float]]) -> dict[str, float]:
    return max(runs, key=lambda r: r["updates_per_s"])


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=2000)
    parser.add_argument("--chunks", type=int, default=20)
    parser.add_argument("--sessions", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--client", choices=["raw", "crow"], default="raw")
    args = parser.parse_args()

    print(
        f"{args.prompts} prompts x {args.chunks} chunks ({args.chunks + 4} updates each), "
        f"best of {args.repeat}, client={args.client}"
    )
    print(
        f"{'agent':8} {'sessions':>8} {'prompts/s':>10} {'updates/s':>10} "
        f"{'p50 ms':>8} {'p99 ms':>8}"
    )
    agents = AGENTS if args.client == "raw" else {"crow": AGENTS["crow"]}
    results: dict[tuple[str, int], dict[str, float]] = {}
    for sessions in args.sessions:
        for name, argv in agents.items():
            runner = run_raw if args.client == "raw" else run_crow_client
            runs = [
                await runner(argv, args.prompts, args.chunks, sessions) for _ in range(args.repeat)
            ]
            r = results[(name, sessions)] = best(runs)
            print(
                f"{name:8} {sessions:>8} {r['prompts_per_s']:>10.0f} {r['updates_per_s']:>10.0f} "
                f"{r['p50_ms']:>8.2f} {r['p99_ms']:>8.2f}",
                flush=True,
            )
    if args.client == "raw":
        for name, argv in agents.items():
            timings = [await startup_and_exit(argv) for _ in range(args.repeat)]
            init_s = statistics.median(t[0] for t in timings)
            exit_s = statistics.median(t[1] for t in timings)
            print(
                f"{name}: spawn -> initialize answered {init_s * 1000:.0f} ms, "
                f"stdin EOF mid-turn -> exit {exit_s * 1000:.0f} ms (median)"
            )
        for sessions in args.sessions:
            ratio = (
                results[("crow", sessions)]["updates_per_s"]
                / results[("ts-sdk", sessions)]["updates_per_s"]
            )
            print(f"crow / ts-sdk updates/s with {sessions} session(s): {ratio:.2f}x")


if __name__ == "__main__":
    asyncio.run(main())
