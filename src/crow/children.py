"""Children die with Crow: a reaper process kills what Crow started when Crow dies.

Crow's children (terminal commands, stdio MCP servers) each lead a process group of their
own, so a terminal's Ctrl-C or a kill of Crow's group does not reach them, and a
``kill -9`` of Crow would leave them running.  So, lazily, on the first child, Crow starts
one tiny reaper process (this file run as a script, importing nothing of Crow; a few ms):

- It runs in a session of its own and ignores SIGINT and SIGHUP, so whatever kills Crow's
  terminal or group does not kill it first.
- Its stdin is a pipe whose only write end Crow holds (close-on-exec, and closed in a
  forked child), so end-of-file means Crow died, however it died.
- Crow writes ``+PGID`` when a group starts and ``-PGID`` when it is known to be gone: one
  pipe write each.  On end-of-file the reaper SIGKILLs every group still registered.
- Every child's environment carries ``CROW_CHILD_OF_<token>`` (``tagged_env``), which its
  own children inherit.  After the groups, the reaper also kills every process carrying
  its tag: that catches a grandchild that left its group (``setsid``, a daemon).  The same
  tag, with a per-child value, lets Crow find a child it did not spawn itself (an MCP
  server spawned by the SDK) and sweep what it left behind (``child_with``,
  ``kill_tagged``).

PID reuse: a group id cannot be reused while any member of the group lives; once the group
is empty, Crow unregisters it, and the reaper drops a group it finds empty (checked every
``PRUNE_S``), so it never kills a recycled group id.  The tag is immune to reuse.

Not done: PR_SET_PDEATHSIG on direct children.  It needs ``preexec_fn``, which is unsafe in
a process with threads (Crow has some), takes away the fast vfork path, fires when the
parent *thread* ends, and only reaches the direct child; the reaper covers all of it.

Linux is the target: elsewhere the groups are still killed, the tag sweep finds nothing
(there is no ``/proc``).
"""

from __future__ import annotations

import logging
import os
import secrets
import select
import signal
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import suppress
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import subprocess

__all__ = ["child_with", "kill_tagged", "register", "tagged_env", "unregister"]

log = logging.getLogger("crow.children")

TAG_PREFIX = "CROW_CHILD_OF_"
#: How often the reaper forgets groups that have ended.
PRUNE_S = 2.0
#: Sweeps of tagged processes: each pass kills one generation of forks made meanwhile.
SWEEP_PASSES = 10


# -- Crow's side ---------------------------------------------------------------------------


class _Reaper:
    """The reaper process of this Crow process, and the groups registered with it."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.owner = os.getpid()
        self.groups: set[int] = set()
        self.proc: subprocess.Popen[bytes] | None = None
        self._restart()

    @property
    def tag(self) -> str:
        return TAG_PREFIX + self.token

    def _spawn(self) -> subprocess.Popen[bytes]:
        import subprocess  # not at module level: the reaper itself does not need it

        # Untagged, so that the reaper of a Crow above this one leaves it alive to do its job.
        env = {k: v for k, v in os.environ.items() if not k.startswith(TAG_PREFIX)}
        return subprocess.Popen(
            [sys.executable, "-I", "-S", os.path.abspath(__file__), self.token],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,  # never the agent's stdout: that is the wire
            stderr=subprocess.DEVNULL,
            cwd="/",
            env=env,
            start_new_session=True,
        )

    def send(self, line: str) -> None:
        """Write one line; if the reaper died (or never started), start one, tell it all."""
        try:
            self._write(line)
        except OSError:
            self._restart()

    def _restart(self) -> None:
        if self.proc is not None:
            self.close()
            with suppress(Exception):
                self.proc.wait(timeout=1.0)
            self.proc = None
        try:
            self.proc = self._spawn()
            self._write("".join(f"+{pgid}\n" for pgid in self.groups))
        except OSError as exc:  # no fork today: children still start, unguarded; retried later
            log.warning("cannot start the reaper of child processes: %s", exc)

    def close(self) -> None:
        """Close this process's write end of the pipe."""
        if self.proc is not None and self.proc.stdin is not None:
            with suppress(OSError):
                self.proc.stdin.close()

    def _write(self, text: str) -> None:
        if self.proc is None or self.proc.stdin is None or self.proc.stdin.closed:
            raise BrokenPipeError("no reaper")
        if text:
            os.write(self.proc.stdin.fileno(), text.encode())  # < PIPE_BUF: one atomic write


_lock = threading.Lock()
_reaper: _Reaper | None = None


