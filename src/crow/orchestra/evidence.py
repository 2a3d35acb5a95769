"""Evidence for a verdict: a check command run in the worker's folder through Crow's
terminal MCP server, in process and time-limited; a failing check fails the turn."""

from __future__ import annotations

from pathlib import Path

from ..extensions import EXIT_CODE
from .verdict import Check

__all__ = ["CHECK_TAIL_CHARS", "run_check"]

CHECK_TAIL_CHARS = 2000


async def run_check(command: str, cwd: str, timeout_s: float = 300.0) -> Check:
    """Run ``command`` in ``cwd`` through Crow's terminal MCP server (in process)."""
    # mcp and the terminal server load when a check runs, not when a judge starts.
    from mcp import Client

    from crow.servers.terminal import build_server

    server = build_server(Path(cwd), default_timeout_s=timeout_s)
    async with Client(server) as terminal:
        result = await terminal.call_tool("run", {"command": command, "timeout_s": timeout_s})
    text = "".join(getattr(block, "text", "") for block in result.content)
    meta = result.meta or {}
    code = meta.get(EXIT_CODE)
    return Check(command, code if isinstance(code, int) else None, text[-CHECK_TAIL_CHARS:])
