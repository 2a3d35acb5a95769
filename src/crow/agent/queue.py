"""Prompts that arrive while their session is busy: held in arrival order, or steered.

ACP v2's prompt lifecycle (the TS SDK 2.4.0 revision, ACP-V2.md §6.1) makes
acceptance an event of its own: the ``session/prompt`` answer (``{messageId}``)
means "inserted".  A prompt on a busy session is therefore not refused:

- **queue** (the default): it is *held*, and its request stays open.  Held prompts
  are inserted in arrival order, each as the turn before it ends; each one's answer
  goes out when it is inserted.  ``$/cancel_request`` withdraws a held prompt (the
  way to edit one: withdraw, send again); ``session/cancel`` and ``session/close``
  answer held prompts ``-32800``.
- **steer**: it is put into the running turn at once (its ``user_message`` goes
  out, it joins the model's history), and the model sees it at its next call,
  after the tool calls in flight finish; a turn that was about to end calls the
  model once more for it.
- **reject**: ``-32602`` with ``data.reason = "busy"``, as before.

A prompt chooses with ``_meta["crow/insert"]``; ``[session] while_busy`` is the
default.  Every watcher sees the held prompts (``_crow/queue``, live only: a replay
shows the queue as it is now, not its history).

Held prompts live with the process that holds their requests: a request can only be
answered on its own connection.  A server that dies takes its held prompts with it,
their clients see the connection close, and nothing of them was inserted.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from crow.acp import InvalidParams, RequestCancelled
from crow.config import WHILE_BUSY
from crow.extensions import INSERT, QUEUE

if TYPE_CHECKING:
    from .watchers import Watcher

__all__ = ["Held", "HeldPrompts", "insert_mode"]

#: How much of a held prompt's text every watcher is shown.
PREVIEW_CHARS = 120


def insert_mode(meta: Any, default: str) -> str:
    """What a prompt on a busy session does: its ``_meta["crow/insert"]``, else ``default``."""
    mode = meta.get(INSERT) if isinstance(meta, dict) else None
    if mode is None:
        return default
    if mode not in WHILE_BUSY:
        raise InvalidParams(
            f"_meta.{INSERT} must be one of {', '.join(WHILE_BUSY)}", data={INSERT: mode}
        )
    return str(mode)


@dataclass(eq=False)
class Held:
    """One held prompt: the message id it will have, who sent it, and its wake-up."""

    message_id: str
    watcher: Watcher
    sender: str
    preview: str
    wake: asyncio.Future[None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )

    def again(self) -> None:
        """Wait to be woken again (its insertion lost a race for the turn)."""
        self.wake = asyncio.get_running_loop().create_future()


class HeldPrompts:
    """A session's held prompts, first to be inserted first."""

    def __init__(self) -> None:
        self.items: list[Held] = []

    def __bool__(self) -> bool:
        return bool(self.items)

    def __len__(self) -> int:
        return len(self.items)

    def hold(self, message_id: str, watcher: Watcher, sender: str, text: str) -> Held:
        preview = " ".join(text.split())
        if len(preview) > PREVIEW_CHARS:
            preview = preview[: PREVIEW_CHARS - 1] + "…"
        held = Held(message_id, watcher, sender, preview)
        self.items.append(held)
        return held

    def drop(self, held: Held) -> bool:
        """Take ``held`` out; False if it was not held (any more)."""
        if held in self.items:
            self.items.remove(held)
            return True
        return False

    def put_back(self, held: Held) -> None:
        """First again: it was about to be inserted, and must wait for the next turn."""
        if held not in self.items:
            self.items.insert(0, held)

    def wake_first(self) -> None:
        """The session is free: the first held prompt inserts itself."""
        if self.items and not self.items[0].wake.done():
            self.items[0].wake.set_result(None)

    def withdraw(self, why: str, watcher: Watcher | None = None) -> int:
        """Answer held prompts ``-32800`` (only ``watcher``'s, if given); how many."""
        gone = [h for h in self.items if watcher is None or h.watcher is watcher]
        for held in gone:
            self.items.remove(held)
            if not held.wake.done():
                held.wake.set_exception(RequestCancelled(f"The held prompt was withdrawn: {why}"))
        return len(gone)

    def snapshot(self, watcher: Watcher) -> dict[str, Any]:
        """The ``_crow/queue`` update ``watcher`` is shown."""
        rows = [(h.message_id, h.sender, h.preview) for h in self.items]
        return self.snapshot_of(rows, watcher)

    def snapshot_of(self, rows: Sequence[tuple[str, str, str]], watcher: Watcher) -> dict[str, Any]:
        """The same, of ``rows`` (message id, sender, preview): on a shared store, the
        prompts every server holds."""
        mine = {h.message_id for h in self.items if h.watcher is watcher}
        prompts = [
            {
                "messageId": message_id,
                "from": sender,
                "preview": preview,
                "yours": message_id in mine,
            }
            for message_id, sender, preview in rows
        ]
        return {"sessionUpdate": QUEUE, "prompts": prompts}
