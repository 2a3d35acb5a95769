"""``crow serve`` figures: turn overhead, replay time, start-up, memory per session.

    python bench/agent_bench.py [--prompts 300] [--chunks 20] [--replay-updates 10000]
    python bench/agent_bench.py --only startup [--runs 15]

- Turn overhead: prompt → idle through ``crow serve`` against a scripted model
  that answers at once (crow_testing.fakemodel on loopback), next to the echo agent
  doing the same K chunks without a model, and next to the bare model round trip
  (Crow's own HTTP path, crow.models.transport, calling the scripted server
  directly).  Overhead = crow minus bare.
- Replay: ``session/resume`` with ``replayFrom: start`` of a session holding N
  updates (a real turn's updates, repeated), request sent → response received.
- Start-up: spawn → ``initialize`` answered, ``crow serve`` next to the TS SDK's
  echo agent (``node tests/interop/ts/echo_agent.mjs --plain``), runs interleaved,
  median and best of 15.  Crow's modules are byte-compiled once into a temporary
  ``PYTHONPYCACHEPREFIX`` first, as an installed copy would be: under
  ``PYTHONDONTWRITEBYTECODE=1`` every spawn would compile them again (~0.1 s).
- Memory: RSS growth of ``crow serve`` per idle session (60: one connection's worth).

Every run uses a fresh temporary CROW_HOME.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for extra in ("src", "testing", "bench"):
    sys.path.insert(0, str(ROOT / extra))

from crow_testing.fakemodel import ScriptedModel, Text  # noqa: E402
from crow_testing.rawclient import RawClient  # noqa: E402
from crow_testing.serve_support import write_config  # noqa: E402

CROW = [sys.executable, "-m", "crow", "serve"]
ECHO = [sys.executable, str(ROOT / "examples" / "echo_agent.py")]
TS_ECHO = ["node", str(ROOT / "tests" / "interop" / "ts" / "echo_agent.mjs"), "--plain"]


async def start(
    argv: list[str], home: str, env: dict[str, str] | None = None
) -> tuple[asyncio.subprocess.Process, RawClient]:
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        env=env or {**os.environ, "CROW_HOME": home},
        limit=1 << 26,
    )
    return proc, RawClient(proc)


async def stop(proc: asyncio.subprocess.Process, client: RawClient) -> None:
    assert proc.stdin is not None
    proc.stdin.close()
    await proc.wait()
    client.reader.cancel()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


async def turns(argv: list[str], home: str, prompts: int) -> list[float]:
    proc, client = await start(argv, home)
    await client.initialize()
    sid = (await client.request("session/new", {"cwd": "/tmp"}))["sessionId"]
    for _ in range(10):  # warm up: imports, connections, caches
        await client.run_prompt(sid, "warm up")
    latencies = [await client.run_prompt(sid, "benchmark") for _ in range(prompts)]
    await stop(proc, client)
    return latencies


async def bare_model(base_url: str, prompts: int) -> list[float]:
    """The model round trip alone, over Crow's own HTTP path (crow.models.transport)."""
    import orjson

    from crow.models.transport import ModelHttp

    http = ModelHttp(
        base_url, api_key="x", timeout_s=60.0, connect_timeout_s=10.0, max_connections=10
    )
    request = {
        "model": "main",
        "messages": [{"role": "user", "content": "benchmark"}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    latencies = []
    for i in range(prompts + 10):
        started = time.perf_counter()
        async for batch in http.post_stream("/chat/completions", orjson.dumps(request), "main"):
            for data in batch:
                orjson.loads(data)
        if i >= 10:
            latencies.append(time.perf_counter() - started)
    await http.aclose()
    return latencies


async def replay(home: str, base_url: str, updates: int) -> float:
    """Fill one session with ``updates`` logged updates, then time a replaying resume."""
    proc, client = await start(CROW, home)
    await client.initialize()
    sid = (await client.request("session/new", {"cwd": "/tmp"}))["sessionId"]
    await client.run_prompt(sid, "seed")
    await stop(proc, client)

    from crow.store.db import SqliteStore

    store = SqliteStore(Path(home) / "crow.db")
    bodies = [body for _, body in store.updates(sid)]
    turn = [b for b in bodies if b"state_update" not in b]
    have = len(bodies)
    # A replay sends the content, not past state changes, then one current state.
    replayed = updates - (have - len(turn)) + 1
    store.db.execute("BEGIN")
    for i in range(updates - have):
        store.db.execute(
            "INSERT INTO updates (session_id, seq, body) VALUES (?, ?, ?)",
            (sid, have + i + 1, turn[i % len(turn)].decode()),
        )
    store.db.execute("COMMIT")
    store.close()

    proc, client = await start(CROW, home)
    await client.initialize()
    timings = []
    for _ in range(5):
        client.updates = 0
        started = time.perf_counter()
        await client.request(
            "session/resume", {"sessionId": sid, "cwd": "/tmp", "replayFrom": {"type": "start"}}
        )
        timings.append(time.perf_counter() - started)
        assert client.updates >= replayed, (client.updates, replayed)
    await stop(proc, client)
    return statistics.median(timings)


async def cancel_latency(home: str, model: ScriptedModel, rounds: int = 10) -> list[float]:
    """session/cancel sent while the model hangs -> idle/cancelled received."""
    from crow_testing.fakemodel import Hang

    proc, client = await start(CROW, home)
    await client.initialize()
    sid = (await client.request("session/new", {"cwd": "/tmp"}))["sessionId"]
    timings = []
    for _ in range(rounds):
        model.script(Hang())
        seen = len(model.requests)
        done = asyncio.get_running_loop().create_future()
        client.idle[sid] = done
        await client.request(
            "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "hang"}]}
        )
        while len(model.requests) == seen:
            await asyncio.sleep(0.005)
        started = time.perf_counter()
        await client.notify("session/cancel", {"sessionId": sid})
        await done
        timings.append(time.perf_counter() - started)
    await stop(proc, client)
    return timings


async def startup(home: str, runs: int = 15) -> dict[str, list[float]]:
    """Seconds from spawn to initialize answered, Crow and the TS echo agent interleaved
    (a shared machine's load then weighs on both alike)."""
    with tempfile.TemporaryDirectory() as pycache:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env.update(CROW_HOME=home, PYTHONPYCACHEPREFIX=pycache)
        agents = {"crow serve": CROW, "TS SDK echo agent": TS_ECHO}
        timings: dict[str, list[float]] = {name: [] for name in agents}
        for i in range(runs + 1):
            for name, argv in agents.items():
                started = time.perf_counter()
                proc, client = await start(argv, home, env)
                await client.initialize()
                if i:  # the first round compiles Crow's bytecode and warms the disk cache
                    timings[name].append(time.perf_counter() - started)
                await stop(proc, client)
    return timings


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


async def memory_per_session(home: str, sessions: int) -> tuple[float, float]:
    proc, client = await start(CROW, home)
    await client.initialize()
    await client.request("session/new", {"cwd": "/tmp"})  # first-session imports and caches
    before = rss_kib(proc.pid)
    for _ in range(sessions):
        await client.request("session/new", {"cwd": "/tmp"})
    after = rss_kib(proc.pid)
    await stop(proc, client)
    return (after - before) / sessions, after / 1024


SECTIONS = ("turns", "replay", "cancel", "startup", "memory")


async def turn_overhead(model: ScriptedModel, args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as home:
        write_config(Path(home), model.base_url)
        crow = await turns(CROW, home, args.prompts)
    with tempfile.TemporaryDirectory() as home:
        echo = await turns([*ECHO, "--chunks", str(args.chunks)], home, args.prompts)
    bare = await bare_model(model.base_url, args.prompts)
    print(f"turn, {args.chunks} chunks, prompt -> idle over stdio ({args.prompts} turns):")
    for name, values in (
        ("crow serve + model", crow),
        ("echo agent", echo),
        ("bare model call", bare),
    ):
        print(
            f"  {name:20} p50 {statistics.median(values) * 1000:6.2f} ms"
            f"   p99 {percentile(values, 0.99) * 1000:6.2f} ms"
        )
    overhead = statistics.median(crow) - statistics.median(bare)
    print(f"  crow's overhead per turn over the bare model call: {overhead * 1000:.2f} ms")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=300)
    parser.add_argument("--chunks", type=int, default=20)
    parser.add_argument("--replay-updates", type=int, default=10_000)
    # A connection may hold 64 open sessions (MAX_SESSIONS_PER_CONNECTION).
    parser.add_argument("--sessions", type=int, default=60)
    parser.add_argument(
        "--only", choices=SECTIONS, action="append", help="run only this section (repeatable)"
    )
    parser.add_argument("--runs", type=int, default=15, help="start-up: spawns per agent")
    args = parser.parse_args()
    sections = set(args.only or SECTIONS)

    with ScriptedModel() as model:
        model.set_default(Text(text="word " * args.chunks, chunks=args.chunks))
        if "turns" in sections:
            await turn_overhead(model, args)
        if "replay" in sections:
            with tempfile.TemporaryDirectory() as home:
                write_config(Path(home), model.base_url)
                seconds = await replay(home, model.base_url, args.replay_updates)
                print(
                    f"resume with replay of {args.replay_updates} updates: "
                    f"{seconds * 1000:.1f} ms (median of 5)"
                )
        if "cancel" in sections:
            with tempfile.TemporaryDirectory() as home:
                write_config(Path(home), model.base_url)
                cancels = await cancel_latency(home, model)
                print(
                    f"session/cancel -> idle cancelled, model hanging: p50 "
                    f"{statistics.median(cancels) * 1000:.1f} ms, max {max(cancels) * 1000:.1f} ms"
                )
        if "startup" in sections:
            with tempfile.TemporaryDirectory() as home:
                write_config(Path(home), model.base_url)
                for name, values in (await startup(home, args.runs)).items():
                    print(
                        f"spawn -> initialize answered, {name:17}: median "
                        f"{statistics.median(values) * 1000:4.0f} ms, "
                        f"best {min(values) * 1000:4.0f} ms ({len(values)} runs)"
                    )
        if "memory" in sections:
            with tempfile.TemporaryDirectory() as home:
                write_config(Path(home), model.base_url)
                per, total = await memory_per_session(home, args.sessions)
                print(
                    f"memory per idle session: {per:.1f} KiB ({args.sessions} sessions, "
                    f"RSS {total:.0f} MiB)"
                )


if __name__ == "__main__":
    asyncio.run(main())
