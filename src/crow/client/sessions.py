"""``crow sessions``: list, show (the replayed conversation as text), delete.

The options and what they mean for people are in ``crow.cli.client.SESSIONS_HELP``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Any

from crow.acp import ClientSide, Message, SessionNotFound, SessionProjection, ToolCall
from crow.extensions import JUDGE_OF, TURN_ENDED

from .connect import connect
from .failure import FAILURES, say_failure
from .render import STATUS_MARKS
from .session_ids import all_sessions, lookup
from .session_list import Row, show
from .verifying import Verdicts

__all__ = ["main", "transcript"]


def main(args: argparse.Namespace) -> int:
    if args.action != "list" and not args.session:
        print(f"crow: sessions {args.action} needs a session id", file=sys.stderr)
        return 2
    try:
        return asyncio.run(_main(args))
    except FAILURES as exc:
        return say_failure(exc, args.session)


async def _main(args: argparse.Namespace) -> int:
    async with connect(args.command, url=args.url, token=args.token) as client:
        if args.action == "list":
            return await _list(client, args)
        info = await lookup(client, args.session)
        if info is None:  # an agent that cannot list sessions
            raise SessionNotFound(args.session)
        if args.action == "delete":
            await client.delete_session(info.session_id)
            print(f"deleted {info.session_id}")
            return 0
        ends = _turn_ends(client)
        session = await client.resume_session(info.session_id, info.cwd, replay=True)
        sys.stdout.write(transcript(session.projection, Verdicts.of_session(session), ends))
        await session.close()
        return 0


async def _list(client: ClientSide, args: argparse.Namespace) -> int:
    cwd = os.path.abspath(args.cwd) if args.cwd else None
    rows = [
        Row(
            sessionId=str(s.session_id),
            updatedAt=_value(s.updated_at),
            cwd=str(s.cwd),
            title=_value(s.title) or None,
            judgeOf=_value((s.meta if isinstance(s.meta, dict) else {}).get(JUDGE_OF)) or None,
        )
        for s in await all_sessions(client, cwd)
    ]
    return show(rows, args)


def _value(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _turn_ends(client: ClientSide) -> dict[int, list[str]]:
    """While a resume replays: where each turn that did not end with ``end_turn``
    ended (``_crow/turnEnded``), by how many entries came before it."""
    ends: dict[int, list[str]] = {}

    def on_update(session_id: str, update: Any) -> None:
        if getattr(update, "session_update", None) == TURN_ENDED:
            fields = update.model_extra or {}
            stop, error = str(fields.get("stopReason")), fields.get("error")
            said = error.get("message") if isinstance(error, dict) else None
            line = f"[{stop}: {said}]" if stop == "error" and said else f"[{stop}]"
            at = len(client.projection(session_id).entries)
            ends.setdefault(at, []).append(line)

    client.on_update(on_update)
    return ends


def transcript(
    projection: SessionProjection, verdicts: Verdicts, ends: dict[int, list[str]] | None = None
) -> str:
    """The conversation as plain text, in first-seen order (a verdict is Crow's note
    only if its proof holds), with ``[cancelled]``/``[error: …]`` where ``ends`` says
    a turn ended so (after that many entries)."""
    ends = ends or {}
    lines: list[str] = list(ends.get(0, []))
    for shown, entry in enumerate(projection.entries, 1):
        if isinstance(entry, Message):
            if entry.role == "user":
                lines.append(f"you> {entry.text}")
            elif entry.role == "thought":
                lines.append(f"… {' '.join(entry.text.split())}")
            elif verdicts.is_note(entry):
                lines.append(f"crow: {entry.text}")
            else:
                lines.append(entry.text)
        elif isinstance(entry, ToolCall):
            lines.append(f"{STATUS_MARKS.get(entry.status, '?')} {entry.title or entry.kind}")
        for end in ends.get(shown, []):  # "[error: X]" after Crow's note saying X: "[error]"
            said = end.removeprefix("[error: ").removesuffix("]")
            lines.append("[error]" if end != said and lines and said in lines[-1] else end)
    return "\n".join(lines) + ("\n" if lines else "")
