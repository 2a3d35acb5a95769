"""The embedded model (the local extra): cold start, speed, and how fast a cancel bites.

    python bench/local_model_bench.py [--runs 5]

- cold start: a new ``crow run`` process with nothing configured and no model
  server, from spawn to the first byte of the reply on stdout (the ollama probe,
  loading the GGUF file and the first token included), and to its exit;
- in process, the model already loaded: time to the first token, and tokens/s
  over a long reply;
- cancel: from closing a generation's stream (what a cancelled turn does) until
  the model's worker thread has stopped, and how many tokens it made meanwhile;
- the same with a tool on offer (the model declared with ``tools``): a tool
  call is generated in one piece, and a cancel 0.3 s into it, once its prompt
  is cached, must still bite.  (Evaluating a prompt is one llama.cpp call that
  nothing stops: a cancel during it waits for it, tools or not.)
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from crow.config import embedded_spec  # noqa: E402
from crow.models.events import Finished, TextDelta  # noqa: E402
from crow.models.local import LocalModels, embedded_available  # noqa: E402

LONG = [{"role": "user", "content": "Count from 1 to 300, one number per line."}]
ESSAY = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Use write_file to write a 500-word essay on crows to crows.md"},
]
WRITE_FILE = {
    "type": "function",
    "function": {
        "name": "write_file",
        "description": "Write text to a file",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string"}, "text": {"type": "string"}},
            "required": ["path", "text"],
        },
    },
}


def cold_start() -> tuple[float, float]:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_BASE_URL", "CROW_MODEL")}
    with tempfile.TemporaryDirectory() as home:
        env["CROW_HOME"] = home
        started = time.perf_counter()
        process = subprocess.Popen(
            [sys.executable, "-m", "crow", "run", "Say hello."],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        assert process.stdout is not None
        process.stdout.read(1)
        first = time.perf_counter() - started
        process.stdout.read()
        assert process.wait() == 0
        return first, time.perf_counter() - started


async def speed(models: LocalModels) -> tuple[float, float]:
    started = time.perf_counter()
    first, tokens = 0.0, 0
    async for event in models.stream(embedded_spec(), LONG):
        if isinstance(event, TextDelta):
            first = first or time.perf_counter() - started
        if isinstance(event, Finished) and event.usage:
            tokens = event.usage.completion_tokens
    return first, tokens / (time.perf_counter() - started - first)


async def cancel(models: LocalModels) -> tuple[float, int]:
    stream = models.stream(embedded_spec(), LONG)
    async for event in stream:
        if isinstance(event, TextDelta):
            break
    loaded = next(iter(models._loaded.values()))
    before = loaded.llm.n_tokens
    started = time.perf_counter()
    await stream.aclose()  # returns once the worker thread has stopped
    return time.perf_counter() - started, loaded.llm.n_tokens - before


async def cancel_tool_call(models: LocalModels) -> tuple[float, int]:
    spec = dataclasses.replace(embedded_spec(), capabilities=frozenset({"tools"}))
    loaded = next(iter(models._loaded.values()))

    async def call() -> None:
        async for _ in models.stream(spec, ESSAY, tools=[WRITE_FILE]):
            pass

    await call()  # once whole: its prompt is then cached (evaluating one is not stoppable)
    task = asyncio.create_task(call())
    await asyncio.sleep(0.3)  # into the call's arguments
    before = loaded.llm.n_tokens
    started = time.perf_counter()
    task.cancel()  # returns once the worker thread has stopped
    await asyncio.gather(task, return_exceptions=True)
    return time.perf_counter() - started, loaded.llm.n_tokens - before


async def in_process(runs: int) -> None:
    models = LocalModels()
    try:
        await speed(models)  # load the model once
        firsts, rates, cancels, extra, tool_cancels = [], [], [], [], []
        for _ in range(runs):
            first, rate = await speed(models)
            firsts.append(first * 1000)
            rates.append(rate)
            took, tokens = await cancel(models)
            cancels.append(took * 1000)
            extra.append(tokens)
            took, _ = await cancel_tool_call(models)
            tool_cancels.append(took * 1000)
    finally:
        await models.aclose()
    print(f"first token, model loaded : median {statistics.median(firsts):6.1f} ms")
    print(f"tokens/s, long reply      : median {statistics.median(rates):6.1f}")
    print(
        f"cancel -> thread stopped  : median {statistics.median(cancels):6.1f} ms, "
        f"max {max(cancels):.1f} ms; tokens made meanwhile: max {max(extra)}"
    )
    print(
        f"cancel a tool call        : median {statistics.median(tool_cancels):6.1f} ms, "
        f"max {max(tool_cancels):.1f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    if not embedded_available():
        sys.exit("the local extra is not installed: pip install -e '.[local]'")
    colds = [cold_start() for _ in range(args.runs)]
    print(
        f"cold crow run -> first byte: median {statistics.median(c[0] for c in colds):.2f} s; "
        f"-> exit: median {statistics.median(c[1] for c in colds):.2f} s ({args.runs} runs)"
    )
    asyncio.run(in_process(args.runs))


if __name__ == "__main__":
    main()
