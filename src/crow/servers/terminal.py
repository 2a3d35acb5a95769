"""The built-in terminal MCP server: run shell commands, in the foreground or the background.

Every command runs as ``/bin/sh -c COMMAND`` in a process group of its own
(``start_new_session``), with stdin from ``/dev/null`` and stderr merged into stdout.  A
group is always ended the same way: SIGTERM to the whole group, then SIGKILL to it after
a 2 s grace.  That happens on a timeout, on ``stop``, when a ``run`` call is cancelled
(before the cancellation is re-raised, so no process outlives the call), when a ``run``
command exits but leaves processes behind, and, for every group still alive, when the
server's lifespan ends.

Tools (``_meta["crow/kind"]`` in brackets):

- ``run(command, timeout_s?, cwd?)`` [execute]: run to completion.  While it runs, each
  piece of output is sent at once (pieces are coalesced over at most ~50 ms) as an MCP
  progress notification: ``progress`` is the byte count so far, ``message`` the text
  (UTF-8, errors replaced; a character split between reads is kept whole).  The result
  is the output (head and tail kept around ``[... N bytes of output truncated ...]`` when
  longer than ``max_output_bytes``), then ``[exit code N]``, ``[killed after timeout of S
  s]`` or ``[terminated by signal N]``.  ``isError`` only when the command could not start.
  ``_meta``: ``crow/command``, ``crow/cwd`` (absolute), ``crow/exitCode`` (int | None),
  ``crow/signal`` ("SIGTERM" | None), ``crow/timedOut``, ``crow/truncated``.
- ``start(command, cwd?)`` [execute]: a background process ``bg_N``; its output goes to a
  ring buffer holding the last 1 MiB.  ``_meta``: ``crow/id``, ``crow/pid``,
  ``crow/command``, ``crow/cwd``.
- ``output(id, since=0)`` [read]: output from byte offset ``since`` (at most
  ``max_output_bytes`` per call) and the status.  ``_meta``: the process fields below plus
  ``crow/next`` (the cursor for the next call), ``crow/dropped`` (bytes before the
  buffer's start that were asked for but are gone) and ``crow/more`` (bytes still unread).
- ``stop(id)`` [execute]: end the group; the output not yet read and the final status.
- ``list_processes()`` [read]: ``_meta["crow/processes"]``, a list of the process fields.

Process fields: ``crow/id``, ``crow/pid``, ``crow/command``, ``crow/cwd``, ``crow/status``
("running" | "exited"), ``crow/exitCode``, ``crow/signal``.

A ``_meta`` key whose value is None does not reach the client: mcp 2.x serializes results
with ``exclude_none``, so an absent key means null.  A burst of more than 1 MiB of output
between two progress notifications is streamed as its last 512 KiB after a
``[... N bytes not streamed ...]`` line (the result is unaffected).

Run alone: ``python -m crow.servers.terminal [--cwd DIR] [--timeout S]`` (stdio).
"""

from __future__ import annotations

import argparse
import asyncio
import codecs
import inspect
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field

from ._stdio import run_stdio

__all__ = ["build_server", "main"]

logger = logging.getLogger(__name__)

SHELL = "/bin/sh"
#: SIGTERM first; SIGKILL to the group this long after.
KILL_GRACE_S = 2.0
#: Progress notifications are coalesced over at most this long.
COALESCE_S = 0.05
#: One read from the pipe.
READ_SIZE = 64 * 1024
#: Output waiting to be streamed beyond this (a slow client) is dropped, with a note.
MAX_PENDING_PROGRESS = 1024 * 1024
#: A background process keeps this much of its latest output.
RING_BYTES = 1024 * 1024
#: After a group is gone, how long a pipe held open by an escaped process is waited for.
DRAIN_S = 1.0

Meta = dict[str, Any]


def _result(text: str, meta: Meta | None = None, *, error: bool = False) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=error, _meta=meta)


def _error(text: str) -> CallToolResult:
    return _result(text, error=True)


