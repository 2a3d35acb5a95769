"""Crow's echo agent (``examples/echo_agent.py``) served over HTTP + SSE and WebSocket.

    python bench/crow_echo_http.py [--port 0] [--chunks 10]

The same transport as ``crow serve --http`` (``crow.acp.transports.http_server``)
with the in-memory echo agent behind it (one per connection, as the TS SDK's
echo server has): what the transport and the ACP layer cost without Crow's
store, model client and turn loop.  Prints ``serving ACP at URL`` on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))

from echo_agent import EchoAgent  # noqa: E402

from crow.acp import AgentSide, schema  # noqa: E402
from crow.acp.transports.http_server import AcpHttpApp, HttpTransport  # noqa: E402

INFO = schema.Implementation(name="crow-echo-agent", title="Crow echo agent", version="0.1")


async def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--chunks", type=int, default=10)
    args = parser.parse_args()

    async def serve(transport: HttpTransport) -> None:
        capabilities = schema.AgentCapabilities(session=schema.SessionCapabilities())
        agent = AgentSide(transport, info=INFO, capabilities=capabilities)
        EchoAgent(agent, chunks=args.chunks, delay_s=0)
        await agent.serve()

    app = AcpHttpApp(serve)
    config = uvicorn.Config(
        app, host="127.0.0.1", port=args.port, log_level="warning", ws="websockets-sansio"
    )
    server = uvicorn.Server(config)
    announce = asyncio.create_task(_announce(server))
    await server.serve()
    announce.cancel()


async def _announce(server: object) -> None:
    while not getattr(server, "started", False):
        await asyncio.sleep(0.02)
    sockets = (s for srv in getattr(server, "servers", []) for s in srv.sockets)
    port = next(sockets).getsockname()[1]
    print(f"crow echo: serving ACP at http://127.0.0.1:{port}/acp", file=sys.stderr, flush=True)


if __name__ == "__main__":
    asyncio.run(main())