def _ensure() -> _Reaper:
    """The reaper, started on first use (with the lock held)."""
    global _reaper
    if _reaper is None or _reaper.owner != os.getpid():
        _reaper = _Reaper(f"{os.getpid()}_{secrets.token_hex(4)}")
    return _reaper


def _forget_in_child() -> None:
    """After fork: the child must not hold the pipe (Crow's death would go unseen)."""
    global _reaper, _lock
    _lock = threading.Lock()
    if _reaper is not None:
        _reaper.close()  # this process's copy only
        _reaper = None


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_forget_in_child)


def tagged_env(base: Mapping[str, str], label: str = "1") -> dict[str, str]:
    """``base`` plus the variable marking a process, and all it starts, as this Crow's."""
    with _lock:
        reaper = _ensure()
    env = dict(base)
    env[reaper.tag] = label
    return env


def register(pgid: int) -> None:
    """Kill group ``pgid`` when this process dies, until ``unregister``."""
    with _lock:
        reaper = _ensure()
        reaper.groups.add(pgid)
        reaper.send(f"+{pgid}\n")


def unregister(pgid: int) -> None:
    """Group ``pgid`` is gone (or no longer ours): never kill that id."""
    with _lock:
        reaper = _reaper
        if reaper is None or reaper.owner != os.getpid() or pgid not in reaper.groups:
            return
        reaper.groups.discard(pgid)
        reaper.send(f"-{pgid}\n")


def _tag() -> str | None:
    reaper = _reaper
    return reaper.tag if reaper is not None and reaper.owner == os.getpid() else None


def child_with(label: str) -> int | None:
    """The pid of a direct child of this process whose tag has the value ``label``."""
    tag = _tag()
    if tag is None:
        return None
    for pid in _direct_children():
        if _has(pid, _needle(tag, label)):
            return pid
    return None


def kill_tagged(label: str) -> int:
    """SIGKILL every process tagged as this Crow's with value ``label``; how many were."""
    tag = _tag()
    return 0 if tag is None else _sweep(_needle(tag, label))


def _direct_children() -> Iterator[int]:
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/children") as f:
                listed = f.read()
        except OSError:
            continue
        yield from (int(pid) for pid in listed.split())


# -- shared by both sides ------------------------------------------------------------------


def _needle(tag: str, label: str | None = None) -> bytes:
    """What ``\\0`` + environ contains when the variable is set (to ``label``, if given)."""
    text = f"\0{tag}=" if label is None else f"\0{tag}={label}\0"
    return text.encode()


def _has(pid: int, needle: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            environ = f.read()
    except OSError:  # gone, or not ours to read
        return False
    # A zombie's environ reads empty: it never matches, so a sweep does not loop on it.
    return needle in b"\0" + environ + b"\0"


def _tagged(needle: bytes) -> list[int]:
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    me = os.getpid()
    return [int(n) for n in names if n.isdigit() and int(n) != me and _has(int(n), needle)]


def _sweep(needle: bytes) -> int:
    killed: set[int] = set()
    for _ in range(SWEEP_PASSES):
        found = _tagged(needle)
        if not found:
            break
        for pid in found:
            with suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        killed.update(found)
    return len(killed)


# -- the reaper's side ---------------------------------------------------------------------


def group_exists(pgid: int) -> bool:
    """Whether group ``pgid`` has a member, zombies included (the kernel's answer)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def live_groups(groups: set[int]) -> set[int]:
    """The groups that still have a member (a zombie counts until it is reaped)."""
    return {pgid for pgid in groups if group_exists(pgid)}


def _apply(line: bytes, groups: set[int]) -> None:
    with suppress(ValueError):
        pgid = int(line[1:])
        if pgid > 1 and line[:1] == b"+":
            groups.add(pgid)
        elif line[:1] == b"-":
            groups.discard(pgid)


def reap(token: str, stdin: int = 0, prune_s: float = PRUNE_S) -> None:
    """The reaper's life: follow the registrations until end-of-file, then kill."""
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    groups: set[int] = set()
    pending = b""
    pruned = time.monotonic()
    while True:
        ready, _, _ = select.select([stdin], [], [], prune_s)
        if ready:
            data = os.read(stdin, 65536)
            if not data:
                break
            *lines, pending = (pending + data).split(b"\n")
            for line in lines:
                _apply(line, groups)
        if time.monotonic() - pruned >= prune_s:
            groups = live_groups(groups)  # an empty group's id may be recycled: forget it
            pruned = time.monotonic()
    for pgid in groups:
        with suppress(OSError):
            os.killpg(pgid, signal.SIGKILL)
    _sweep(_needle(TAG_PREFIX + token))


if __name__ == "__main__":
    reap(sys.argv[1])