# -- process groups -----------------------------------------------------------------------


def _group_alive(pgid: int) -> bool:
    """Whether any process of group ``pgid`` still runs (zombies do not count)."""
    try:
        names = os.listdir("/proc")
    except OSError:  # no procfs: ask the kernel, zombies included
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 2 and fields[0] != b"Z" and int(fields[2]) == pgid:
            return True
    return False


def _killpg(pgid: int, sig: signal.Signals) -> None:
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"SIG{number}"


class _Child:
    """One ``/bin/sh -c`` process group, its output pipe read by a task into ``on_chunk``."""

    def __init__(
        self,
        proc: asyncio.subprocess.Process,
        command: str,
        cwd: Path,
        on_chunk: Callable[[bytes], None],
    ) -> None:
        self.proc = proc
        self.pid = proc.pid
        self.pgid = proc.pid  # start_new_session: the shell leads its own group
        self.command = command
        self.cwd = cwd
        self._on_chunk = on_chunk
        self.eof = asyncio.Event()
        self._reader = asyncio.create_task(self._read(), name=f"terminal-read-{self.pid}")

    @classmethod
    async def spawn(cls, command: str, cwd: Path, on_chunk: Callable[[bytes], None]) -> _Child:
        env = dict(os.environ)
        env["PWD"] = str(cwd)
        proc = await asyncio.create_subprocess_exec(
            SHELL,
            "-c",
            command,
            cwd=cwd,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
        return cls(proc, command, cwd, on_chunk)

    async def _read(self) -> None:
        stream = self.proc.stdout
        assert stream is not None
        try:
            while chunk := await stream.read(READ_SIZE):
                self._on_chunk(chunk)
        except Exception:  # the transport was closed under us: nothing more to read
            logger.debug("reading pid %d's output stopped", self.pid, exc_info=True)
        finally:
            self.eof.set()

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    @property
    def running(self) -> bool:
        return self.proc.returncode is None

    def status(self) -> tuple[int | None, str | None]:
        """(exit code, signal name) once the shell has ended, else (None, None)."""
        code = self.proc.returncode
        if code is None:
            return None, None
        if code < 0:
            return None, _signal_name(-code)
        return code, None

    async def wait_leader(self) -> int:
        """Wait for the shell to end; its pipe may stay open (held by what it left behind)."""
        delay = 0.005
        while (code := self.proc.returncode) is None:
            if self.eof.is_set():
                # The pipe is closed, so wait() (which waits for the pipe too) is prompt.
                return await self.proc.wait()
            with suppress(TimeoutError):
                await asyncio.wait_for(self.eof.wait(), delay)
            delay = min(delay * 2, 0.05)
        return code

    def _needs_kill(self) -> bool:
        return self.proc.returncode is None or _group_alive(self.pgid)

    async def terminate(self, grace: float = KILL_GRACE_S) -> None:
        """SIGTERM the group, SIGKILL it after ``grace``; return once the group is gone."""
        if not self._needs_kill():
            return
        loop = asyncio.get_running_loop()
        _killpg(self.pgid, signal.SIGTERM)
        deadline = loop.time() + grace
        while loop.time() < deadline:
            await asyncio.sleep(0.01)
            if not self._needs_kill():
                return
        _killpg(self.pgid, signal.SIGKILL)
        deadline = loop.time() + 5.0
        while self._needs_kill() and loop.time() < deadline:
            await asyncio.sleep(0.01)

    async def finish(self) -> None:
        """After the group is gone: read what is left in the pipe, then release it."""
        with suppress(TimeoutError):
            await asyncio.wait_for(self.eof.wait(), DRAIN_S)
        if not self.eof.is_set():
            # A process that left the group holds the pipe: stop listening to it.
            transport = getattr(self.proc, "_transport", None)
            if transport is not None:
                transport.close()
        with suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._reader), DRAIN_S)
        if not self._reader.done():
            self._reader.cancel()
            with suppress(asyncio.CancelledError):
                await self._reader


