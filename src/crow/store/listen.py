"""Hearing of updates other servers log: PostgreSQL's LISTEN/NOTIFY.

Several ``crow serve`` processes share a PostgreSQL store; a client attached to a
session on one server must see, live, the turn another server runs.  Every
transaction that appends to a session's log announces ``"<session id> <seq>"``
(its last seq there) on the ``crow_updates`` channel (``Store._announce``, the
channels named in sql.py), so the announcement arrives once the rows are visible.
``follow_updates`` listens on a connection of its own and hands each announcement
to a callback; the agent then reads the log from what it last
delivered (``LiveSession.catch_up``), so a lost or late announcement costs nothing
but time, and nothing is sent twice.  ``crow_cancels`` carries a session id whose
turn a client of another server cancelled: the server running it cancels it;
``crow_questions`` the id of a permission question filed, answered or closed (the
``questions`` table holds it: a client of any server may answer); ``crow_held`` a
session whose held prompts changed (crow.agent.shared_queue).  A
dropped connection is reopened (after a pause); the catch-up after it reads
whatever was logged meanwhile.  ``listening`` says when the LISTENs are in place
and when they are not: only while they are may a server trust that no news is no
change (crow.agent.shared_queue keeps a session with no held prompt so).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import NamedTuple

from .sql import CANCELS_CHANNEL, HELD_CHANNEL, QUESTIONS_CHANNEL, UPDATES_CHANNEL
from .urls import redact_url

__all__ = ["Heard", "follow_updates"]


log = logging.getLogger("crow.store")

RECONNECT_S = 1.0


class Heard(NamedTuple):
    """What a store's ``follow_updates`` calls: ``follow_updates``'s callbacks, in order."""

    update: Callable[[str, int], None]
    reconnect: Callable[[], None]
    cancel: Callable[[str], None]
    question: Callable[[str], None]
    held: Callable[[str], None]
    #: Called with True once every channel is listened to, and with False when that
    #: ends (a lost connection, cancelled); None: nobody asks.
    listening: Callable[[bool], None] | None = None


async def follow_updates(
    url: str,
    on_update: Callable[[str, int], None],
    on_reconnect: Callable[[], None],
    on_cancel: Callable[[str], None],
    on_question: Callable[[str], None],
    on_held: Callable[[str], None],
    on_listening: Callable[[bool], None] | None = None,
) -> None:
    """Call ``on_update(session_id, seq)`` for every update logged, by any server,
    until cancelled; ``on_reconnect()`` after a lost connection is back;
    ``on_cancel(session_id)`` when a client of any server cancels that session's turn;
    ``on_question(question_id)`` when a permission question is filed, answered or closed;
    ``on_held(session_id)`` when the session's held prompts changed;
    ``on_listening(True)`` once all of that is heard, ``on_listening(False)`` when
    it no longer is."""
    import psycopg  # optional (the postgres extra): only a shared store listens

    def listening(live: bool) -> None:
        if on_listening is not None:
            on_listening(live)

    first = True
    while True:
        try:
            async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
                await conn.execute(f"LISTEN {UPDATES_CHANNEL}")
                await conn.execute(f"LISTEN {CANCELS_CHANNEL}")
                await conn.execute(f"LISTEN {QUESTIONS_CHANNEL}")
                await conn.execute(f"LISTEN {HELD_CHANNEL}")
                listening(True)
                if not first:
                    on_reconnect()  # what was announced while we were away
                first = False
                async for notice in conn.notifies():
                    if notice.channel == CANCELS_CHANNEL:
                        on_cancel(notice.payload)
                        continue
                    if notice.channel == QUESTIONS_CHANNEL:
                        on_question(notice.payload)
                        continue
                    if notice.channel == HELD_CHANNEL:
                        on_held(notice.payload)
                        continue
                    session_id, _, seq = notice.payload.rpartition(" ")
                    if seq.isdigit():
                        on_update(session_id, int(seq))
        except psycopg.Error as exc:
            listening(False)
            log.warning(
                "listening to %s failed (%s); again in %.0f s", redact_url(url), exc, RECONNECT_S
            )
            await asyncio.sleep(RECONNECT_S)
        except BaseException:
            listening(False)  # cancelled, or a failure that ends the following
            raise
        else:
            listening(False)  # the notices ended: listened to again at once
