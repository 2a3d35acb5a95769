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

- A command can leave both its group and the tag behind: ``setsid env -i CMD &``.  So
  Crow makes itself a child subreaper (Linux ``PR_SET_CHILD_SUBREAPER``): such an orphan
  becomes Crow's child, not init's, once the shell that started it exits.  Crow looks
  for such adopted children when a registered group ends, every ``PRUNE_S`` and before
  it exits, and tells the reaper each one as ``+pPID:START`` (its start time, so a
  reused pid is never taken for it); the reaper kills them too (the whole group of one
  that leads its own).  While Crow lives it reaps those that exit, so none stays a
  zombie; except one that exits before Crow first sees it alive (within a moment of
  its shell's exit, or ``PRUNE_S`` on a loaded machine): a zombie's environment is
  gone, so it cannot be told from a child Crow started and still waits for, and it
  stays a zombie until Crow exits.

PID reuse: a group id cannot be reused while any member of the group lives; once the group
is empty, Crow unregisters it, and the reaper drops a group it finds empty (checked every
``PRUNE_S``), so it never kills a recycled group id.  The tag is immune to reuse, and an
adopted pid is named with its start time.

Reaping adopted children must not steal the exit of a child that someone in Crow waits
for (libuv, under uvloop, never learns of a child reaped behind its back).  So Crow reaps
only adopted children that it cannot have started itself: untagged ones, those with the
terminal's tag (its commands are registered before they may run) and those with the tag
of a child whose group is registered (``register(pgid, label=...)``).  An adopted child
with another tag is killed with Crow all the same, just not reaped before.

The subreaper flag is set with ``prctl`` through ctypes on the process's own symbols:
one call, for which no maintained package exists (python-prctl is unmaintained).

Not done: PR_SET_PDEATHSIG on direct children.  It needs ``preexec_fn``, which is unsafe in
a process with threads (Crow has some), takes away the fast vfork path, fires when the
parent *thread* ends, and only reaches the direct child; the reaper covers all of it.

Linux is the target: elsewhere the groups are still killed, the tag sweep finds nothing
(there is no ``/proc``).
"""

from __future__ import annotations

import atexit
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
#: The tag value of terminal commands (``tagged_env``'s default).
TERMINAL_LABEL = "1"
#: prctl(2) option: orphaned descendants are reparented to this process, not to init.
PR_SET_CHILD_SUBREAPER = 36


# -- Crow's side ---------------------------------------------------------------------------


class _Reaper:
    """The reaper process of this Crow process, and the groups registered with it."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.owner = os.getpid()
        self.groups: set[int] = set()
        #: Adopted children (not registered, not the reaper): pid -> (start time, ours to reap).
        self.adopted: dict[int, tuple[str, bool]] = {}
        #: Tag values of children whose group is registered: their orphans may be reaped.
        self.settled: set[str] = {TERMINAL_LABEL}
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
            told = [f"+{pgid}\n" for pgid in self.groups]
            told += [f"+p{pid}:{start}\n" for pid, (start, _) in self.adopted.items()]
            self._write("".join(told))
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
        data = text.encode()
        while data:  # a line is < PIPE_BUF: written whole, the reaper never sees half of one
            written = os.write(self.proc.stdin.fileno(), data)
            data = data[written:]

    def adopt(self) -> None:
        """Tell the reaper the children Crow adopted, and reap those that have ended."""
        reaper_pid = self.proc.pid if self.proc is not None else None
        for pid in _direct_children():
            if pid in self.groups or pid == reaper_pid or pid in self.adopted:
                continue
            start = _start_of(pid)
            if start is None:
                continue  # gone, or ended before it was seen: not known to be ours to reap
            label = _label(pid, self.tag)
            self.adopted[pid] = (start, label is None or label in self.settled)
            self.send(f"+p{pid}:{start}\n")
        for pid, (start, reapable) in list(self.adopted.items()):
            state = _state(pid, start)
            if state == "Z" and reapable:
                with suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)
                state = None
            if state is None:
                del self.adopted[pid]
                self.send(f"-p{pid}\n")


_lock = threading.Lock()
_reaper: _Reaper | None = None


def _ensure() -> _Reaper:
    """The reaper, started on first use (with the lock held)."""
    global _reaper
    if _reaper is None or _reaper.owner != os.getpid():
        _become_subreaper()
        _reaper = _Reaper(f"{os.getpid()}_{secrets.token_hex(4)}")
        threading.Thread(target=_adopt_every, args=(_reaper,), daemon=True).start()
        atexit.register(adopt_orphans)
    return _reaper


