"""ACP over HTTP + SSE and WebSocket under load: Crow beside the TS SDK's echo server.

    python bench/http_bench.py [--clients 100] [--prompts 10] [--chunks 10]
                               [--only crow,crow-echo,ts-echo] [--transports http,ws]
                               [--rates 0,50] [--rounds 1]

Servers, each in its own process, measured one after another in the same run:

- ``crow``: ``crow serve --http`` against a zero-latency model server in its own
  process (``bench/zero_model.py``, ``--chunks`` deltas per reply), so every turn
  goes through Crow's store, model client and turn loop;
- ``crow-echo``: Crow's in-memory echo agent on the same HTTP transport
  (``bench/crow_echo_http.py``): the transport and ACP layer alone;
- ``ts-echo``: the TS SDK 2.4.0 ``AcpServer`` with its echo agent
  (``tests/interop/ts/echo_http_server.mjs --plain``; one node child per connection).

The load comes from ``bench/http_load.py`` in a separate process (raw sockets, no
validation): each client opens a connection and a session, warms up with one
prompt, then sends its prompts: for rate 0 one after another (a closed loop: the
throughput; latency is then mostly queueing), for another rate on a fixed
schedule that offers that many prompts/s in all (an open loop: the latency a
client sees at that load).  Reported: prompts/s,
session/update events/s, p50/p99/max of prompt -> idle, and the server's peak
RSS (for ts-echo, the HTTP server process only, not its agent children).

A shared machine's speed drifts by half over minutes: ``--rounds N`` runs every
server N times in turn and reports the medians, and crow's closed-loop prompts/s
over ts-echo's round by round.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for extra in ("src", "testing"):
    sys.path.insert(0, str(ROOT / extra))

from crow_testing.serve_support import write_config  # noqa: E402

TS_DIR = ROOT / "tests" / "interop" / "ts"


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def start(command: list[str], env: dict[str, str]) -> tuple[subprocess.Popen[str], str]:
    """Start a server; its URL is the first http:// URL it prints on stderr."""
    process = subprocess.Popen(
        command, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, env=env
    )
    assert process.stderr is not None
    for line in process.stderr:
        found = re.search(r"(http://\S+)", line)
        if found:  # keep reading its stderr, or a chatty server blocks on it
            threading.Thread(target=process.stderr.read, daemon=True).start()
            return process, found.group(1)
    raise RuntimeError(f"{command[0]} did not start")


def start_model(chunks: int) -> tuple[subprocess.Popen[str], str]:
    """The zero-latency model server (bench/zero_model.py), and its base URL."""
    model = subprocess.Popen(
        [sys.executable, str(ROOT / "bench" / "zero_model.py"), "--chunks", str(chunks)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert model.stdout is not None
    return model, model.stdout.readline().strip()


def stop(process: subprocess.Popen[Any]) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def run_load(url: str, clients: int, prompts: int, rate: float) -> dict[str, float]:
    result = subprocess.run(
        [
            *(sys.executable, str(ROOT / "bench" / "http_load.py"), url),
            *("--clients", str(clients), "--prompts", str(prompts), "--rate", str(rate)),
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if result.returncode != 0:
        raise RuntimeError(result.stderr[-2000:])
    loaded: dict[str, float] = json.loads(result.stdout.strip().splitlines()[-1])
    return loaded


def commands(chunks: int, home: str) -> dict[str, tuple[list[str], dict[str, str]]]:
    env = {**os.environ, "CROW_HOME": home}
    return {
        "crow": ([sys.executable, "-m", "crow", "serve", "--http", "127.0.0.1:0"], env),
        "crow-echo": (
            [sys.executable, str(ROOT / "bench" / "crow_echo_http.py"), "--chunks", str(chunks)],
            env,
        ),
        "ts-echo": (
            [
                *("node", str(TS_DIR / "echo_http_server.mjs")),
                *("--port", "0", "--plain", "--chunks", str(chunks)),
            ],
            env,
        ),
    }


Key = tuple[str, str, float]  # server, transport, offered rate


def measure(
    name: str, command: list[str], env: dict[str, str], args: argparse.Namespace
) -> dict[Key, dict[str, float]]:
    """Start one server, run every load against it, print each result."""
    results: dict[Key, dict[str, float]] = {}
    server, url = start(command, env)
    try:
        for transport, rate in itertools.product(
            args.transports.split(","), map(float, args.rates.split(","))
        ):
            target = url if transport == "http" else url.replace("http", "ws", 1)
            r = results[(name, transport, rate)] = run_load(
                target, args.clients, args.prompts, rate
            )
            offered = f"at {rate:4.0f}/s" if rate else "closed  "
            print(
                f"  {name:9} {transport:4} {offered} "
                f"{r['prompts_per_s']:7.0f} prompts/s "
                f"{r['updates_per_s']:8.0f} events/s  p50 {r['p50_ms']:7.1f} ms  "
                f"p99 {r['p99_ms']:7.1f} ms  max {r['max_ms']:7.1f} ms",
                flush=True,
            )
        print(f"  {name:9} peak RSS {peak_rss_mib(server.pid):.0f} MiB", flush=True)
    finally:
        stop(server)
    return results


def summarize(rounds: list[dict[Key, dict[str, float]]]) -> None:
    """Medians over the rounds, and crow's closed-loop prompts/s over ts-echo's
    round by round (the servers of a round ran minutes apart, not hours)."""
    print(f"medians over {len(rounds)} rounds:")
    for key in rounds[0]:
        runs = [r[key] for r in rounds]
        median = {f: statistics.median(run[f] for run in runs) for f in runs[0]}
        name, transport, rate = key
        offered = f"at {rate:4.0f}/s" if rate else "closed  "
        print(
            f"  {name:9} {transport:4} {offered} {median['prompts_per_s']:7.0f} prompts/s"
            f"  p99 {median['p99_ms']:7.1f} ms"
        )
    for transport in {t for _, t, _ in rounds[0]}:
        crow, ts = ("crow", transport, 0.0), ("ts-echo", transport, 0.0)
        if crow in rounds[0] and ts in rounds[0]:
            ratios = [r[crow]["prompts_per_s"] / r[ts]["prompts_per_s"] for r in rounds]
            shown = " ".join(f"{x:.2f}" for x in ratios)
            middle = statistics.median(ratios)
            print(f"  crow / ts-echo {transport:4} closed: {shown} (median {middle:.2f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--prompts", type=int, default=10)
    parser.add_argument("--chunks", type=int, default=10)
    parser.add_argument("--only", default="crow,crow-echo,ts-echo")
    parser.add_argument("--transports", default="http,ws")
    parser.add_argument("--rates", default="0,50", help="offered prompts/s; 0: closed loop")
    parser.add_argument("--rounds", type=int, default=1, help="every server again, in turn")
    args = parser.parse_args()
    model, base_url = start_model(args.chunks)
    rounds: list[dict[Key, dict[str, float]]] = []
    try:
        with tempfile.TemporaryDirectory() as home:
            write_config(Path(home), base_url, extra="[tools]\nbuiltin = []\n")
            print(f"{args.clients} clients x {args.prompts} prompts, {args.chunks} chunks each")
            for round_number in range(1, args.rounds + 1):
                if args.rounds > 1:
                    print(f"round {round_number}")
                results: dict[Key, dict[str, float]] = {}
                for name, (command, env) in commands(args.chunks, home).items():
                    if name in args.only.split(","):
                        results.update(measure(name, command, env, args))
                rounds.append(results)
    finally:
        stop(model)
    if args.rounds > 1:
        summarize(rounds)


if __name__ == "__main__":
    main()
