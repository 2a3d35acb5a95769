"""Test support: paths and a raw-bytes agent subprocess (ACP-V2.md §2.3)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from queue import Empty, Queue
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
ECHO_AGENT = [sys.executable, str(ROOT / "examples" / "echo_agent.py")]
WAIT_S = 10.0


class RawAgent:
    """An agent subprocess driven line by line with raw bytes (ACP-V2.md §2.3)."""

    def __init__(self, argv: list[str]) -> None:
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.lines: Queue[bytes | None] = Queue()
        self.raw_stdout: list[bytes] = []
        threading.Thread(target=self._pump, daemon=True).start()
        self._next_id = 1000

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.raw_stdout.append(line)
            self.lines.put(line)
        self.lines.put(None)

    def write(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send(self, message: Any) -> None:
        self.write(json.dumps(message).encode() + b"\n")

    def recv(self, timeout: float = WAIT_S) -> Any:
        line = self.lines.get(timeout=timeout)
        if line is None:
            raise EOFError("the agent closed stdout")
        return json.loads(line)

    def nothing_within(self, seconds: float) -> bool:
        try:
            line = self.lines.get(timeout=seconds)
        except Empty:
            return True
        self.lines.put(line)
        return False

    def request(self, method: str, params: Any = None, **extra: Any) -> Any:
        """Send a request; return (response, notifications that came before it)."""
        self._next_id += 1
        rid = extra.get("id", self._next_id)
        msg: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            msg["params"] = params
        self.send(msg)
        return self.until_response(rid)

    def until_response(self, rid: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        before = []
        while True:
            msg = self.recv()
            if "method" not in msg and msg.get("id") == rid and type(msg.get("id")) is type(rid):
                return msg, before
            before.append(msg)

    def until_update(self, predicate: Any) -> list[dict[str, Any]]:
        """Notifications up to and including the first update matching ``predicate``."""
        seen = []
        while True:
            msg = self.recv()
            seen.append(msg)
            if msg.get("method") == "session/update" and predicate(msg["params"]["update"]):
                return seen

    def initialize(self) -> dict[str, Any]:
        response, _ = self.request(
            "initialize",
            {
                "protocolVersion": 2,
                "info": {"name": "raw-test", "version": "1"},
                "capabilities": {},
            },
        )
        return response

    def new_session(self, cwd: str = "/tmp") -> str:
        response, _ = self.request("session/new", {"cwd": cwd})
        return str(response["result"]["sessionId"])

    def close(self) -> int:
        if self.proc.stdin and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            return self.proc.wait(timeout=WAIT_S)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            for stream in (self.proc.stdout, self.proc.stderr):
                if stream:
                    stream.close()