async def _shielded(coro: Awaitable[None]) -> None:
    """Await ``coro`` where neither an anyio scope cancellation nor a repeat can cut it short."""
    with anyio.CancelScope(shield=True):
        await coro


async def _spawn(command: str, cwd: Path, on_chunk: Callable[[bytes], None]) -> _Child:
    # Shielded: a scope cancelled mid-spawn would lose the handle of a started process; the
    # cancellation arrives at the caller's next await instead, where it is cleaned up.
    with anyio.CancelScope(shield=True):
        child = await _Child.spawn(command, cwd, on_chunk)
    return child


def _start_failure(exc: OSError | ValueError) -> str:
    reason = (exc.strerror if isinstance(exc, OSError) else None) or str(exc)
    return f"The command could not start: {reason}."


# -- output buffers -----------------------------------------------------------------------


def _is_continuation(byte: int) -> bool:
    return 0x80 <= byte <= 0xBF


def _trim_start(data: bytes) -> bytes:
    """Drop up to 3 leading UTF-8 continuation bytes (the end of a character cut off)."""
    i = 0
    while i < min(3, len(data)) and _is_continuation(data[i]):
        i += 1
    return data[i:]


def _utf8_end(data: bytes | bytearray, end: int) -> int:
    """``end`` moved back so ``data[:end]`` does not stop inside a UTF-8 character."""
    if end >= len(data) or end <= 0:
        return max(0, min(end, len(data)))
    i = end
    while i > 0 and end - i < 4 and _is_continuation(data[i]):
        i -= 1
    if i > 0 and end - i < 4 and data[i] >= 0xC0:
        return i
    return end


def _decode(data: bytes | bytearray) -> str:
    return bytes(data).decode("utf-8", errors="replace")


class _HeadTail:
    """The first and the last halves of at most ``limit`` bytes, and the count of the rest."""

    def __init__(self, limit: int) -> None:
        self.tail_size = max(limit, 2) // 2
        self.head_size = max(limit, 2) - self.tail_size
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        if len(self.head) < self.head_size:
            take = self.head_size - len(self.head)
            self.head += chunk[:take]
            chunk = chunk[take:]
        if chunk:
            self.tail += chunk
            if len(self.tail) > self.tail_size:
                del self.tail[: len(self.tail) - self.tail_size]

    @property
    def omitted(self) -> int:
        return self.total - len(self.head) - len(self.tail)

    def text(self) -> str:
        if not self.omitted:
            return _decode(self.head + self.tail)
        head = _decode(self.head[: _utf8_end(self.head, len(self.head))])
        tail = _decode(_trim_start(bytes(self.tail)))
        if head and not head.endswith("\n"):
            head += "\n"
        return f"{head}[... {self.omitted} bytes of output truncated ...]\n{tail}"


def _with_status(output: str, status: str) -> str:
    if output and not output.endswith("\n"):
        output += "\n"
    return f"{output}{status}"


def _status_line(code: int | None, sig: str | None, *, running: bool = False) -> str:
    if running:
        return "[running]"
    if sig is not None:
        number = getattr(signal.Signals, sig, None)
        return f"[terminated by signal {int(number) if number is not None else sig}]"
    return f"[exit code {code}]"


