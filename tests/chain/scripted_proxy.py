"""Scripted proxies for chain tests, written with crow.acp's ProxySide.

python scripted_proxy.py pass              forwards everything (the default)
python scripted_proxy.py bad               initializes its successor with
                                           _proxy/initialize (only a conductor may)
python scripted_proxy.py mcp SERVER_ID     adds {"type": "acp", ...} to every
                                           session/new and session/resume and
                                           serves mcp/* for it
"""

import asyncio
import sys

from crow.acp import open_stdio
from crow.acp.proxy import ProxySide


async def main(mode: str, server: str | None) -> None:
    proxy = ProxySide(await open_stdio())
    if mode == "bad":

        async def bad_initialize(params):
            return await proxy.request_successor("_proxy/initialize", params)

        proxy.on_predecessor("_proxy/initialize", bad_initialize)
    if mode == "mcp":
        entry = {"type": "acp", "name": "test", "serverId": server}

        def setup(method):
            async def inject(params):
                params = dict(params or {})
                params["mcpServers"] = [*params.get("mcpServers", []), entry]
                return await proxy.request_successor(method, params)

            return inject

        for method in ("session/new", "session/resume"):
            proxy.on_predecessor(method, setup(method))

        async def connect(params):
            if params.get("serverId") != server:
                return await proxy.request_predecessor("mcp/connect", params)
            return {"connectionId": "conn-1"}

        async def message(params):
            return {"echo": params.get("method"), "tools": [{"name": "echo"}]}

        async def note(params):
            pass  # the test reads it in the conductor's trace

        async def disconnect(params):
            return {}

        proxy.on_successor("mcp/connect", connect)
        proxy.on_successor("mcp/message", message)
        proxy.on_successor_notification("mcp/message", note)
        proxy.on_successor("mcp/disconnect", disconnect)
    await proxy.serve()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None))
