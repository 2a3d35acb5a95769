"""Two versions of Crow side by side: CPU per prompt under the same load, at once.

    python bench/paired_cpu.py BASE [OTHER] [--rounds 8] [--clients 50]
                               [--prompts 60] [--transport ws] [--chunks 10]
                               [--pg-url postgresql://user@host/db]

BASE and OTHER are git revisions (OTHER left out: the work tree as it is).
Each round starts both as ``crow serve --http`` against one zero-latency model
server (``bench/zero_model.py``), loads both at the same time with
``bench/http_load.py`` (closed loop, each its own clients), and reads each
server's CPU time (all its threads) over its load.  The sides swap every round.
Reported per round: CPU ms per prompt of each, and OTHER over BASE; then the
median ratio.

Why at the same time: this machine's speed drifts by up to 2x within minutes,
so runs one after another differ by more than most changes do (ten A/B pairs
of one change gave ratios from 0.86 to 1.21).  Two servers loaded at once share
whatever speed the machine has: with the same code on both sides, each round's
ratio stays within 5% of 1, and the median of 8 rounds within 1% (of 4 rounds,
within 5%: take 8 or more to judge a change of a few per cent).

``--pg-url`` (a maintenance database) puts each side's sessions in a PostgreSQL
database of its own, made and dropped per round; where that server runs on this
machine, the CPU of each side's PostgreSQL backends is counted too (and the ratio
is of the two together).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for extra in ("src", "testing"):
    sys.path.insert(0, str(ROOT / extra))

from cluster_bench import Database  # noqa: E402
from crow_testing.serve_support import write_config  # noqa: E402
from http_bench import start, start_model, stop  # noqa: E402

TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """User + system CPU time of a process so far (every thread)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS_PER_S


@contextlib.contextmanager
def source_tree(revision: str | None) -> Iterator[Path]:
    """The ``src`` folder of ``revision``, or of the work tree as it is (changes and
    new files), in a temporary worktree: both sides then run from fresh copies (a
    side run from the work tree itself measured 5% cheaper than its own copy)."""
    with tempfile.TemporaryDirectory() as folder:
        tree = Path(folder) / "tree"
        commit = revision or _snapshot(Path(folder) / "index")
        git = ["git", "-C", str(ROOT), "worktree"]
        subprocess.run([*git, "add", "--detach", "-q", str(tree), commit], check=True)
        try:
            yield tree / "src"
        finally:
            subprocess.run([*git, "remove", "--force", str(tree)], check=True)


def _snapshot(index: Path) -> str:
    """A commit (in no branch) of the work tree as it is, made with a scratch index."""
    env = {**os.environ, "GIT_INDEX_FILE": str(index)}

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", "-C", str(ROOT), *args], env=env, check=True, capture_output=True, text=True
        )
        return done.stdout.strip()

    git("read-tree", "HEAD")
    git("add", "-A")
    return git("commit-tree", git("write-tree"), "-p", "HEAD", "-m", "work tree")


def serve(
    src: Path, home: Path, model_url: str, store_url: str | None
) -> tuple[subprocess.Popen[str], str]:
    write_config(home, model_url, extra="[tools]\nbuiltin = []\n")
    env = {**os.environ, "CROW_HOME": str(home), "PYTHONPATH": str(src)}
    if store_url:
        env["CROW_STORE_URL"] = store_url
    return start([sys.executable, "-m", "crow", "serve", "--http", "127.0.0.1:0"], env)


def backends_cpu_s(admin_url: str, store_url: str | None) -> float:
    """CPU time so far of the PostgreSQL backends serving ``store_url``'s database,
    where they run on this machine (0 where they do not, or for no database)."""
    if store_url is None:
        return 0.0
    import psycopg

    name = store_url.rpartition("/")[2]
    with psycopg.connect(admin_url, autocommit=True) as admin:
        pids = admin.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s", (name,))
        spent = 0.0
        for (pid,) in pids.fetchall():
            with contextlib.suppress(OSError):
                spent += cpu_s(pid)
    return spent


def load(url: str, args: argparse.Namespace) -> subprocess.Popen[str]:
    command = [sys.executable, str(ROOT / "bench" / "http_load.py"), url]
    command += ["--clients", str(args.clients), "--prompts", str(args.prompts)]
    return subprocess.Popen(command, stdout=subprocess.PIPE, text=True)


def one_round(
    sources: list[Path], model_url: str, args: argparse.Namespace
) -> list[tuple[float, float]]:
    """CPU ms per prompt of each source tree (the server's, its PostgreSQL backends'),
    loaded at the same time."""
    with contextlib.ExitStack() as stack:
        folder = stack.enter_context(tempfile.TemporaryDirectory())
        stores = [
            stack.enter_context(Database(args.pg_url)) if args.pg_url else None for _ in sources
        ]
        servers = [
            serve(src, Path(folder) / str(n), model_url, store)
            for n, (src, store) in enumerate(zip(sources, stores, strict=True))
        ]
        try:
            before = [cpu_s(server.pid) for server, _ in servers]
            pg_before = [backends_cpu_s(args.pg_url, store) for store in stores]
            loads = [load(url.replace("http", args.transport, 1), args) for _, url in servers]
            outputs = [process.communicate(timeout=900)[0] for process in loads]
            spent = [cpu_s(server.pid) - b for (server, _), b in zip(servers, before, strict=True)]
            pg_spent = [
                backends_cpu_s(args.pg_url, store) - b
                for store, b in zip(stores, pg_before, strict=True)
            ]
        finally:
            for server, _ in servers:
                stop(server)
    prompts = [json.loads(out.strip().splitlines()[-1])["prompts"] for out in outputs]
    return [
        (1000 * s / n, 1000 * pg / n) for s, pg, n in zip(spent, pg_spent, prompts, strict=True)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base")
    parser.add_argument("other", nargs="?", help="a revision; the work tree when left out")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--clients", type=int, default=50, help="per server")
    parser.add_argument("--prompts", type=int, default=60, help="per client")
    parser.add_argument("--transport", choices=["ws", "http"], default="ws")
    parser.add_argument("--chunks", type=int, default=10)
    parser.add_argument("--pg-url", help="a maintenance database: each side on PostgreSQL")
    args = parser.parse_args()
    other_name = args.other or "work tree"
    model, model_url = start_model(args.chunks)
    ratios = []
    try:
        with source_tree(args.base) as base, source_tree(args.other) as other:
            print(f"{args.clients} clients x {args.prompts} prompts on each, {args.transport}")
            for number in range(args.rounds):
                swapped = number % 2 == 1
                sides = [other, base] if swapped else [base, other]
                cost = one_round(sides, model_url, args)
                (base_ms, base_pg), (other_ms, other_pg) = reversed(cost) if swapped else cost
                ratios.append((other_ms + other_pg) / (base_ms + base_pg))
                print(
                    f"  round {number + 1}: {args.base} {base_ms:.3f}{_pg(base_pg)} ms/prompt, "
                    f"{other_name} {other_ms:.3f}{_pg(other_pg)} ms/prompt: {ratios[-1]:.3f}",
                    flush=True,
                )
    finally:
        stop(model)
    print(f"{other_name} / {args.base}, CPU per prompt: median {statistics.median(ratios):.3f}")


def _pg(ms: float) -> str:
    return f" + PostgreSQL {ms:.3f}" if ms else ""


if __name__ == "__main__":
    main()
