"""The terminal server's state: foreground runs and background processes, and their results.

Owns what each tool does (``run``, ``start``, ``output``, ``stop``, ``list_processes``),
the background processes' ids and ring buffers, the text and ``_meta`` of every result,
and ending every group still alive at shutdown.  It does not own the MCP tool definitions
(``terminal``), spawning and killing (``_terminal_process``) nor output buffering
(``_terminal_output``).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context
from mcp_types import CallToolResult, TextContent

from ..extensions import (
    BACKGROUND,
    COMMAND,
    CWD,
    DROPPED,
    EXIT_CODE,
    MORE,
    NEXT,
    PID,
    PROCESS_ID,
    PROCESS_STATUS,
    PROCESSES,
    SIGNAL,
    TIMED_OUT,
    TRUNCATED,
)
from ._terminal_output import HeadTail, ProgressStream, decode, status_line, utf8_end, with_status
from ._terminal_process import Child, shielded, spawn, start_failure

Meta = dict[str, Any]


def _result(text: str, meta: Meta | None = None, *, error: bool = False) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=error, _meta=meta)


def _error(text: str) -> CallToolResult:
    return _result(text, error=True)


@dataclass
class _Background:
    id: str
    ring_bytes: int  # how much of its latest output is kept
    child: Child | None = None
    ring: bytearray = field(default_factory=bytearray)
    total: int = 0
    read_to: int = 0  # how far output/stop have shown it

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        self.ring += chunk
        if len(self.ring) > self.ring_bytes:
            del self.ring[: len(self.ring) - self.ring_bytes]

    @property
    def start(self) -> int:
        return self.total - len(self.ring)

    def fields(self) -> Meta:
        assert self.child is not None
        code, sig = self.child.status()
        return {
            PROCESS_ID: self.id,
            PID: self.child.pid,
            COMMAND: self.child.command,
            CWD: str(self.child.cwd),
            PROCESS_STATUS: "running" if self.child.running else "exited",
            EXIT_CODE: code,
            SIGNAL: sig,
        }


class Terminal:
    def __init__(
        self,
        cwd: Path,
        default_timeout_s: float,
        max_output_bytes: int,
        *,
        shell: str,
        ring_bytes: int,
    ) -> None:
        self.cwd = cwd.resolve()
        self.default_timeout_s = default_timeout_s
        self.max_output_bytes = max(max_output_bytes, 2)
        self.shell = shell
        self.ring_bytes = ring_bytes
        self.background: dict[str, _Background] = {}
        self.foreground: set[Child] = set()
        self._counter = 0

    def workdir(self, cwd: str | None) -> Path | CallToolResult:
        try:
            path = self.cwd if cwd is None else (self.cwd / cwd).resolve()
            exists = path.exists()
        except (OSError, ValueError) as exc:
            return _error(f"The working directory {cwd!r} is not usable: {exc}.")
        if not exists:
            return _error(f"The working directory {path} does not exist.")
        if not path.is_dir():
            return _error(f"The working directory {path} is not a directory.")
        return path

    # -- run

    async def run(
        self, command: str, timeout_s: float | None, cwd: str | None, ctx: Context
    ) -> CallToolResult:
        workdir = self.workdir(cwd)
        if isinstance(workdir, CallToolResult):
            return workdir
        timeout = self.default_timeout_s if timeout_s is None else timeout_s
        if timeout <= 0:
            return _error(f"timeout_s must be positive, not {timeout_s}.")
        capture = HeadTail(self.max_output_bytes)
        stream = ProgressStream(ctx)

        def on_chunk(chunk: bytes) -> None:
            capture.add(chunk)
            stream.feed(chunk)

        try:
            child = await spawn(command, workdir, on_chunk, shell=self.shell)
        except (OSError, ValueError) as exc:
            await stream.close(flush=False)
            return _error(start_failure(exc))
        self.foreground.add(child)
        timed_out = False
        try:
            try:
                await asyncio.wait_for(child.wait_leader(), timeout)
            except TimeoutError:
                timed_out = True
            # Ends the group on a timeout, and whatever the command left behind otherwise.
            await child.terminate()
            await child.finish()
            await stream.close(flush=True)
        except BaseException:  # cancelled (or worse): no process may outlive the call
            await shielded(self._abandon(child, stream))
            raise
        finally:
            self.foreground.discard(child)

        code, sig = child.status()
        status = f"[killed after timeout of {timeout:g} s]" if timed_out else status_line(code, sig)
        meta: Meta = {
            COMMAND: command,
            CWD: str(workdir),
            EXIT_CODE: code,
            SIGNAL: sig,
            TIMED_OUT: timed_out,
            TRUNCATED: capture.omitted > 0,
        }
        return _result(with_status(capture.text(), status), meta)

    async def _abandon(self, child: Child, stream: ProgressStream) -> None:
        await stream.close(flush=False)
        await child.terminate()
        await child.finish()

    # -- background

    async def start(self, command: str, cwd: str | None) -> CallToolResult:
        workdir = self.workdir(cwd)
        if isinstance(workdir, CallToolResult):
            return workdir
        self._counter += 1
        entry = _Background(id=f"bg_{self._counter}", ring_bytes=self.ring_bytes)
        try:
            entry.child = await spawn(command, workdir, entry.add, shell=self.shell)
        except (OSError, ValueError) as exc:
            return _error(start_failure(exc))
        self.background[entry.id] = entry
        meta: Meta = {
            PROCESS_ID: entry.id,
            PID: entry.child.pid,
            COMMAND: command,
            CWD: str(workdir),
            BACKGROUND: entry.id,  # it runs on after this call: a host may watch it
        }
        return _result(f"Started {entry.id} (pid {entry.child.pid}): {command}", meta)

    def _lookup(self, id: str) -> _Background | CallToolResult:
        entry = self.background.get(id)
        if entry is not None:
            return entry
        known = ", ".join(self.background) or "none"
        return _error(f"There is no background process with id {id!r} (known: {known}).")

    def _slice(self, entry: _Background, since: int, limit: int) -> tuple[bytes, int, int]:
        """(bytes from ``since``, bytes asked for but gone, the cursor after them)."""
        since = max(0, min(since, entry.total))
        dropped = max(0, entry.start - since)
        begin = max(since, entry.start) - entry.start
        end = min(len(entry.ring), begin + limit)
        end = utf8_end(entry.ring, end) if end < len(entry.ring) else end
        if end <= begin and begin < len(entry.ring):
            end = min(len(entry.ring), begin + limit)
        data = bytes(entry.ring[begin:end])
        return data, dropped, entry.start + end

    def output(self, id: str, since: int) -> CallToolResult:
        entry = self._lookup(id)
        if isinstance(entry, CallToolResult):
            return entry
        assert entry.child is not None
        data, dropped, cursor = self._slice(entry, since, self.max_output_bytes)
        entry.read_to = max(entry.read_to, cursor)
        more = entry.total - cursor
        parts = []
        if dropped:
            parts.append(f"[... {dropped} earlier bytes are no longer kept ...]\n")
        parts.append(decode(data))
        text = "".join(parts)
        if more:
            text = with_status(text, f"[... {more} more bytes: call output with since={cursor}]")
        code, sig = entry.child.status()
        text = with_status(text, status_line(code, sig, running=entry.child.running))
        meta = entry.fields() | {NEXT: cursor, DROPPED: dropped, MORE: more}
        return _result(text, meta)

    async def stop(self, id: str) -> CallToolResult:
        entry = self._lookup(id)
        if isinstance(entry, CallToolResult):
            return entry
        assert entry.child is not None
        await shielded(self._end(entry.child))
        rest = HeadTail(self.max_output_bytes)
        data, dropped, cursor = self._slice(entry, entry.read_to, entry.total)
        rest.add(data)
        entry.read_to = cursor
        text = f"[... {dropped} earlier bytes are no longer kept ...]\n" if dropped else ""
        text += rest.text()
        code, sig = entry.child.status()
        meta = entry.fields() | {NEXT: cursor, TRUNCATED: rest.omitted > 0}
        return _result(with_status(text, status_line(code, sig)), meta)

    def list_processes(self) -> CallToolResult:
        rows = [entry.fields() for entry in self.background.values()]
        lines = []
        for row in rows:
            if row[PROCESS_STATUS] == "running":
                state = "running"
            else:
                state = status_line(row[EXIT_CODE], row[SIGNAL]).strip("[]")
            lines.append(f"{row[PROCESS_ID]}  pid {row[PID]}  {state}  {row[COMMAND]}")
        text = "\n".join(lines) if lines else "No background processes."
        return _result(text, {PROCESSES: rows})

    async def _end(self, child: Child) -> None:
        await child.terminate()
        await child.finish()

    async def shutdown(self) -> None:
        """End every process group this server started (the lifespan's end)."""
        children = [e.child for e in self.background.values() if e.child is not None]
        children += list(self.foreground)
        if children:
            await asyncio.gather(*(self._end(child) for child in children))
