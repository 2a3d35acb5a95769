"""What a session's built-in tool servers cost at its first turn, in one process.

    python bench/builtin_bench.py [--sessions 200] [--kinds fs,terminal,web,memory]

Each of ``--sessions`` sessions (its own cwd) gets its built-in servers the way a
session's first turn does (``crow.agent.tooling.builtin_servers`` and a ``ToolHub``),
one after another, and makes one tool call (``fs__list`` of its cwd).  Printed: the
time from the start to tools-ready (p50/p99, the first apart: it imports), the call's
time, and the process's memory (VmRSS, after a collection) per session beyond the
first ten.  Nothing is closed until the end: this is N live sessions' tools.

Run it on main's code and on a branch alternately (PYTHONPATH) to compare.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if not os.environ.get("PYTHONPATH"):
    sys.path.insert(0, str(ROOT / "src"))


def rss_kib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return float(line.split()[1])
    return float("nan")


def ms(values: list[float]) -> str:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return f"p50 {statistics.median(ordered) * 1000:.2f} ms, p99 {p99 * 1000:.2f} ms"


async def main(sessions: int, kinds: list[str]) -> None:
    home = Path(tempfile.mkdtemp(prefix="crow-builtin-bench-"))
    os.environ["CROW_HOME"] = str(home)
    from crow.agent.tooling import builtin_servers
    from crow.config import load_config
    from crow.tools.hub import ToolHub

    config = load_config()
    config = replace(config, tools=replace(config.tools, builtin=tuple(kinds)))

    async def on_event(message: str, severity: str) -> None:
        print(f"  event: {severity}: {message}", file=sys.stderr)

    hubs = []
    ready: list[float] = []
    calls: list[float] = []
    base = 0.0
    for n in range(sessions):
        cwd = home / f"project-{n}"
        cwd.mkdir()
        (cwd / "a.txt").write_text("a\n")
        began = time.perf_counter()
        hub = ToolHub(on_event=on_event)
        await hub.start(builtin_servers(config, str(cwd), [], f"s{n}"), [], builtin_timeout_s=30)
        ready.append(time.perf_counter() - began)
        hubs.append(hub)
        if "fs" in kinds:
            tool = hub.find("fs__list")
            assert tool is not None
            began = time.perf_counter()
            result = await hub.call(tool, {"path": "."})
            calls.append(time.perf_counter() - began)
            assert "a.txt" in result.text, result.text
        if n == 9:
            gc.collect()
            base = rss_kib()
    gc.collect()
    await asyncio.sleep(0.5)
    end = rss_kib()
    print(f"sessions: {sessions}, kinds: {','.join(kinds)}")
    print(f"first session to tools-ready: {ready[0] * 1000:.1f} ms (imports)")
    print(f"tools-ready, the others: {ms(ready[1:])}")
    if calls:
        print(f"fs__list call: {ms(calls[1:])}")
    if sessions > 10:
        print(
            f"RSS: {end / 1024:.1f} MiB; per session beyond the first 10: "
            f"{(end - base) / (sessions - 10):.1f} KiB"
        )
    began = time.perf_counter()
    for hub in hubs:
        await hub.aclose()
    print(f"closing all: {(time.perf_counter() - began) * 1000 / sessions:.2f} ms per session")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--kinds", default="fs,terminal,web,memory")
    args = parser.parse_args()
    asyncio.run(main(args.sessions, args.kinds.split(",")))
