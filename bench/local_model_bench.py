"""The embedded model on each runtime: mistral.rs (the local extra) vs llama.cpp (llama).

    python bench/local_model_bench.py [--rounds 3] [--runtimes mistral.rs,llama.cpp]

The same GGUF file (SmolLM2-135M-Instruct, Q4_1) on each runtime installed,
each round in a fresh process per runtime, the runtimes alternating (A B A B:
this machine's speed drifts by half over minutes); medians over the rounds:

- load: making the runtime's model object from the file (checksum included);
- first token: a short question with the model loaded;
- tokens/s and CPU ms per token over a long reply (CPU counts every thread: a
  runtime that spins while it waits shows here);
- cancel: from closing a generation's stream (what a cancelled turn does) until
  the worker thread has stopped, and the CPU the process still used in the
  second after (mistral.rs generates on threads of its own: if the cancel did
  not reach them they would keep a core busy);
- tool call: the model declared with ``tools``, asked to read a file: whether
  the call is valid (the tool's name, JSON arguments with a ``path``), and how long;
- peak RSS of the process;
- cold ``crow run``: a new process with nothing configured, from spawn to its exit.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from crow.config import embedded_spec  # noqa: E402
from crow.extras import embedded_available  # noqa: E402
from crow.models.events import Finished, TextDelta, ToolCallDelta  # noqa: E402
from crow.models.local import RUNTIME_ENV, RUNTIMES, LocalModels  # noqa: E402

SHORT = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
LONG = [{"role": "user", "content": "Write a long story about a crow who learns to code."}]
READ = [{"role": "user", "content": "Use read_file to read /etc/os-release"}]
READ_FILE = {
    "type": "function",
    "function": {
        "name": "read_file",
        "description": "Read a text file and return its contents",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
        },
    },
}


def cpu() -> float:
    return time.process_time()


async def measure() -> dict[str, float]:
    """One round on the runtime CROW_LOCAL_RUNTIME names, in this process."""
    models = LocalModels()
    spec = embedded_spec()
    out: dict[str, float] = {}
    try:
        started = time.perf_counter()
        async for _ in models.stream(spec, [{"role": "user", "content": "Hi"}]):
            pass  # the load, and a first generation
        out["load_and_hi_s"] = time.perf_counter() - started

        started, first, answer = time.perf_counter(), 0.0, ""
        async for event in models.stream(spec, SHORT):
            if isinstance(event, TextDelta):
                first = first or time.perf_counter() - started
                answer += event.text
        out["first_token_ms"] = first * 1000
        out["paris"] = float("Paris" in answer)

        spec_long = dataclasses.replace(spec, max_output_tokens=200)
        started, first, tokens, cpu0 = time.perf_counter(), 0.0, 0, cpu()
        async for event in models.stream(spec_long, LONG):
            if isinstance(event, TextDelta):
                first = first or time.perf_counter()
            if isinstance(event, Finished):
                tokens = event.usage.completion_tokens
        out["tokens_per_s"] = (tokens - 1) / max(1e-9, time.perf_counter() - first)
        out["cpu_ms_per_token"] = 1000 * (cpu() - cpu0) / max(1, tokens)

        stream = models.stream(spec_long, LONG)
        async for event in stream:
            if isinstance(event, TextDelta):
                break
        started = time.perf_counter()
        await stream.aclose()  # returns once the worker thread has stopped
        out["cancel_ms"] = (time.perf_counter() - started) * 1000
        cpu0 = cpu()
        await asyncio.sleep(1.0)
        out["cpu_after_cancel_s"] = cpu() - cpu0

        tools = dataclasses.replace(spec, capabilities=frozenset({"tools"}))
        started, calls = time.perf_counter(), []
        async for event in models.stream(tools, READ, tools=[READ_FILE]):
            if isinstance(event, ToolCallDelta):
                calls.append(event)
        out["tool_call_s"] = time.perf_counter() - started
        valid = len(calls) == 1 and calls[0].name == "read_file"
        try:
            valid = valid and isinstance(json.loads(calls[0].arguments)["path"], str)
        except (ValueError, KeyError, IndexError):
            valid = False
        out["tool_call_valid"] = float(valid)
    finally:
        await models.aclose()
    out["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def cold_run(runtime: str) -> float:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_BASE_URL", "CROW_MODEL")}
    with tempfile.TemporaryDirectory() as home:
        env.update(CROW_HOME=home, **{RUNTIME_ENV: runtime})
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "crow", "run", SHORT[0]["content"]],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
            check=True,
        )
        return time.perf_counter() - started


def one_round(runtime: str) -> dict[str, float]:
    env = {**os.environ, RUNTIME_ENV: runtime}
    done = subprocess.run(
        [sys.executable, __file__, "--child"], env=env, capture_output=True, text=True, check=True
    )
    result: dict[str, float] = json.loads(done.stdout.splitlines()[-1])
    result["cold_crow_run_s"] = cold_run(runtime)
    return result


ROWS = [
    ("load + first reply, s", "load_and_hi_s", "{:.2f}"),
    ("first token, loaded, ms", "first_token_ms", "{:.0f}"),
    ("tokens/s, long reply", "tokens_per_s", "{:.1f}"),
    ("CPU ms per token", "cpu_ms_per_token", "{:.0f}"),
    ("cancel -> stopped, ms", "cancel_ms", "{:.1f}"),
    ("CPU in the 1 s after, s", "cpu_after_cancel_s", "{:.3f}"),
    ("tool call valid (share)", "tool_call_valid", "{:.2f}"),
    ("tool call, s", "tool_call_s", "{:.2f}"),
    ("answered Paris (share)", "paris", "{:.2f}"),
    ("peak RSS, MiB", "peak_rss_mib", "{:.0f}"),
    ("cold crow run, s", "cold_crow_run_s", "{:.2f}"),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runtimes", default=",".join(RUNTIMES))
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(asyncio.run(measure())))
        return
    if not embedded_available():
        sys.exit("the local extra is not installed: pip install -e '.[local]'")
    import importlib.util

    runtimes = [r for r in args.runtimes.split(",") if importlib.util.find_spec(RUNTIMES[r])]
    results: dict[str, list[dict[str, float]]] = {r: [] for r in runtimes}
    for round_ in range(args.rounds):
        for runtime in runtimes if round_ % 2 == 0 else reversed(runtimes):
            results[runtime].append(one_round(runtime))
            print(f"round {round_ + 1}: {runtime} done", file=sys.stderr)
    print(
        f"{'':26}" + "".join(f"{r:>12}" for r in runtimes) + f"   ({args.rounds} rounds, medians)"
    )
    for label, key, fmt in ROWS:
        cells = [fmt.format(statistics.median(x[key] for x in results[r])) for r in runtimes]
        print(f"{label:26}" + "".join(f"{c:>12}" for c in cells))


if __name__ == "__main__":
    main()
