"""The runtime file of a running ``crow serve --http``: how Crow's own clients find its token.

The server writes ``$CROW_HOME/run/server-<port>.json`` (``{"url", "token",
"pid", "started"}``) once its socket is bound and removes it when it exits;
``crow run``, ``crow chat`` and ``crow sessions`` given ``--url`` and no token
read it.  The directory is 0700 (``crow.private``) and the file is created 0600
(``O_EXCL`` with the mode, so the umask cannot widen it): only this user can
read the token.

A server killed outright (kill -9) leaves its file behind, and its pid and port
may both go to other programs.  So the file names its process by pid and start
time (``crow.runtime.proc``, as the turn leases do): a file whose process is gone, or
whose pid now belongs to another process, is stale; readers ignore it and the
next server on that port replaces it.  And a reader sends the token only when
that process still holds the port's listening socket.

This module owns the file's name, format and lifetime, not the token's policy
(``crow.serve.http``) nor how a client sends it (``crow.acp.transports``).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from crow.private import FILE_MODE, private_dir
from crow.runtime.proc import UNKNOWN, listens_on, pid_alive, start_time

__all__ = ["find_token", "is_loopback", "publish"]

#: Bind addresses that listen on every interface: reachable through loopback too.
WILDCARDS = frozenset({"0.0.0.0", "::", ""})


def publish(run_dir: Path, *, url: str, token: str | None) -> Path:
    """Write this process's runtime file for the server at ``url``; returns its path.

    Raises FileExistsError when a live process holds the file, OSError when it
    cannot be written."""
    private_dir(run_dir.parent)  # the home: 0700 even if this creates it
    path = private_dir(run_dir) / f"server-{urlsplit(url).port}.json"
    held = _read(path)
    if held is not None and _alive(held):
        raise FileExistsError(f"{path} belongs to the running server {held['pid']}")
    path.unlink(missing_ok=True)  # stale: its server is gone
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC, FILE_MODE)
    pid = os.getpid()
    with os.fdopen(fd, "w") as file:
        json.dump({"url": url, "token": token, "pid": pid, "started": start_time(pid)}, file)
    return path


def find_token(run_dir: Path, url: str) -> str | None:
    """The token of the live local server at ``url`` (any scheme), or None."""
    wanted = urlsplit(url)
    port = _port(wanted)
    held = _read(run_dir / f"server-{port}.json")
    if held is None or not _alive(held) or not isinstance(held.get("url"), str):
        return None
    served = urlsplit(held["url"])
    if _port(served) != port or not _same_host(served.hostname, wanted.hostname):
        return None
    if port is None or listens_on(held["pid"], port) is False:
        return None  # the port is someone else's now: never send them the token
    token = held.get("token")
    return token if isinstance(token, str) else None


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _same_host(served: str | None, wanted: str | None) -> bool:
    served, wanted = (served or "").lower(), (wanted or "").lower()
    if served == wanted:
        return True
    # A wildcard bind is reached through loopback, but never send its token elsewhere.
    return is_loopback(wanted) and (is_loopback(served) or served in WILDCARDS)


def _port(parts: Any) -> int | None:
    try:
        port: int | None = parts.port
    except ValueError:  # not a number
        return None
    return port or {"http": 80, "ws": 80, "https": 443, "wss": 443}.get(parts.scheme)


def _read(path: Path) -> dict[str, Any] | None:
    with contextlib.suppress(OSError, ValueError):
        found = json.loads(path.read_text())
        return found if isinstance(found, dict) else None
    return None


def _alive(held: dict[str, Any]) -> bool:
    """Whether the process that wrote ``held`` still runs: its pid, with the same start
    time (a file without one, or a start time procfs cannot read: the pid alone)."""
    pid = held.get("pid")
    if type(pid) is not int or pid <= 0 or not pid_alive(pid):
        return False
    recorded, current = held.get("started"), start_time(pid)
    if current is None:
        return False
    return not isinstance(recorded, str) or UNKNOWN in (recorded, current) or recorded == current
