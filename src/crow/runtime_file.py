"""The runtime file of a running ``crow serve --http``: how Crow's own clients find its token.

The server writes ``$CROW_HOME/run/server-<port>.json`` (``{"url", "token",
"pid"}``) once its socket is bound and removes it when it exits; ``crow run``,
``crow chat`` and ``crow sessions`` given ``--url`` and no token read it.  The
directory is 0700 (``crow.private``) and the file is created 0600 (``O_EXCL``
with the mode, so the umask cannot widen it): only this user can read the
token.  A file whose pid is gone is stale: readers ignore it and the next
server on that port replaces it.

This module owns the file's name, format and lifetime, not the token's policy
(``crow.agent.serve_http``) nor how a client sends it (``crow.acp.transports``).
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
    if held is not None and _alive(held.get("pid")):
        raise FileExistsError(f"{path} belongs to the running server {held['pid']}")
    path.unlink(missing_ok=True)  # stale: its server is gone
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC, FILE_MODE)
    with os.fdopen(fd, "w") as file:
        json.dump({"url": url, "token": token, "pid": os.getpid()}, file)
    return path


def find_token(run_dir: Path, url: str) -> str | None:
    """The token of the live local server at ``url`` (any scheme), or None."""
    wanted = urlsplit(url)
    held = _read(run_dir / f"server-{_port(wanted)}.json")
    if held is None or not _alive(held.get("pid")) or not isinstance(held.get("url"), str):
        return None
    served = urlsplit(held["url"])
    if _port(served) != _port(wanted) or not _same_host(served.hostname, wanted.hostname):
        return None
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


def _alive(pid: Any) -> bool:
    if type(pid) is not int or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True
