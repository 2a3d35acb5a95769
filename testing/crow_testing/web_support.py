"""For the web app's tests and bench: how Chromium is started, and a long session
written straight into a store (``seed_session``)."""

from __future__ import annotations

from pathlib import Path

import orjson

from crow.store.sqlite import SqliteStore

#: Debian's chromium, headless, and nothing that reaches out (no network here, and
#: nothing to wait for).
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

#: Updates in one seeded turn.
PER_TURN = 5


def seed_session(store_path: Path, session_id: str, cwd: str, updates: int) -> int:
    """Write a session of ``updates`` updates (rounded down to whole turns of a
    prompt, a thought, a tool call in two updates and a reply, as crow serve logs
    them); returns the turns."""
    store = SqliteStore(store_path)
    try:
        store.create_session(session_id=session_id, cwd=cwd, now="2026-01-01T00:00:00Z")
        store.update_session(session_id, title=f"a long session ({updates} updates)")
        turns = updates // PER_TURN
        batch = []
        for n in range(turns):
            for update in _turn(n):
                batch.append((session_id, orjson.dumps(update), None, None, None))
        store.append_updates(batch)
        return turns
    finally:
        store.close()


def _turn(n: int) -> list[dict[str, object]]:
    call = f"tc_seed_{n}"
    return [
        {
            "sessionUpdate": "user_message",
            "messageId": f"msg_u_{n}",
            "content": [{"type": "text", "text": f"question number {n}"}],
        },
        {
            "sessionUpdate": "agent_thought",
            "messageId": f"msg_t_{n}",
            "content": [{"type": "text", "text": f"thinking about {n}"}],
        },
        {
            "sessionUpdate": "tool_call_update",
            "toolCallId": call,
            "title": f"Read file_{n}.py",
            "kind": "read",
            "status": "in_progress",
            "rawInput": {"path": f"/tmp/file_{n}.py"},
        },
        {
            "sessionUpdate": "tool_call_update",
            "toolCallId": call,
            "status": "completed",
            "rawOutput": {"text": f"def f{n}():\n    return {n}\n"},
        },
        {
            "sessionUpdate": "agent_message",
            "messageId": f"msg_a_{n}",
            "content": [{"type": "text", "text": f"Answer **{n}**:\n\n```python\nprint({n})\n```"}],
        },
    ]
