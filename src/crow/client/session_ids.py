"""Session ids by a unique prefix: ``crow run --session 0bea28`` is enough.

Every line-client command that takes a session id (``run --session``, ``chat
--session``, ``sessions show/delete``) resolves it here against the agent's
``session/list``: a whole id is itself, else the one session whose id starts with
what was given (with or without the ``sess_`` that Crow's ids begin with).  No
match is the agent's own -32002 (``SessionNotFound``), so each command says "no
session" with the one exit code they share; two or more is ``AmbiguousSession``,
a usage error.  An agent that cannot list sessions gets the id as given.
"""

from __future__ import annotations

from typing import Any

from crow.acp import AcpError, ClientSide, SessionNotFound

__all__ = ["SHOWN", "AmbiguousSession", "all_sessions", "lookup", "resolve"]

#: How many of the matching ids an ambiguous prefix names.
SHOWN = 5


class AmbiguousSession(ValueError):
    """More than one session id starts with the prefix given (the message names them)."""


async def all_sessions(client: ClientSide, cwd: str | None = None) -> list[Any]:
    """Every session the agent lists (all pages)."""
    found: list[Any] = []
    cursor = None
    while True:
        page = await client.list_sessions(cwd=cwd, cursor=cursor)
        found += page.sessions
        cursor = page.next_cursor if isinstance(page.next_cursor, str) else None
        if not cursor:
            return found


async def resolve(client: ClientSide, given: str) -> str:
    """The id of the one session ``given`` names (see the module)."""
    info = await lookup(client, given)
    return given if info is None else str(info.session_id)


async def lookup(client: ClientSide, given: str) -> Any | None:
    """What ``session/list`` says of the one session ``given`` names (its id, cwd,
    title), from one listing; None when the agent cannot list sessions."""
    try:
        listed = await all_sessions(client)
    except AcpError:
        return None  # the agent cannot list: it will say itself whether it knows the id
    exact = [s for s in listed if str(s.session_id) == given]
    matches = exact or [
        s
        for s in listed
        if str(s.session_id).startswith(given)
        or str(s.session_id).removeprefix("sess_").startswith(given)
    ]
    if not matches:
        raise SessionNotFound(given)
    if len(matches) > 1:
        ids = [str(s.session_id) for s in matches]
        named = ", ".join(ids[:SHOWN]) + (", …" if len(ids) > SHOWN else "")
        raise AmbiguousSession(
            f"{len(ids)} sessions start with {given} ({named}): give more of the id"
        )
    return matches[0]
