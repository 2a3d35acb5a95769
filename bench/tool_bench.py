"""What Crow adds to one MCP tool call, over the bare MCP round trip.

    python bench/tool_bench.py [--calls 200]

Bare: an ``mcp`` client calls the tool directly (the built-in fs server
in-process, and tests/mcp_probe.py over stdio).  Through Crow: ``crow serve``
runs the same tool for a scripted model; the time is what an ACP client sees
between the call's ``in_progress`` and ``completed`` updates (the permission
check, the MCP call, the ACP updates and their store writes; not the model).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for extra in ("src", "testing", "bench"):
    sys.path.insert(0, str(ROOT / extra))

from crow_testing.fakemodel import ScriptedModel, Text, ToolCalls  # noqa: E402
from crow_testing.serve_support import write_config  # noqa: E402

PROBE = [sys.executable, str(ROOT / "tests" / "mcp_probe.py")]


async def bare(target: Any, tool: str, args: dict[str, Any], calls: int) -> list[float]:
    from mcp import Client

    timings = []
    async with Client(target) as client:
        for _ in range(calls + 10):
            started = time.perf_counter()
            await client.call_tool(tool, args)
            timings.append(time.perf_counter() - started)
    return timings[10:]


async def through_crow(
    home: str, model: ScriptedModel, tool: str, args: dict[str, Any], calls: int
) -> list[float]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "crow",
        "serve",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "CROW_HOME": home},
        limit=1 << 26,
    )
    assert proc.stdin is not None and proc.stdout is not None
    stdin, stdout = proc.stdin, proc.stdout
    next_id = 0

    def send(method: str, params: dict[str, Any]) -> int:
        nonlocal next_id
        next_id += 1
        stdin.write(
            json.dumps(
                {"jsonrpc": "2.0", "id": next_id, "method": method, "params": params}
            ).encode()
            + b"\n"
        )
        return next_id

    async def until(predicate: Any) -> dict[str, Any]:
        while True:
            message = json.loads(await stdout.readline())
            if predicate(message):
                return message

    send("initialize", {"protocolVersion": 2, "info": {"name": "bench", "version": "0"}})
    await until(lambda m: m.get("id") == 1)
    rid = send("session/new", {"cwd": str(ROOT)})
    sid = (await until(lambda m: m.get("id") == rid))["result"]["sessionId"]
    timings = []
    for i in range(calls + 10):
        model.script(ToolCalls(calls=[(tool, args)]), Text(text="ok"))
        send("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "go"}]})
        started = None
        while True:
            message = json.loads(await stdout.readline())
            now = time.perf_counter()
            update = message.get("params", {}).get("update", {})
            status = update.get("status")
            if status == "in_progress":
                started = now
            elif status in ("completed", "failed") and started is not None:
                if i >= 10:
                    timings.append(now - started)
            elif update.get("state") == "idle" and update.get("stopReason"):
                break
    stdin.close()
    await proc.wait()
    return timings


def describe(values: list[float]) -> str:
    return f"p50 {statistics.median(values) * 1000:6.2f} ms"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()

    from mcp.client.stdio import StdioServerParameters

    from crow.servers.fs import build_server
    from crow.servers.roots import Roots

    fs_args = {"path": "README.md", "limit": 5}
    probe_args = {"text": "ping"}
    bare_fs = await bare(build_server(Roots(cwd=ROOT, extra=())), "read", fs_args, args.calls)
    bare_probe = await bare(
        StdioServerParameters(command=PROBE[0], args=PROBE[1:]), "echo", probe_args, args.calls
    )
    with ScriptedModel() as model, tempfile.TemporaryDirectory() as home:
        probe = (
            f'[tools]\nbuiltin = ["fs"]\n\n[permissions]\nyolo = true\n\n'
            f'[mcp.servers.probe]\ncommand = "{PROBE[0]}"\nargs = ["{PROBE[1]}"]\n'
        )
        write_config(Path(home), model.base_url, extra=probe)
        crow_fs = await through_crow(home, model, "fs__read", fs_args, args.calls)
        crow_probe = await through_crow(home, model, "probe__echo", probe_args, args.calls)
    print(f"one tool call, {args.calls} calls each")
    for name, bare_t, crow_t in (
        ("fs read (in-process)", bare_fs, crow_fs),
        ("probe echo (stdio)", bare_probe, crow_probe),
    ):
        overhead = statistics.median(crow_t) - statistics.median(bare_t)
        print(
            f"  {name:22} bare MCP {describe(bare_t)}   through crow {describe(crow_t)}   "
            f"crow adds {overhead * 1000:.2f} ms"
        )


if __name__ == "__main__":
    asyncio.run(main())
