"""Test support: paths and a raw-bytes agent subprocess (ACP-V2.md §2.3)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from queue import Empty, Queue
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
ECHO_AGENT = [sys.executable, str(ROOT / "examples" / "echo_agent.py")]
#: How long an agent may take to send its next message (or exit): a hang's deadline.  A
#: first tool turn on a loaded two-core machine (tool servers starting) took over 10 s.
WAIT_S = 30.0
#: Lines of an agent's stderr shown in the error that reports it stuck.
STDERR_TAIL = 400


class RawAgent:
    """An agent subprocess driven line by line with raw bytes (ACP-V2.md §2.3)."""

    def __init__(self, argv: list[str]) -> None:
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            # A Python agent stuck at exit is sent SIGABRT: it dumps every thread's
            # stack to stderr first (see close).
            env={**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONFAULTHANDLER": "1"},
        )
        self.lines: Queue[bytes | None] = Queue()
        self.raw_stdout: list[bytes] = []
        # stderr is read as it comes: an agent that logs more than a pipe holds
        # would otherwise block on its next log line.
        self.stderr_lines: list[bytes] = []
        self._stderr_pump = threading.Thread(target=self._pump_stderr, daemon=True)
        threading.Thread(target=self._pump, daemon=True).start()
        self._stderr_pump.start()
        self._next_id = 1000

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.raw_stdout.append(line)
            self.lines.put(line)
        self.lines.put(None)

    def _pump_stderr(self) -> None:
        assert self.proc.stderr is not None
        with self.proc.stderr:
            for line in self.proc.stderr:
                self.stderr_lines.append(line)

    def stderr_text(self, tail: int | None = None) -> str:
        """The agent's stderr so far (all of it once the agent has exited), or its
        last ``tail`` lines."""
        if self.proc.poll() is not None:
            self._stderr_pump.join(timeout=2)  # unless a child of it holds stderr open
        return b"".join(self.stderr_lines[-tail if tail else 0 :]).decode(errors="replace")

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
        """Close the agent's stdin and wait for its exit code.  An agent that does
        not exit fails the test with the stack of each of its threads."""
        if self.proc.stdin and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            return self.proc.wait(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            self.proc.send_signal(signal.SIGABRT)  # faulthandler: the stacks to stderr
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=WAIT_S)
            raise AssertionError(
                f"the agent did not exit within {WAIT_S:.0f} s of its stdin closing;"
                f" its stderr ends:\n{self.stderr_text(STDERR_TAIL)}"
            ) from None
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            if self.proc.stdout:
                self.proc.stdout.close()
