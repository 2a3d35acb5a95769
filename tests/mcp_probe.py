"""A small MCP server for Crow's tool tests: ``python tests/mcp_probe.py [--marker DIR]``.

Tools, with Crow's ``crow/kind`` metadata:
- ``echo(text)`` (read): returns the text;
- ``touch(path, text)`` (edit): "writes" a file and describes it with ``crow/diff``;
- ``shell(command)`` (execute): streams three progress lines, exit code 3;
- ``slow(seconds)`` (read): sleeps; on cancellation writes ``cancelled`` to the marker dir;
- ``crash()`` (other): kills this server process;
- ``big(kib)`` (read): returns that many KiB of numbered lines.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import CallToolResult, TextContent


def build(marker: Path | None) -> MCPServer:
    server = MCPServer("probe")

    @server.tool(meta={"crow/kind": "read"})
    def echo(text: str) -> str:
        """Return the text unchanged."""
        return text

    @server.tool(meta={"crow/kind": "read"})
    def big(kib: int) -> str:
        """Return ``kib`` KiB of numbered lines (each 64 bytes)."""
        return "".join(f"line {n:06d} " + "." * 51 + "\n" for n in range(kib * 16))

    @server.tool(meta={"crow/kind": "edit"})
    def touch(path: str, text: str = "new") -> CallToolResult:
        """Pretend to write a file."""
        absolute = f"/tmp/probe/{path}"
        patch = (
            f"diff --git a{absolute} b{absolute}\n--- /dev/null\n+++ {absolute}\n"
            f"@@ -0,0 +1 @@\n+{text}\n"
        )
        return CallToolResult(
            content=[TextContent(type="text", text=f"wrote {absolute}")],
            meta={
                "crow/diff": {
                    "changes": [{"operation": "add", "path": absolute, "fileType": "text"}],
                    "patch": patch,
                },
                "crow/locations": [{"path": absolute, "line": 1}],
            },
        )

    @server.tool(meta={"crow/kind": "execute"})
    async def shell(command: str, ctx: Context) -> CallToolResult:
        """Pretend to run a command, streaming its output."""
        for i in range(3):
            await ctx.report_progress(i + 1, 3, f"line {i} of {command}\n")
        return CallToolResult(
            content=[TextContent(type="text", text="done\n[exit code 3]")],
            meta={"crow/exitCode": 3, "crow/command": command},
        )

    @server.tool(meta={"crow/kind": "read"})
    async def slow(seconds: float) -> str:
        """Sleep, then say so."""
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            if marker is not None:
                (marker / "cancelled").write_text("yes")
            raise
        return f"slept {seconds}"

    @server.tool()
    def crash() -> str:
        """Kill this server."""
        os._exit(9)

    return server


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--marker", type=Path)
    args = parser.parse_args()
    build(args.marker).run("stdio")
    return 0


if __name__ == "__main__":
    sys.exit(main())