class _ProgressStream:
    """Sends output to the client as progress notifications while a command runs.

    The first piece goes at once; later ones wait at most ``COALESCE_S`` so a chatty
    command makes a notification per ~50 ms, not per read.
    """

    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx
        self._pending = bytearray()
        self._dropped = 0
        self._seen = 0
        self._progress = 0.0
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._wake = asyncio.Event()
        self._closing = asyncio.Event()
        self._broken = False
        self._task = asyncio.create_task(self._loop(), name="terminal-progress")

    def feed(self, chunk: bytes) -> None:
        if self._broken:
            return
        self._seen += len(chunk)
        self._pending += chunk
        if len(self._pending) > MAX_PENDING_PROGRESS:
            cut = len(self._pending) - MAX_PENDING_PROGRESS // 2
            del self._pending[:cut]
            self._dropped += cut
            self._decoder.reset()
        self._wake.set()

    async def _flush(self, final: bool = False) -> None:
        data = bytes(self._pending)
        self._pending.clear()
        prefix = ""
        if self._dropped:
            prefix = f"[... {self._dropped} bytes not streamed ...]\n"
            data = _trim_start(data)
            self._dropped = 0
        text = prefix + self._decoder.decode(data, final=final)
        if not text:
            return
        # progress: the bytes of output so far (kept strictly increasing, as the spec asks)
        self._progress = max(float(self._seen), self._progress + 1)
        try:
            await self._ctx.report_progress(self._progress, None, text)
        except Exception:
            logger.debug("progress notification failed; streaming stops", exc_info=True)
            self._broken = True

    async def _loop(self) -> None:
        while not self._broken:
            await self._wake.wait()
            self._wake.clear()
            await self._flush()
            if self._closing.is_set():
                return
            with suppress(TimeoutError):
                await asyncio.wait_for(self._closing.wait(), COALESCE_S)

    async def close(self, *, flush: bool) -> None:
        """Stop; with ``flush``, send what is still pending first (before the result)."""
        self._closing.set()
        self._wake.set()
        if flush:
            await self._task
            if not self._broken:
                await self._flush(final=True)
        else:
            self._task.cancel()
            with suppress(asyncio.CancelledError):
                await self._task


# -- background processes -----------------------------------------------------------------


@dataclass
class _Background:
    id: str
    child: _Child | None = None
    ring: bytearray = field(default_factory=bytearray)
    total: int = 0
    read_to: int = 0  # how far output/stop have shown it

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        self.ring += chunk
        if len(self.ring) > RING_BYTES:
            del self.ring[: len(self.ring) - RING_BYTES]

    @property
    def start(self) -> int:
        return self.total - len(self.ring)

    def fields(self) -> Meta:
        assert self.child is not None
        code, sig = self.child.status()
        return {
            "crow/id": self.id,
            "crow/pid": self.child.pid,
            "crow/command": self.child.command,
            "crow/cwd": str(self.child.cwd),
            "crow/status": "running" if self.child.running else "exited",
            "crow/exitCode": code,
            "crow/signal": sig,
        }


