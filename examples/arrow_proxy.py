"""An ACP proxy for chains: prefixes the agent's replies with ">" (the Rust SDK's arrow proxy).

    crow conductor agent "python examples/arrow_proxy.py" "python examples/echo_agent.py"
    python examples/arrow_proxy.py [--prefix TEXT]     ("" : a pure pass-through)

Everything passes through unchanged (ProxySide's default), except the successor's
``session/update`` notifications that carry the agent's reply: the first text of
each reply message gets the prefix, in its first ``agent_message_chunk`` and in
the ``agent_message`` snapshot (v2), so the chunks still add up to the snapshot.
v1 replies have no message ids: every chunk is prefixed, as the Rust one does.
Stacking k of them gives k prefixes.

stdout carries JSON-RPC only; logs go to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from typing import Any

from crow.acp import open_stdio
from crow.acp.proxy import ProxySide


class Arrow:
    def __init__(self, proxy: ProxySide, prefix: str) -> None:
        self.proxy = proxy
        self.prefix = prefix
        self.prefixed: set[str] = set()  # reply message ids whose first chunk has it
        if prefix:
            proxy.on_successor_notification("session/update", self.on_update)

    async def on_update(self, params: Any) -> None:
        update = params.get("update") if isinstance(params, dict) else None
        if isinstance(update, dict):
            kind = update.get("sessionUpdate")
            if kind == "agent_message_chunk":
                self._prefix_chunk(update)
            elif kind == "agent_message":
                self._prefix_first_text(update.get("content"))
        await self.proxy.notify_predecessor("session/update", params)

    def _prefix_chunk(self, update: dict[str, Any]) -> None:
        content = update.get("content")
        if not (isinstance(content, dict) and content.get("type") == "text"):
            return
        message_id = update.get("messageId")
        if isinstance(message_id, str):
            if message_id in self.prefixed:
                return
            self.prefixed.add(message_id)
        content["text"] = self.prefix + str(content.get("text", ""))

    def _prefix_first_text(self, blocks: Any) -> None:
        for block in blocks if isinstance(blocks, list) else []:
            if isinstance(block, dict) and block.get("type") == "text":
                block["text"] = self.prefix + str(block.get("text", ""))
                return


async def main(prefix: str) -> None:
    proxy = ProxySide(await open_stdio())
    Arrow(proxy, prefix)
    await proxy.serve()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="An ACP proxy prefixing the agent's replies.")
    parser.add_argument("--prefix", default=">", help='the prefix ("" passes all through)')
    logging.basicConfig(level=logging.WARNING)  # stderr
    asyncio.run(main(parser.parse_args().prefix))
