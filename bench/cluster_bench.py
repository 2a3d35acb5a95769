"""Several ``crow serve --http`` processes on one PostgreSQL store.

    python bench/cluster_bench.py --pg-url postgresql://user@host/db
                                  [--clients 30] [--prompts 10] [--chunks 10]
                                  [--only sqlite,pg1,pg2,pg3,proxy,delivery,failover]
                                  [--rounds N]

(``--pg-url`` names a maintenance database: the bench makes a database of its own
per setup and drops it.)  In one run, with a zero-latency model server in its own
process (``bench/zero_model.py``) and the load from ``bench/http_load.py`` (one
process per server, the clients spread evenly, each client on its own session):

- one server on SQLite (the home's file) beside one server on PostgreSQL;
- 1, 2 and 3 servers on one PostgreSQL: prompts/s in all, p99 prompt -> idle
  (the worst of the servers');
- 2 servers on one PostgreSQL behind one address: ``bench/sticky_proxy.py`` (its
  own process) sends each client's connection to one server, sticky by
  ``Acp-Connection-Id``, and all clients load the proxy;
- cross-server delivery: a client on server A runs turns while a client on server B
  watches the session; for each turn, the time from A's client seeing the ``idle``
  to B's client seeing it;
- failover: a turn hangs on server A (its model never answers), A is killed with
  SIGKILL, and a client of B resumes the session (B closes the dead owner's turn)
  and prompts it: the time from the kill to the resume's answer, and to that
  prompt's ``idle`` (B has served a turn before: no cold start counted).  B's
  resume may come before A is seen dead: its prompt is then held behind A's turn
  until B finds A dead.  ``--only failover`` measures this alone, ``--rounds`` times
  (two new servers each), and also with B's client watching the session from before
  the kill (its prompt is always held behind A's turn): the spread of each.

A shared machine's speed drifts: ``--rounds N`` runs the chosen setups N times in
turn (``--only sqlite,pg1`` pairs one SQLite server with one PostgreSQL server,
round by round) and prints each round's PostgreSQL/SQLite ratio and the medians.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for extra in ("src", "testing", "bench"):
    sys.path.insert(0, str(ROOT / extra))

from crow_testing.fakemodel import Hang, ScriptedModel, Text  # noqa: E402
from crow_testing.serve_support import client_for, write_config  # noqa: E402
from http_bench import run_load, start, start_model, stop  # noqa: E402

from crow.acp import InvalidParams  # noqa: E402


class Database:
    """A fresh database on the server of ``admin_url``, dropped on exit."""

    def __init__(self, admin_url: str) -> None:
        import psycopg

        self.admin_url = admin_url
        self.name = f"crow_bench_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(f"CREATE DATABASE {self.name}")
        self.url = f"{admin_url.rpartition('/')[0]}/{self.name}"

    def __enter__(self) -> str:
        return self.url

    def __exit__(self, *exc: object) -> None:
        import psycopg

        with psycopg.connect(self.admin_url, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {self.name} WITH (FORCE)")


def servers(count: int, home: str, store_url: str | None) -> list[tuple[Any, str]]:
    env = {**os.environ, "CROW_HOME": home}
    if store_url:
        env["CROW_STORE_URL"] = store_url
    command = [sys.executable, "-m", "crow", "serve", "--http", "127.0.0.1:0"]
    return [start(command, env) for _ in range(count)]


def proxied(urls: list[str]) -> tuple[Any, str]:
    """bench/sticky_proxy.py in front of ``urls`` (one token for all: the config's)."""
    backends = [url.split("/acp")[0] for url in urls]
    command = [sys.executable, str(ROOT / "bench" / "sticky_proxy.py"), *backends]
    process, address = start(command, dict(os.environ))
    return process, address + "/acp?" + urls[0].split("?", 1)[1]


def load(urls: list[str], clients: int, prompts: int) -> tuple[float, float]:
    """The clients spread over ``urls`` at once: (prompts/s in all, worst p99 ms)."""
    share = max(1, clients // len(urls))
    with ThreadPoolExecutor(len(urls)) as pool:
        results = list(pool.map(lambda url: run_load(url, share, prompts, 0.0), urls))
    return sum(r["prompts_per_s"] for r in results), max(r["p99_ms"] for r in results)


async def delivery_ms(url_a: str, url_b: str, turns: int) -> list[float]:
    runner, watcher = await client_for(url_a), await client_for(url_b)
    session = await runner.new_session("/tmp")
    watched = await watcher.resume_session(session.id, "/tmp", replay=False)
    gaps = []
    for _ in range(turns):
        seen_b = asyncio.get_running_loop().create_future()

        def on_update(session_id: str, update: Any, seen: Any = seen_b) -> None:
            if getattr(update, "state", None) == "idle" and not seen.done():
                seen.set_result(time.perf_counter())

        watcher.on_update(on_update)
        await session.run("ping")
        seen_a = time.perf_counter()
        gaps.append((await seen_b - seen_a) * 1000)
        watcher.off_update(on_update)
    del watched
    for client in (runner, watcher):
        await client.__aexit__(None, None, None)
    return gaps


async def failover_ms(
    server_a: Any, url_a: str, url_b: str, model: ScriptedModel, *, watched: bool = False
) -> tuple[float, float]:
    """(kill -> the session resumed on B, kill -> B's prompt answered), in ms.
    ``watched``: B's client resumed the session before the kill (0 ms to resume), so
    B knows A's turn runs, and the prompt is held behind it until B finds A dead."""
    survivor = await client_for(url_b)
    model.script(Text(text="warm"))
    warm = await survivor.new_session("/tmp")  # B's first turn (imports, model lookup)
    await warm.run("warm up")
    model.script(Hang(), Text(text="picked up"))
    runner = await client_for(url_a)
    session = await runner.new_session("/tmp")
    asked = len(model.requests)
    await session.prompt("hang")
    while len(model.requests) == asked:  # A's model call is under way (and hangs)
        await asyncio.sleep(0.01)
    if watched:
        resumed = await survivor.resume_session(session.id, "/tmp", replay=False)
    killed = time.perf_counter()
    server_a.send_signal(signal.SIGKILL)
    if not watched:
        resumed = await survivor.resume_session(session.id, "/tmp", replay=False)
    resumed_ms = (time.perf_counter() - killed) * 1000 if not watched else 0.0
    while True:  # the kernel may take a moment to end A: until then its lease holds
        try:
            turn = await resumed.run("go on")
            break
        except InvalidParams as exc:
            if "busy" not in str(exc):
                raise
            await asyncio.sleep(0.01)
    assert turn.stop_reason == "end_turn", turn.stop_reason
    answered_ms = (time.perf_counter() - killed) * 1000
    await survivor.__aexit__(None, None, None)
    return resumed_ms, answered_ms


SETUPS: dict[str, tuple[str, int, bool, bool]] = {
    "sqlite": ("1 server, SQLite", 1, False, False),
    "pg1": ("1 server, PostgreSQL", 1, True, False),
    "pg2": ("2 servers, PostgreSQL", 2, True, False),
    "pg3": ("3 servers, PostgreSQL", 3, True, False),
    "proxy": ("2 behind sticky proxy", 2, True, True),
}


def measure(setup: str, home: str, pg_url: str, clients: int, prompts: int) -> tuple[float, float]:
    """One setup of ``SETUPS`` under load: (prompts/s, p99 ms), printed as it ends."""
    name, count, on_pg, behind_proxy = SETUPS[setup]
    with Database(pg_url) if on_pg else _nothing() as url:
        running = servers(count, home, url)
        urls = [u for _, u in running]
        if behind_proxy:
            proxy, proxy_url = proxied(urls)
            running.append((proxy, proxy_url))
            urls = [proxy_url]
        try:
            rate, p99 = load(urls, clients, prompts)
            print(f"  {name:22} {rate:7.0f} prompts/s  p99 {p99:7.1f} ms", flush=True)
        finally:
            for process, _ in running:
                stop(process)
    return rate, p99


def failovers(pg_url: str, rounds: int) -> None:
    """Failover alone, ``rounds`` times each way (B's client resuming after the kill,
    and watching from before it), each on two new servers: the spread."""
    runs: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    with tempfile.TemporaryDirectory() as home, ScriptedModel() as scripted:
        write_config(Path(home), scripted.base_url, extra="[tools]\nbuiltin = []\n")
        with Database(pg_url) as url:
            for _ in range(rounds):
                for watched, done in runs.items():
                    (a, url_a), (b, url_b) = servers(2, home, url)
                    try:
                        failover = failover_ms(a, url_a, url_b, scripted, watched=watched)
                        done.append(asyncio.run(failover))
                    finally:
                        for process in (a, b):
                            stop(process)
                    resumed, answered = done[-1]
                    how = "watching from B" if watched else f"resumed on B {resumed:.0f} ms"
                    print(f"  failover, {how}: answered {answered:.0f} ms", flush=True)
    for watched, done in runs.items():
        ms = sorted(answered for _, answered in done)
        how = "B's client watching before" if watched else "B's client resuming after"
        print(
            f"  kill -9 -> B's prompt answered, {how}: min {ms[0]:.0f} ms, "
            f"median {statistics.median(ms):.0f} ms, max {ms[-1]:.0f} ms ({len(ms)} runs)",
            flush=True,
        )


def cluster_behaviour(pg_url: str) -> None:
    """Cross-server delivery and failover, on two servers."""
    with tempfile.TemporaryDirectory() as home, ScriptedModel() as scripted:
        write_config(Path(home), scripted.base_url, extra="[tools]\nbuiltin = []\n")
        with Database(pg_url) as url:
            (a, url_a), (b, url_b) = servers(2, home, url)
            try:
                scripted.set_default(Text(text="pong"))
                gaps = sorted(asyncio.run(delivery_ms(url_a, url_b, 50)))
                print(
                    f"  cross-server idle delivery: p50 {statistics.median(gaps):.1f} ms, "
                    f"p90 {gaps[int(len(gaps) * 0.9)]:.1f} ms, max {gaps[-1]:.1f} ms",
                    flush=True,
                )
                resumed, answered = asyncio.run(failover_ms(a, url_a, url_b, scripted))
                print(
                    f"  failover: kill -9 of the owner mid-turn -> resumed on B "
                    f"{resumed:.0f} ms, -> B's prompt answered {answered:.0f} ms"
                )
            finally:
                for process in (a, b):
                    stop(process)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pg-url", default=os.environ.get("CROW_TEST_PG_URL"), required=False)
    parser.add_argument("--clients", type=int, default=30)
    parser.add_argument("--prompts", type=int, default=10)
    parser.add_argument("--chunks", type=int, default=10)
    parser.add_argument("--only", default=",".join([*SETUPS, "delivery"]))
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    if not args.pg_url:
        parser.error("--pg-url (or CROW_TEST_PG_URL) is needed")
    chosen = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = sorted(set(chosen) - {*SETUPS, "delivery", "failover"})
    if unknown:
        known = ", ".join([*SETUPS, "delivery", "failover"])
        parser.error(f"--only: unknown {', '.join(unknown)} (from {known})")
    model, base_url = start_model(args.chunks)
    results: dict[str, list[tuple[float, float]]] = {s: [] for s in chosen if s in SETUPS}
    if results:
        print(f"{args.clients} clients x {args.prompts} prompts, {args.chunks} chunks each")
    try:
        with tempfile.TemporaryDirectory() as home:
            token = uuid.uuid4().hex  # one for every server: a proxy fronts two
            extra = f'[tools]\nbuiltin = []\n\n[server]\ntoken = "{token}"\n'
            write_config(Path(home), base_url, extra=extra)
            for round_no in range(args.rounds if results else 0):
                if args.rounds > 1:
                    print(f" round {round_no + 1}", flush=True)
                for setup in results:
                    results[setup].append(
                        measure(setup, home, args.pg_url, args.clients, args.prompts)
                    )
                if "sqlite" in results and "pg1" in results:
                    (sq_rate, sq_p99), (pg_rate, pg_p99) = results["sqlite"][-1], results["pg1"][-1]
                    print(
                        f"  PostgreSQL/SQLite: {pg_rate / sq_rate:.2f}x prompts/s, "
                        f"p99 {pg_p99 / sq_p99:.2f}x",
                        flush=True,
                    )
        if args.rounds > 1 and results:
            summarise(results)
        if "delivery" in chosen:
            cluster_behaviour(args.pg_url)
        if "failover" in chosen:
            failovers(args.pg_url, args.rounds)
    finally:
        stop(model)


def summarise(results: dict[str, list[tuple[float, float]]]) -> None:
    """Medians and ranges over the rounds (and of the rounds' paired ratios)."""
    print(" medians over the rounds (range):")
    for setup, runs in results.items():
        rates, p99s = [r for r, _ in runs], [p for _, p in runs]
        print(
            f"  {SETUPS[setup][0]:22} {statistics.median(rates):7.0f} prompts/s "
            f"({min(rates):.0f}-{max(rates):.0f})  p99 {statistics.median(p99s):7.1f} ms "
            f"({min(p99s):.0f}-{max(p99s):.0f})"
        )
    if "sqlite" in results and "pg1" in results:
        pairs = list(zip(results["sqlite"], results["pg1"], strict=True))
        rate_ratios = [pg[0] / sq[0] for sq, pg in pairs]
        p99_ratios = [pg[1] / sq[1] for sq, pg in pairs]
        print(
            f"  PostgreSQL/SQLite prompts/s {statistics.median(rate_ratios):.2f}x "
            f"({min(rate_ratios):.2f}-{max(rate_ratios):.2f}), "
            f"p99 {statistics.median(p99_ratios):.2f}x "
            f"({min(p99_ratios):.2f}-{max(p99_ratios):.2f})"
        )


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


if __name__ == "__main__":
    main()
