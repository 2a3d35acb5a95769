"""Run the agent on stdio: one process, one connection, a shared durable store."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
from importlib.metadata import version

from crow.acp import AgentSide, open_stdio, schema
from crow.config import Config
from crow.store.db import Store

from .service import CrowAgent

__all__ = ["serve_stdio"]

log = logging.getLogger("crow.agent")


def agent_info() -> schema.Implementation:
    return schema.Implementation(name="crow", title="Crow", version=version("crow-cli"))


async def serve_stdio(config: Config) -> None:
    store = Store(config.paths.store)
    try:
        agent = CrowAgent(config, store)
        side = AgentSide(await open_stdio(), info=agent_info(), capabilities=agent.capabilities())
        agent.attach(side)
        warm = asyncio.create_task(_warm_up(side))
        try:
            await side.serve()
        finally:
            warm.cancel()
            agent.detach(side)
            await agent.shutdown()
    finally:
        store.close()


async def _warm_up(side: AgentSide) -> None:
    """Import the model and MCP SDKs in the background once the client is served:
    together they take ~1 s, which would otherwise delay initialize or the first turn."""
    await side.initialized.wait()
    for module in ("openai", "mcp", "mcp.server.mcpserver"):
        with contextlib.suppress(ImportError):
            await asyncio.to_thread(importlib.import_module, module)
