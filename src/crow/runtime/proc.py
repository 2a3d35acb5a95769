"""What Linux's ``/proc`` says about a process: its identity, and its listening sockets.

A pid alone does not name a process: once it exits, the kernel may hand the
number to another.  ``start_time`` (``/proc/<pid>/stat`` field 22, clock ticks
since boot) tells a reused pid from the process that held it, so a pid recorded
with its start time names one process for good (the turn leases of
``crow.store.lease``, the runtime file of ``crow serve --http``).
``listens_on`` says whether a process holds the listening socket of a TCP port:
before a client sends a server's token there, the port must still be that
server's.

Without procfs (not Linux, or no access) the answers are "?" and None: callers
fall back to the pid alone.
"""

from __future__ import annotations

import os

__all__ = ["UNKNOWN", "listens_on", "pid_alive", "start_time"]

#: A start time that cannot be read (no procfs access): compare by pid alone.
UNKNOWN = "?"
_LISTEN = "0A"  # the TCP state column of /proc/net/tcp: a listening socket


def start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot; None if it is gone (a
    zombie, killed and not yet reaped by its parent, is gone: it runs nothing)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except FileNotFoundError:
        return None if os.path.isdir("/proc/self") else UNKNOWN
    except OSError:
        return UNKNOWN  # no procfs access: fall back to the pid alone
    # The command name (field 2) may hold spaces and parentheses: split after it.
    fields = stat[stat.rfind(b")") + 2 :].split()
    if fields[:1] == [b"Z"]:
        return None
    return fields[19].decode() if len(fields) > 19 else UNKNOWN


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def listens_on(pid: int, port: int) -> bool | None:
    """Whether process ``pid`` holds a listening TCP socket on ``port`` (any address,
    IPv4 or IPv6); None when procfs cannot tell."""
    sockets = _listening_inodes(port)
    if sockets is None:
        return None
    if not sockets:
        return False  # nobody listens there
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except FileNotFoundError:
        return False
    except OSError:
        return None  # not ours to look at
    wanted = {f"socket:[{inode}]" for inode in sockets}
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") in wanted:
                return True
        except OSError:
            continue  # closed meanwhile
    return False


def _listening_inodes(port: int) -> set[str] | None:
    """The inodes of the sockets listening on ``port``; None without /proc/net/tcp."""
    found: set[str] = set()
    readable = False
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        readable = True
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[3] != _LISTEN:
                continue
            local_port = fields[1].rpartition(":")[2]
            if int(local_port, 16) == port:
                found.add(fields[9])
    return found if readable else None
