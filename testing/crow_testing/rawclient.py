"""A thin ACP client for benchmarks: raw JSON lines, no validation, little bookkeeping.

It measures agents, not clients: what it does per message is a ``json.loads`` and
a dictionary lookup.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

__all__ = ["RawClient"]


class RawClient:
    """Newline JSON over a subprocess's pipes, with just enough bookkeeping."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.next_id = 0
        self.waiting: dict[int, asyncio.Future[Any]] = {}
        self.idle: dict[str, asyncio.Future[None]] = {}
        self.running: set[str] = set()
        self.updates = 0
        self.reader = asyncio.create_task(self.read())

    async def read(self) -> None:
        assert self.proc.stdout is not None
        while line := await self.proc.stdout.readline():
            msg = json.loads(line)
            if "method" in msg:
                self.updates += 1
                params = msg["params"]
                update = params["update"]
                if update["sessionUpdate"] == "state_update":
                    sid = params["sessionId"]
                    if update["state"] == "running":
                        self.running.add(sid)
                    elif update["state"] == "idle" and sid in self.running:
                        self.running.discard(sid)
                        future = self.idle.pop(sid, None)
                        if future is not None:
                            future.set_result(None)
            else:
                self.waiting.pop(msg["id"]).set_result(msg)

    async def initialize(self) -> Any:
        return await self.request(
            "initialize", {"protocolVersion": 2, "info": {"name": "bench", "version": "0"}}
        )

    async def request(self, method: str, params: dict[str, Any]) -> Any:
        self.next_id += 1
        future = asyncio.get_running_loop().create_future()
        self.waiting[self.next_id] = future
        assert self.proc.stdin is not None
        msg = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}
        self.proc.stdin.write(json.dumps(msg).encode() + b"\n")
        reply = await future
        if "error" in reply:
            raise RuntimeError(reply["error"])
        return reply["result"]

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        msg = {"jsonrpc": "2.0", "method": method, "params": params}
        self.proc.stdin.write(json.dumps(msg).encode() + b"\n")

    async def run_prompt(self, sid: str, text: str = "benchmark " * 20) -> float:
        """Seconds from sending the prompt to its idle."""
        started = time.perf_counter()
        done = asyncio.get_running_loop().create_future()
        self.idle[sid] = done
        await self.request(
            "session/prompt",
            {"sessionId": sid, "prompt": [{"type": "text", "text": text}]},
        )
        await done
        return time.perf_counter() - started