class _Terminal:
    def __init__(self, cwd: Path, default_timeout_s: float, max_output_bytes: int) -> None:
        self.cwd = cwd.resolve()
        self.default_timeout_s = default_timeout_s
        self.max_output_bytes = max(max_output_bytes, 2)
        self.background: dict[str, _Background] = {}
        self.foreground: set[_Child] = set()
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
        capture = _HeadTail(self.max_output_bytes)
        stream = _ProgressStream(ctx)

        def on_chunk(chunk: bytes) -> None:
            capture.add(chunk)
            stream.feed(chunk)

        try:
            child = await _spawn(command, workdir, on_chunk)
        except (OSError, ValueError) as exc:
            await stream.close(flush=False)
            return _error(_start_failure(exc))
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
            await _shielded(self._abandon(child, stream))
            raise
        finally:
            self.foreground.discard(child)

        code, sig = child.status()
        if timed_out:
            status = f"[killed after timeout of {timeout:g} s]"
        else:
            status = _status_line(code, sig)
        meta: Meta = {
            "crow/command": command,
            "crow/cwd": str(workdir),
            "crow/exitCode": code,
            "crow/signal": sig,
            "crow/timedOut": timed_out,
            "crow/truncated": capture.omitted > 0,
        }
        return _result(_with_status(capture.text(), status), meta)

    async def _abandon(self, child: _Child, stream: _ProgressStream) -> None:
        await stream.close(flush=False)
        await child.terminate()
        await child.finish()

    # -- background

    async def start(self, command: str, cwd: str | None) -> CallToolResult:
        workdir = self.workdir(cwd)
        if isinstance(workdir, CallToolResult):
            return workdir
        self._counter += 1
        entry = _Background(id=f"bg_{self._counter}")
        try:
            entry.child = await _spawn(command, workdir, entry.add)
        except (OSError, ValueError) as exc:
            return _error(_start_failure(exc))
        self.background[entry.id] = entry
        meta: Meta = {
            "crow/id": entry.id,
            "crow/pid": entry.child.pid,
            "crow/command": command,
            "crow/cwd": str(workdir),
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
        end = _utf8_end(entry.ring, end) if end < len(entry.ring) else end
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
        parts.append(_decode(data))
        text = "".join(parts)
        if more:
            text = _with_status(text, f"[... {more} more bytes: call output with since={cursor}]")
        code, sig = entry.child.status()
        text = _with_status(text, _status_line(code, sig, running=entry.child.running))
        meta = entry.fields() | {"crow/next": cursor, "crow/dropped": dropped, "crow/more": more}
        return _result(text, meta)

    async def stop(self, id: str) -> CallToolResult:
        entry = self._lookup(id)
        if isinstance(entry, CallToolResult):
            return entry
        assert entry.child is not None
        await _shielded(self._end(entry.child))
        rest = _HeadTail(self.max_output_bytes)
        data, dropped, cursor = self._slice(entry, entry.read_to, entry.total)
        rest.add(data)
        entry.read_to = cursor
        text = f"[... {dropped} earlier bytes are no longer kept ...]\n" if dropped else ""
        text += rest.text()
        code, sig = entry.child.status()
        meta = entry.fields() | {"crow/next": cursor, "crow/truncated": rest.omitted > 0}
        return _result(_with_status(text, _status_line(code, sig)), meta)

    def list_processes(self) -> CallToolResult:
        rows = [entry.fields() for entry in self.background.values()]
        lines = []
        for row in rows:
            if row["crow/status"] == "running":
                state = "running"
            else:
                state = _status_line(row["crow/exitCode"], row["crow/signal"]).strip("[]")
            lines.append(f"{row['crow/id']}  pid {row['crow/pid']}  {state}  {row['crow/command']}")
        text = "\n".join(lines) if lines else "No background processes."
        return _result(text, {"crow/processes": rows})

    async def _end(self, child: _Child) -> None:
        await child.terminate()
        await child.finish()

    async def shutdown(self) -> None:
        """End every process group this server started (the lifespan's end)."""
        children = [e.child for e in self.background.values() if e.child is not None]
        children += list(self.foreground)
        if children:
            await asyncio.gather(*(self._end(child) for child in children))


# -- the server ---------------------------------------------------------------------------

EXECUTE = {"crow/kind": "execute"}
READ = {"crow/kind": "read"}

CommandArg = Annotated[str, Field(description="A /bin/sh command line.")]
CwdArg = Annotated[
    str | None,
    Field(description="Working directory, relative to the server's (default: the server's)."),
]
TimeoutArg = Annotated[
    float | None,
    Field(description="Seconds before the command is killed (default: the server's timeout)."),
]
IdArg = Annotated[str, Field(description="A background process id from start, like bg_1.")]


def build_server(
    cwd: Path, *, default_timeout_s: float = 120, max_output_bytes: int = 64 * 1024
) -> MCPServer:
    """An `MCPServer` offering run, start, output, stop and list_processes in ``cwd``."""
    terminal = _Terminal(cwd, default_timeout_s, max_output_bytes)
    timeout = f"{default_timeout_s:g} s"

    @asynccontextmanager
    async def lifespan(_: MCPServer) -> AsyncIterator[dict[str, Any]]:
        try:
            yield {}
        finally:
            await _shielded(terminal.shutdown())

    server: MCPServer = MCPServer(
        "terminal",
        instructions=(
            f"Shell commands (/bin/sh) in {terminal.cwd}. Use run for commands that finish; "
            f"use start, output and stop for servers and watchers. run times out after {timeout} "
            "unless given timeout_s."
        ),
        lifespan=lifespan,
    )

    async def run(
        command: CommandArg,
        ctx: Context,
        timeout_s: TimeoutArg = None,
        cwd: CwdArg = None,
    ) -> CallToolResult:
        """Run a shell command to completion and return its output (stdout and stderr merged).

        stdin is empty. The last line is the exit status: [exit code N], [killed after
        timeout of S s] or [terminated by signal N]. Processes the command leaves in the
        background are ended when it exits; use start for long-running processes.
        """
        return await terminal.run(command, timeout_s, cwd, ctx)

    async def start(command: CommandArg, cwd: CwdArg = None) -> CallToolResult:
        """Start a shell command in the background (a dev server, a watcher) and return its id.

        Its output is kept (the last 1 MiB); read it with output, end it with stop.
        """
        return await terminal.start(command, cwd)

    async def output(
        id: IdArg,
        since: Annotated[
            int,
            Field(ge=0, description="Byte offset to read from: the previous call's crow/next."),
        ] = 0,
    ) -> CallToolResult:
        """Read a background process's output from a byte offset, and whether it still runs."""
        return terminal.output(id, since)

    async def stop(id: IdArg) -> CallToolResult:
        """Stop a background process (SIGTERM, then SIGKILL after 2 s) with all it started.

        Returns the output not yet read and the final status.
        """
        return await terminal.stop(id)

    async def list_processes() -> CallToolResult:
        """List the background processes: id, pid, status and command."""
        return terminal.list_processes()

    server.add_tool(
        run,
        name="run",
        title="Run a command",
        description=f"{inspect.cleandoc(run.__doc__ or '')}\n\nThe default timeout is {timeout}.",
        annotations=ToolAnnotations(
            title="Run a command",
            read_only_hint=False,
            destructive_hint=True,
            idempotent_hint=False,
            open_world_hint=True,
        ),
        meta=dict(EXECUTE),
    )
    server.add_tool(
        start,
        name="start",
        title="Start a background command",
        annotations=ToolAnnotations(
            title="Start a background command",
            read_only_hint=False,
            destructive_hint=True,
            idempotent_hint=False,
            open_world_hint=True,
        ),
        meta=dict(EXECUTE),
    )
    server.add_tool(
        output,
        name="output",
        title="Background output",
        annotations=ToolAnnotations(
            title="Background output", read_only_hint=True, open_world_hint=False
        ),
        meta=dict(READ),
    )
    server.add_tool(
        stop,
        name="stop",
        title="Stop a background command",
        annotations=ToolAnnotations(
            title="Stop a background command",
            read_only_hint=False,
            destructive_hint=True,
            idempotent_hint=True,
            open_world_hint=False,
        ),
        meta=dict(EXECUTE),
    )
    server.add_tool(
        list_processes,
        name="list_processes",
        title="List background commands",
        annotations=ToolAnnotations(
            title="List background commands", read_only_hint=True, open_world_hint=False
        ),
        meta=dict(READ),
    )
    return server


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m crow.servers.terminal",
        description="Crow's terminal MCP server over stdio.",
    )
    parser.add_argument(
        "--cwd", metavar="DIR", help="the commands' working directory (default: the current one)"
    )
    parser.add_argument(
        "--timeout",
        metavar="S",
        type=float,
        default=120.0,
        help="run's default timeout in seconds (default: 120)",
    )
    args = parser.parse_args(argv)
    cwd = Path(args.cwd) if args.cwd else Path.cwd()
    if not cwd.is_dir():
        parser.error(f"--cwd {cwd}: not a directory")
    if args.timeout <= 0:
        parser.error("--timeout must be positive")
    return run_stdio(build_server(cwd, default_timeout_s=args.timeout))


if __name__ == "__main__":
    sys.exit(main())
