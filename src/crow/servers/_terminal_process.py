"""Process groups for the terminal server: spawning a command, reading its output, ending it.

Owns how ``SHELL -c COMMAND`` is started (the caller names the shell; its own session and
group, stdin from ``/dev/null``, stderr merged into stdout), the task that reads its pipe
into a callback, and the one way a group is ended: SIGTERM to the group, SIGKILL after
``KILL_GRACE_S``, then draining (or abandoning) a pipe that an escaped process still holds.
Every group is registered with ``crow.runtime.children`` from its start until it is known to be
gone, so it dies with this process however this process dies.
It does not own what is done with the output (``_terminal_output``) nor the tools' results
(``_terminal_jobs``).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import signal
from collections.abc import Awaitable, Callable
from contextlib import suppress
from pathlib import Path

import anyio

from crow.runtime import children

# The terminal server's logger, whichever of its modules logs.
logger = logging.getLogger("crow.servers.terminal")

#: SIGTERM first; SIGKILL to the group this long after.
KILL_GRACE_S = 2.0
#: One read from the pipe.
READ_SIZE = 64 * 1024
#: After a group is gone, how long a pipe held open by an escaped process is waited for.
DRAIN_S = 1.0


def _group_alive(pgid: int) -> bool:
    """Whether any process of group ``pgid`` still runs (zombies do not count)."""
    try:
        names = os.listdir("/proc")
    except OSError:  # no procfs: ask the kernel, zombies included
        return children.group_exists(pgid)
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


#: The command waits at this gate until its group is registered with ``crow.runtime.children``:
#: started at once, a quick command could fork a child that leaves every trace (its
#: environment scrubbed) before the registration, and outlive a Crow killed right then.
#: The gate reads one line (EOF: Crow died first, so nothing runs), then becomes the
#: shell, with stdin from /dev/null as before.
GATE = "/bin/sh"
GATED = 'read -r _ || exit 1; exec "$0" -c "$1" </dev/null'


class Child:
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
    async def spawn(
        cls, command: str, cwd: Path, on_chunk: Callable[[bytes], None], *, shell: str
    ) -> Child:
        # Tagged: what the command starts, even outside its group, dies with this process.
        env = children.tagged_env(os.environ)
        env["PWD"] = str(cwd)
        if not os.access(shell, os.X_OK):  # the gate would only fail once started
            raise FileNotFoundError(errno.ENOENT, "cannot run the shell", shell)
        proc = await asyncio.create_subprocess_exec(
            *(GATE, "-c", GATED, shell, command),
            cwd=cwd,
            env=env,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
        children.register(proc.pid)
        assert proc.stdin is not None
        proc.stdin.write(b"go\n")  # registered: now the command may start
        proc.stdin.close()
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
        if await self._end_group(grace):
            # Only once it is gone: an id left with the reaper must never be a recycled one.
            children.unregister(self.pgid)

    async def _end_group(self, grace: float) -> bool:
        """Whether the group is gone (it may not be: a process stuck in the kernel)."""
        if not self._needs_kill():
            return True
        loop = asyncio.get_running_loop()
        _killpg(self.pgid, signal.SIGTERM)
        deadline = loop.time() + grace
        while loop.time() < deadline:
            await asyncio.sleep(0.01)
            if not self._needs_kill():
                return True
        _killpg(self.pgid, signal.SIGKILL)
        deadline = loop.time() + 5.0
        while loop.time() < deadline:
            if not self._needs_kill():
                return True
            await asyncio.sleep(0.01)
        return False

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


async def shielded(coro: Awaitable[None]) -> None:
    """Await ``coro`` where neither an anyio scope cancellation nor a repeat can cut it short."""
    with anyio.CancelScope(shield=True):
        await coro


async def spawn(command: str, cwd: Path, on_chunk: Callable[[bytes], None], *, shell: str) -> Child:
    # Shielded: a scope cancelled mid-spawn would lose the handle of a started process; the
    # cancellation arrives at the caller's next await instead, where it is cleaned up.
    with anyio.CancelScope(shield=True):
        child = await Child.spawn(command, cwd, on_chunk, shell=shell)
    return child


def start_failure(exc: OSError | ValueError) -> str:
    reason = (exc.strerror if isinstance(exc, OSError) else None) or str(exc)
    return f"The command could not start: {reason}."
