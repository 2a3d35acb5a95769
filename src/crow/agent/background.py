"""Work that goes on outside the turn, as ``state_update.background`` lists it.

ACP v2 (the TS SDK 2.4.0 revision, ACP-V2.md §7) lets an agent say what keeps
running while a session is idle: ``background`` on every state update, a complete
snapshot of items announced before (a terminal, a tool call), each ending with an
update of its own before it leaves the list.  Crow lists:

- the terminal of a process a tool started to run on (the terminal server's
  ``start``: its result names the process in ``_meta["crow/background"]``).  The
  terminal stays open after the call; the process's status is read from its
  server every ``POLL_S``, and when it ends the terminal gets its exit status and
  leaves the list.  Its watching ends with the session's tools (unloaded, replaced),
  which end the process too;
- the tool call a judge opens while it judges a turn (crow.agent.verdicts).

``session/cancel`` leaves background work running; ``session/close`` of the last
client unloads the session, and its tools stop it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any

from crow.extensions import PROCESS_ID, PROCESS_STATUS, PROCESSES
from crow.store.db import StoreUnavailable
from crow.tools.hub import ToolHub, ToolServerError

if TYPE_CHECKING:
    from crow.tools.surface import ToolCallView

    from .session import LiveSession

__all__ = ["follow_process"]

log = logging.getLogger("crow.agent")

#: How often a background process's status is read (an in-process call, ~1 ms).
POLL_S = 1.0


def follow_process(
    session: LiveSession, hub: ToolHub, server: str, process_id: str, view: ToolCallView
) -> None:
    """List ``view``'s terminal as background work until process ``process_id`` of
    ``server`` ends."""
    task = asyncio.create_task(
        _follow(session, hub, server, process_id, view), name=f"background-{process_id}"
    )
    session.jobs.add(task)
    task.add_done_callback(session.jobs.discard)


async def _follow(
    session: LiveSession, hub: ToolHub, server: str, process_id: str, view: ToolCallView
) -> None:
    key = view.terminal_id
    assert key is not None
    ended: dict[str, Any] = {}
    try:
        await session.set_background(key, {"type": "terminal", "terminalId": key})
        while (status := await _status(hub, server, process_id)) is not None:
            if status.get(PROCESS_STATUS) != "running":
                ended = status
                break
            await asyncio.sleep(POLL_S)
    except StoreUnavailable as exc:
        log.warning("session %s: background %s: %s", session.id, process_id, exc)
    finally:
        # Ended, gone with its server, or its tools stopped (which stops it): the
        # terminal's last update, then off the list, whatever cancelled the watching.
        with contextlib.suppress(StoreUnavailable, asyncio.CancelledError):
            await asyncio.shield(_ended(session, view, key, ended))


async def _ended(
    session: LiveSession, view: ToolCallView, key: str, status: dict[str, Any]
) -> None:
    await view.exited(status)
    await session.set_background(key, None)


async def _status(hub: ToolHub, server: str, process_id: str) -> dict[str, Any] | None:
    """The process's row in its server's ``list_processes``; None once it is gone."""
    tool = next((t for t in hub.tools() if t.server == server and t.name == "list_processes"), None)
    if tool is None:
        return None
    try:
        result = await hub.call(tool, {})
    except ToolServerError:
        return None
    rows = result.meta.get(PROCESSES)
    if not isinstance(rows, list):
        return None
    return next((r for r in rows if isinstance(r, dict) and r.get(PROCESS_ID) == process_id), None)
