"""``crow sessions``: list, show (the replayed conversation as text), delete.

The options and what they mean for people are in ``crow.client.args.SESSIONS_HELP``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from crow.acp import AcpError, ClientSide, Message, SessionNotFound, SessionProjection, ToolCall

from .connect import AgentUnavailable, connect
from .render import STATUS_MARKS
from .session_ids import AmbiguousSession, resolve
from .verifying import Verdicts

__all__ = ["find", "main", "sessions", "transcript"]

EXIT_CONNECTION = 7
EXIT_NOT_FOUND = 10  # no such session: as crow run --session and crow chat --session


def main(args: argparse.Namespace) -> int:
    if args.action != "list" and not args.session:
        print(f"crow: sessions {args.action} needs a session id", file=sys.stderr)
        return 2
    try:
        return asyncio.run(_main(args))
    except AgentUnavailable as exc:
        print(f"crow: {exc}", file=sys.stderr)
        return EXIT_CONNECTION
    except AmbiguousSession as exc:
        print(f"crow: {exc}", file=sys.stderr)
        return 2
    except SessionNotFound:
        print(f"crow: no session {args.session} (crow sessions lists them)", file=sys.stderr)
        return EXIT_NOT_FOUND
    except (AcpError, ConnectionError) as exc:
        print(f"crow: {getattr(exc, 'message', None) or exc}", file=sys.stderr)
        return EXIT_CONNECTION


async def _main(args: argparse.Namespace) -> int:
    async with connect(args.command, url=args.url, token=args.token) as client:
        if args.action == "list":
            return await _list(client, args.cwd)
        info = await find(client, await resolve(client, args.session))
        if info is None:
            raise SessionNotFound(args.session)
        if args.action == "delete":
            await client.delete_session(info.session_id)
            print(f"deleted {info.session_id}")
            return 0
        session = await client.resume_session(info.session_id, info.cwd, replay=True)
        sys.stdout.write(transcript(session.projection, Verdicts.of_session(session)))
        await session.close()
        return 0


async def sessions(client: ClientSide, cwd: str | None = None) -> list[Any]:
    """Every session the agent lists (all pages)."""
    found: list[Any] = []
    cursor = None
    while True:
        page = await client.list_sessions(cwd=cwd, cursor=cursor)
        found += page.sessions
        cursor = page.next_cursor if isinstance(page.next_cursor, str) else None
        if not cursor:
            return found


async def find(client: ClientSide, session_id: str) -> Any:
    return next((s for s in await sessions(client) if s.session_id == session_id), None)


async def _list(client: ClientSide, cwd: str | None) -> int:
    rows = [
        (s.session_id, _value(s.updated_at), s.cwd, _value(s.title))
        for s in await sessions(client, cwd)
    ]
    if not rows:
        print("no sessions", file=sys.stderr)
        return 0
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    print(f"{'ID':<{widths[0]}}  {'UPDATED':<{widths[1]}}  {'CWD':<{widths[2]}}  TITLE")
    for row in rows:
        print(f"{row[0]:<{widths[0]}}  {row[1]:<{widths[1]}}  {row[2]:<{widths[2]}}  {row[3]}")
    return 0


def _value(value: Any) -> str:
    return value if isinstance(value, str) else ""


def transcript(projection: SessionProjection, verdicts: Verdicts) -> str:
    """The conversation as plain text, in first-seen order (a verdict is Crow's note
    only if its proof holds)."""
    lines: list[str] = []
    for entry in projection.entries:
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
    return "\n".join(lines) + ("\n" if lines else "")
