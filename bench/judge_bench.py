"""The judge's own overhead: from the worker's ``idle`` to the verdict in the session.

    python bench/judge_bench.py [--turns 30]

``crow serve --http`` with a zero-latency scripted worker model, and a judge with
its own zero-latency scripted judge model (a forced ``verdict`` tool call), two ways:
``crow judge`` attached over HTTP from another process, and the judge inside
``crow serve`` (the session opened with ``_meta["crow/verify"]``), which also writes
its reasoning into its judge session.  A client sends prompts one after another and
measures, for each turn, the time from the worker's ``idle`` reaching it to the
verdict's ``agent_message`` reaching it: the judge waking, reading the turn, one
model call (~1 ms on loopback), and posting.  Target: under 50 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for extra in ("src", "testing"):
    sys.path.insert(0, str(ROOT / extra))

from crow_testing.fakemodel import ScriptedModel, Text, ToolCalls  # noqa: E402
from crow_testing.serve_support import (  # noqa: E402
    HttpServer,
    client_for,
    write_config,
)

from crow.extensions import VERDICT, VERIFY  # noqa: E402


async def measure(url: str, turns: int, *, resident: bool) -> list[float]:
    client = await client_for(url)
    meta = {VERIFY: True} if resident else None
    session = await client.new_session(tempfile.gettempdir(), meta=meta)
    judge = None
    if not resident:
        command = ["judge", "--url", url, "--session", session.id, "--model", "judge"]
        judge = subprocess.Popen(
            [sys.executable, "-m", "crow", *command],
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
        )
        assert judge.stderr is not None
        judge.stderr.readline()  # "watching session ..."
    idle_at: dict[str, float] = {}
    verdict_at: list[float] = []

    def on_update(session_id: str, update: object) -> None:
        kind = getattr(update, "session_update", None)
        if kind == "state_update" and getattr(update, "state", None) == "idle":
            idle_at[str(len(idle_at))] = time.perf_counter()
        meta = getattr(update, "meta", None)
        if kind == "agent_message" and isinstance(meta, dict) and VERDICT in meta:
            verdict_at.append(time.perf_counter())

    client.on_update(on_update)
    try:
        for n in range(turns):
            await session.run(f"prompt {n}")
            while len(verdict_at) <= n:
                await client.next_update(session.id)
    finally:
        if judge is not None:
            judge.terminate()
            judge.wait(timeout=10)
        await client.aclose()
    idles = [idle_at[k] for k in sorted(idle_at, key=int)][-turns:]
    return [1000 * (v - i) for i, v in zip(idles, verdict_at, strict=True)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=30)
    args = parser.parse_args()
    with ScriptedModel() as worker, ScriptedModel() as judge, tempfile.TemporaryDirectory() as home:
        worker.set_default(Text(text="done"))
        judge.set_default(ToolCalls(calls=[("verdict", {"pass": True, "reasons": ["ok"]})]))
        extra = f'[tools]\nbuiltin = []\n\n[providers.judging]\nbase_url = "{judge.base_url}"\n'
        extra += '\n[models.judge]\nprovider = "judging"\nid = "judge"\n'
        extra += '\n[judge]\nmodel = "judge"\n'
        write_config(Path(home), worker.base_url, extra=extra)
        os.environ["CROW_HOME"] = home
        server = HttpServer()
        try:
            for name, resident in (("crow judge over HTTP", False), ("inside crow serve", True)):
                gaps = sorted(asyncio.run(measure(server.url, args.turns, resident=resident)))
                print(
                    f"{name}: idle -> verdict posted, {len(gaps)} turns: "
                    f"p50 {statistics.median(gaps):.1f} ms, "
                    f"p90 {gaps[int(0.9 * (len(gaps) - 1))]:.1f} ms, max {gaps[-1]:.1f} ms"
                )
        finally:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
