"""The ``crow`` command line."""

from __future__ import annotations

import subprocess
import sys


def crow(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "crow", *args],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def test_help_lists_the_commands():
    result = crow("--help")
    assert result.returncode == 0 and "serve" in result.stdout and "init" in result.stdout


def test_serve_logs_to_the_home_and_keeps_stdout_clean(crow_home):
    result = crow("serve")  # stdin is empty: it starts, sees EOF and exits
    assert result.returncode == 0 and result.stdout == ""
    assert (crow_home / "logs" / "crow.log").exists()
    assert (crow_home / "crow.db").exists()


async def test_crow_mcp_fs_serves_the_built_in_server_to_any_mcp_host(tmp_path):
    import asyncio

    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    (tmp_path / "hello.txt").write_text("hi there\n")
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "crow", "mcp", "fs", "--root", str(tmp_path)]
    )
    async with asyncio.timeout(30), Client(params) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert {"read", "write", "edit", "list", "glob", "grep"} <= names
        result = await client.call_tool("read", {"path": "hello.txt"})
        assert "hi there" in result.content[0].text
