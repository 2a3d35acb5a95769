"""MCP over ACP's relay runs a server in process through the MCP SDK's in-memory
transport, which mcp 2.x keeps private (``mcp.client._memory``): its import is
guarded, and this checks both that it is where Crow looks and what happens if not."""

from __future__ import annotations

import asyncio
import sys

import pytest
from mcp.server.mcpserver import MCPServer

from crow.tools.acp_mcp import McpRelay, in_memory_transport


def test_the_installed_mcp_has_the_transport_where_crow_looks():
    from mcp.client._memory import InMemoryTransport

    assert isinstance(in_memory_transport(MCPServer("probe")), InMemoryTransport)


async def test_a_release_without_it_fails_the_relay_with_a_sentence(monkeypatch):
    monkeypatch.setitem(sys.modules, "mcp.client._memory", None)  # "moved away"

    async def first(method, params, is_request):
        return None

    relay = McpRelay(MCPServer("probe"), first)
    async with asyncio.timeout(5):  # it used to wait forever for a task that died
        with pytest.raises(ConnectionError, match=r"mcp\.client\._memory"):
            await relay.start()
