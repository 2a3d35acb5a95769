"""Asking the people watching a session for permission (ACP-V2.md §7.4).

The request goes to every attached client; the first answer wins and the
others are withdrawn with ``$/cancel_request``.  A client that fails to answer
(an error, a dropped connection) is skipped; when nobody can answer, the
outcome is "cancelled", which never counts as approval.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from crow.acp import AcpError, schema

from .watchers import Watcher

__all__ = ["ask_watchers"]

log = logging.getLogger("crow.agent")


async def ask_watchers(watchers: set[Watcher], params: schema.RequestPermissionRequest) -> Any:
    """The first answer's outcome (a RequestPermissionOutcome), or None if nobody answered."""
    tasks = {asyncio.create_task(watcher.request_permission(params)) for watcher in watchers}
    try:
        while tasks:
            done, tasks = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                try:
                    return task.result().outcome
                except (AcpError, ConnectionError, ValueError) as exc:
                    log.info("a client did not answer a permission request: %s", exc)
        return None
    finally:
        for task in tasks:
            task.cancel()  # withdrawn: the peer sends $/cancel_request
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
