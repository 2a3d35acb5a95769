"""Who runs a session's turn: process identity and the lease it holds.

Several ``crow serve`` processes may share one store, so "one turn per
session" is kept in the store: a process takes a session's lease (the
``owner`` and ``lease_expires`` columns) before it acknowledges a prompt, and
gives it back in the same transaction as the turn's final ``idle``.

An owner is named ``host:pid:start`` where ``start`` is the process's start
time (``crow.runtime.proc.start_time``): a pid the kernel handed to a new
process does not pass for the dead owner.  On this host a dead owner loses its
lease at once; an owner on another host (a store shared over the network, see
the PostgreSQL backend) loses it when the lease expires unrenewed.
"""

from __future__ import annotations

import os
import socket
import time

from crow.runtime.proc import pid_alive, start_time

__all__ = ["LEASE_S", "RENEW_EVERY_S", "expiry", "owner_alive", "this_process"]

#: How long a lease lasts without renewal.  Long enough that a busy event loop
#: never loses a live turn; only owners on other hosts wait this long.
LEASE_S = 60.0
#: How often a process renews the leases of its running turns.
RENEW_EVERY_S = 15.0

_HOST = socket.gethostname()


def this_process() -> str:
    pid = os.getpid()
    return f"{_HOST}:{pid}:{start_time(pid) or '?'}"


def owner_alive(
    owner: str | None, lease_expires: float | None, *, now: float | None = None
) -> bool:
    """Whether the process named ``owner`` may still be running the turn."""
    if owner is None:
        return False
    host, _, rest = owner.partition(":")
    pid_text, _, start = rest.partition(":")
    if host != _HOST or not pid_text.isdigit():
        return lease_expires is not None and lease_expires > (now or time.time())
    pid = int(pid_text)
    if not pid_alive(pid):
        return False
    current = start_time(pid)
    if current is None:
        return False
    return "?" in (start, current) or current == start


def expiry(now: float | None = None) -> float:
    """The ``lease_expires`` of a lease taken or renewed now."""
    return (now or time.time()) + LEASE_S
