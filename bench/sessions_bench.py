"""``crow sessions`` on a home with many sessions: the whole command, as a person waits.

    python bench/sessions_bench.py [--sessions 100] [--rounds 7]

Makes a fresh home whose store holds N sessions (each with a title and a few
logged updates, some of them judge sessions), then runs, alternately, ``crow
sessions`` (which reads the store itself) and ``crow sessions --command "crow
serve"`` (the same list through an agent started to ask, as before), and prints
the median, min and max wall time of each.  Target: under 0.5 s for 100 sessions.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from crow.store.db import SqliteStore  # noqa: E402


def fill(home: Path, count: int) -> None:
    home.mkdir(mode=0o700)
    store = SqliteStore(home / "crow.db")
    try:
        for n in range(count):
            sid = f"sess_{n:016x}"
            config = {"judgeOf": f"sess_{n - 1:016x}"} if n % 10 == 9 else {}
            stamp = f"2026-12-01T10:{n // 60:02d}:{n % 60:02d}.000Z"
            store.create_session(session_id=sid, cwd="/tmp", now=stamp, config=config)
            store.update_session(sid, title=f"a session about topic {n}")
            for _ in range(5):
                store.append_update(sid, b'{"sessionUpdate":"agent_message_chunk"}')
    finally:
        store.close()


def timed(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=7)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        fill(home, options.sessions)
        env = {**os.environ, "CROW_HOME": str(home), "PYTHONPATH": str(ROOT / "src")}
        crow = [sys.executable, "-m", "crow", "sessions", "--limit", "0"]
        serve = f"{sys.executable} -m crow serve"
        ways = {
            "crow sessions (the store)": crow,
            "... --command crow serve": [*crow, "--command", serve],
        }
        for argv in ways.values():
            timed(argv, env)  # warm-up: byte-compiled, in the page cache
        times: dict[str, list[float]] = {name: [] for name in ways}
        for _ in range(options.rounds):
            for name, argv in ways.items():
                times[name].append(timed(argv, env))
    print(f"{options.sessions} sessions, {options.rounds} rounds, wall seconds")
    print(f"{'':30} {'median':>8} {'min':>8} {'max':>8}")
    for name, found in times.items():
        print(f"{name:30} {statistics.median(found):8.3f} {min(found):8.3f} {max(found):8.3f}")


if __name__ == "__main__":
    main()