def _become_subreaper() -> None:
    """Orphaned descendants become this process's children (Linux only)."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes  # ~5 ms, paid by the first child, not by every process that imports this

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        log.warning(
            "cannot become a child subreaper (%s): a command that leaves its group "
            "with a scrubbed environment may outlive Crow",
            os.strerror(ctypes.get_errno()),
        )


def _adopt_every(reaper: _Reaper) -> None:
    """Look for adopted children every ``PRUNE_S``, for this reaper's life."""
    while True:
        time.sleep(PRUNE_S)
        with _lock:
            if _reaper is not reaper:
                return  # replaced (after a fork): the new one has its own thread
            reaper.adopt()


def adopt_orphans() -> None:
    """Tell the reaper the children this process adopted (and reap the ended ones): call
    before leaving through ``os._exit``, which skips the ``atexit`` hook doing it."""
    with _lock:
        reaper = _reaper
        if reaper is not None and reaper.owner == os.getpid():
            reaper.adopt()


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


def register(pgid: int, *, label: str | None = None) -> None:
    """Kill group ``pgid`` when this process dies, until ``unregister``.  ``label``: the
    tag value its leader was started with (``tagged_env``), when not the terminal's."""
    with _lock:
        reaper = _ensure()
        reaper.groups.add(pgid)
        if label is not None:
            reaper.settled.add(label)
        reaper.send(f"+{pgid}\n")
        if reaper.adopted.pop(pgid, None) is not None:  # seen before it was registered
            reaper.send(f"-p{pgid}\n")


def unregister(pgid: int) -> None:
    """Group ``pgid`` is gone (or no longer ours): never kill that id."""
    with _lock:
        reaper = _reaper
        if reaper is None or reaper.owner != os.getpid() or pgid not in reaper.groups:
            return
        reaper.groups.discard(pgid)
        reaper.send(f"-{pgid}\n")
        reaper.adopt()  # what the group left behind may have just become ours


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


def _label(pid: int, tag: str) -> str | None:
    """The value of ``tag`` in the environment of ``pid``; None without it."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            environ = f.read()
    except OSError:
        return None
    prefix = f"{tag}=".encode()
    for entry in environ.split(b"\0"):
        if entry.startswith(prefix):
            return entry[len(prefix) :].decode(errors="replace")
    return None


# -- shared by both sides ------------------------------------------------------------------


def _stat(pid: int) -> list[bytes] | None:
    """The fields of ``/proc/PID/stat`` after the command name (state first); None if gone.

    Here rather than from ``proc``: the reaper runs this file alone, importing nothing."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    return stat[stat.rfind(b")") + 2 :].split()


def _start_of(pid: int) -> str | None:
    """The start time of a live (not zombie) process; None otherwise."""
    fields = _stat(pid)
    if fields is None or len(fields) < 20 or fields[0] == b"Z":
        return None
    return fields[19].decode()


def _state(pid: int, start: str) -> str | None:
    """The state letter of the process ``pid`` that started at ``start``; None once it
    is gone (or the pid names another process)."""
    fields = _stat(pid)
    if fields is None or len(fields) < 20 or fields[19].decode() != start:
        return None
    return fields[0].decode()


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


def _apply(line: bytes, groups: set[int], adopted: dict[int, str]) -> None:
    with suppress(ValueError):
        if line[1:2] == b"p":  # +pPID:START, -pPID: a child Crow adopted
            pid_text, _, start = line[2:].partition(b":")
            pid = int(pid_text)
            if line[:1] == b"+" and pid > 1 and start:
                adopted[pid] = start.decode()
            elif line[:1] == b"-":
                adopted.pop(pid, None)
            return
        pgid = int(line[1:])
        if pgid > 1 and line[:1] == b"+":
            groups.add(pgid)
        elif line[:1] == b"-":
            groups.discard(pgid)


def _kill_adopted(adopted: dict[int, str]) -> None:
    """SIGKILL each adopted child still running (the same process: its start time), with
    its group when it leads one (a daemon's workers)."""
    for pid, start in adopted.items():
        fields = _stat(pid)
        if fields is None or len(fields) < 20 or fields[19].decode() != start:
            continue
        with suppress(OSError):
            if int(fields[2]) == pid:  # field 5, the group: it leads its own
                os.killpg(pid, signal.SIGKILL)
            else:
                os.kill(pid, signal.SIGKILL)


def reap(token: str, stdin: int = 0, prune_s: float = PRUNE_S) -> None:
    """The reaper's life: follow the registrations until end-of-file, then kill."""
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    groups: set[int] = set()
    adopted: dict[int, str] = {}
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
                _apply(line, groups, adopted)
        if time.monotonic() - pruned >= prune_s:
            groups = live_groups(groups)  # an empty group's id may be recycled: forget it
            pruned = time.monotonic()
    for pgid in groups:
        with suppress(OSError):
            os.killpg(pgid, signal.SIGKILL)
    _kill_adopted(adopted)
    _sweep(_needle(TAG_PREFIX + token))


if __name__ == "__main__":
    reap(sys.argv[1])
