"""Run the agent over streamable HTTP + SSE and WebSocket: one long-lived process.

Many connections share one agent and one store; several clients may watch one
session.  A client that goes away mid-turn does not stop the turn.

Security: loopback by default.  Binding any other address needs a token (from
``[server] token`` in config.toml, or ``--new-token``, printed once to stderr),
presented as ``Authorization: Bearer <token>``; a missing or wrong one gets 401
before any ACP processing.  A request with an ``Origin`` header (a web page) is
refused with 403 unless the origin is listed in ``[server] allowed_origins``.
"""

from __future__ import annotations

import asyncio
import hmac
import inspect
import ipaddress
import logging
import secrets
import sys
from dataclasses import dataclass
from typing import Any

from starlette.responses import JSONResponse, Response
from starlette.types import Scope

from crow.acp.transports.http_server import AcpHttpApp, HttpLimits, HttpTransport
from crow.config import Config
from crow.store.db import Store

from .serve import serve_connection
from .service import CrowAgent

__all__ = ["HttpSecurity", "ServeError", "serve_http"]

log = logging.getLogger("crow.agent")


class ServeError(Exception):
    """The server cannot start as asked (one line for people)."""


@dataclass(frozen=True, kw_only=True)
class HttpSecurity:
    token: str | None = None
    allowed_origins: tuple[str, ...] = ()

    def check(self, scope: Scope) -> Response | None:
        # latin-1 decodes any bytes: a header that is not UTF-8 cannot fail here.
        headers = {
            k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])
        }
        if self.token is not None:
            given = headers.get("authorization", "").encode("latin-1")
            expected = f"Bearer {self.token}".encode()
            if not hmac.compare_digest(given, expected):
                return JSONResponse(
                    {"error": "missing or wrong bearer token"},
                    401,
                    headers={"WWW-Authenticate": "Bearer"},
                )
        origin = headers.get("origin")
        if origin is not None and origin not in self.allowed_origins:
            return JSONResponse({"error": f"origin {origin} is not allowed"}, 403)
        return None


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def security_for(
    host: str, token: str | None, new_token: bool, origins: tuple[str, ...]
) -> HttpSecurity:
    """Raises ServeError for a non-loopback bind without a token."""
    if new_token:
        token = secrets.token_urlsafe(24)
        print(f"crow: the bearer token for this server is {token}", file=sys.stderr, flush=True)
    if token is None and not is_loopback(host):
        raise ServeError(
            f"binding {host} exposes the agent to the network: set server.token in "
            "config.toml, or pass --new-token to generate one"
        )
    return HttpSecurity(token=token, allowed_origins=origins)


async def serve_http(
    config: Config,
    host: str,
    port: int,
    security: HttpSecurity,
    *,
    limits: HttpLimits | None = None,
) -> None:
    import uvicorn

    store = Store(config.paths.store)
    agent = CrowAgent(config, store)

    async def serve(transport: HttpTransport) -> None:
        await serve_connection(agent, transport)  # v1 or v2, by its initialize

    async def session_exists(session_id: str) -> bool:
        found: Any = store.get_session(session_id)
        if inspect.isawaitable(found):  # the store's API may be async
            found = await found
        return found is not None

    app = AcpHttpApp(serve, limits=limits, check=security.check, session_exists=session_exists)
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level="warning",
            lifespan="on",
            ws="websockets-sansio",
            ws_max_size=app.limits.max_message_bytes,
            timeout_graceful_shutdown=3,
        )
    )
    announce = asyncio.create_task(_announce(server, host))
    try:
        await server.serve()
    finally:
        announce.cancel()
        await agent.shutdown()
        store.close()


async def _announce(server: object, host: str) -> None:
    """Print the URL once the socket is bound (port 0 picks a free one)."""
    while not getattr(server, "started", False):
        await asyncio.sleep(0.02)
    sockets = [s for srv in getattr(server, "servers", []) for s in srv.sockets]
    port = sockets[0].getsockname()[1] if sockets else "?"
    shown = f"[{host}]" if ":" in host else host
    print(f"crow: serving ACP at http://{shown}:{port}/acp", file=sys.stderr, flush=True)
