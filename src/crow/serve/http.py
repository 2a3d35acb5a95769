"""Run the agent over streamable HTTP + SSE and WebSocket: one long-lived process.

Many connections share one agent and one store; several clients may watch one
session.  A client that goes away mid-turn does not stop the turn.

Security (issue #11): every request needs the server's token, loopback included,
because any local user or process (or a web page, through DNS rebinding) can
reach a loopback port.  The token is ``[server] token`` from config.toml, or one
generated at start (always a fresh one with ``--new-token``).  It is presented as
``Authorization: Bearer <token>`` (the scheme in any case) or as a ``token`` query
parameter; a missing or wrong one gets 401 before any ACP processing.  The URL
with ``?token=`` is printed once on stderr, and ``crow.runtime.runtime_file`` tells
Crow's own clients.  ``--no-token`` turns it off, on loopback only.

Before the token, the ``Host`` header must name the bound address (for a
loopback bind also ``localhost``, ``127.0.0.1`` or ``[::1]``), with or without
the port, or a name in ``[server] allowed_hosts``; anything else gets 403.  A
wildcard bind (``0.0.0.0``, ``::``) cannot know the names it is reached by and
accepts any ``Host``: there the token is the only guard.  A request with an
``Origin`` header (a web page) is refused with 403 unless the origin is listed
in ``[server] allowed_origins`` or is this server's own: the web app (crow.serve.web)
on the ``Host`` the request names, when the host check named it (not on a wildcard
bind, which takes any name: there only an address, never a name, counts as ours).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hmac
import ipaddress
import logging
import secrets
import signal
import socket
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any
from urllib.parse import parse_qs, quote

from starlette.responses import JSONResponse, Response
from starlette.types import Scope

from crow.acp.transports.http_server import AcpHttpApp, HttpLimits, HttpTransport
from crow.config import Config, ServerSettings
from crow.observe import metrics, tracing
from crow.redact import register_secret
from crow.runtime.gc_tuning import collect_now, settle
from crow.runtime.runtime_file import WILDCARDS, is_loopback, publish

from .probes import ProbesApp
from .stdio import Setup, serve_connection, start_agent
from .web import WebApp

__all__ = ["HttpSecurity", "ServeError", "security_for", "serve_http"]

log = logging.getLogger("crow.agent")

#: Bytes of randomness in a generated token (32 URL-safe characters).
TOKEN_BYTES = 24

NO_TOKEN_WARNING = (
    "crow: WARNING: --no-token: any local user or process (and any web page that can "
    "reach this port) can run commands as you through this server"
)


class ServeError(Exception):
    """The server cannot start as asked (one line for people)."""


class AddressInUse(ServeError):
    """``--http HOST:PORT`` names a port something already listens on."""


@dataclass(frozen=True, kw_only=True)
class HttpSecurity:
    token: str | None = None  # None: no token asked (--no-token)
    allowed_origins: tuple[str, ...] = ()
    allowed_hosts: frozenset[str] | None = None  # None: any Host (a wildcard bind)

    def check(self, scope: Scope) -> Response | None:
        """403 for a foreign Host or Origin, 401 for a missing or wrong token."""
        headers = _headers(scope)
        for refusal in (
            self._host_refusal(headers),
            self._token_refusal(headers, scope),
            self._origin_refusal(headers),
        ):
            if refusal is not None:
                return refusal
        return None

    def check_place(self, scope: Scope) -> Response | None:
        """403 for a foreign Host or Origin (the probes: no token asked)."""
        headers = _headers(scope)
        return self._host_refusal(headers) or self._origin_refusal(headers)

    def check_token(self, scope: Scope) -> Response | None:
        """401 for a missing or wrong token."""
        return self._token_refusal(_headers(scope), scope)

    def _host_refusal(self, headers: dict[str, str]) -> Response | None:
        host = headers.get("host", "").lower()
        if self.allowed_hosts is not None and not _host_allowed(host, self.allowed_hosts):
            return JSONResponse({"error": f"host {host or '(none)'} is not allowed"}, 403)
        return None

    def _origin_refusal(self, headers: dict[str, str]) -> Response | None:
        origin = headers.get("origin")
        if origin is None or origin in self.allowed_origins:
            return None
        if _same_origin(origin, headers) and (self.allowed_hosts is not None or _is_ip(headers)):
            return None  # the web app, on a Host the host check named (no DNS rebinding)
        return JSONResponse({"error": f"origin {origin} is not allowed"}, 403)

    def _token_refusal(self, headers: dict[str, str], scope: Scope) -> Response | None:
        if self.token is None:
            return None
        given = _given_token(headers, scope.get("query_string", b"").decode("latin-1"))
        if hmac.compare_digest(given, self.token.encode()):
            return None
        return JSONResponse(
            {"error": "missing or wrong bearer token"}, 401, headers={"WWW-Authenticate": "Bearer"}
        )


def _headers(scope: Scope) -> dict[str, str]:
    # latin-1 decodes any bytes: a header that is not UTF-8 cannot fail here.
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}


def _same_origin(origin: str, headers: dict[str, str]) -> bool:
    """The page is this server's own (the web app): its origin names the ``Host`` the
    request came to, which the host check has let in.  Behind a TLS proxy that passes
    ``Host`` on, the origin is https."""
    host = headers.get("host", "").lower()
    return bool(host) and origin.lower() in (f"http://{host}", f"https://{host}")


def _is_ip(headers: dict[str, str]) -> bool:
    """The ``Host`` is an address, not a name: no other site's page can have it as
    its origin (DNS rebinding needs a name), so on a wildcard bind it is still ours."""
    host = headers.get("host", "")
    name = host[1:].partition("]")[0] if host.startswith("[") else host.partition(":")[0]
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _given_token(headers: dict[str, str], query: str) -> bytes:
    """The bearer token (any case of the scheme), else the ``token`` query parameter."""
    scheme, _, value = headers.get("authorization", "").strip().partition(" ")
    if scheme.lower() == "bearer":
        return value.strip().encode("latin-1")  # the header's own bytes
    found = parse_qs(query).get("token")
    return found[0].encode() if found else b""


def _host_allowed(host: str, allowed: frozenset[str]) -> bool:
    """``host`` is a Host header: a name or ``[v6]``, then maybe ``:port``."""
    name = host.rpartition("]")[0] + "]" if host.startswith("[") else host.partition(":")[0]
    return host in allowed or name in allowed


def hosts_for(host: str, configured: tuple[str, ...]) -> frozenset[str] | None:
    """The Host names a bind to ``host`` answers to; None (any) for a wildcard."""
    if host in WILDCARDS:
        return None
    names = {f"[{host}]" if ":" in host else host, *configured}
    if is_loopback(host):
        names |= {"localhost", "127.0.0.1", "[::1]"}
    return frozenset(n.lower() for n in names)


def security_for(
    host: str, server: ServerSettings, *, new_token: bool = False, no_token: bool = False
) -> HttpSecurity:
    """The token and the names ``crow serve --http`` asks for.

    Raises ServeError for ``no_token`` on a bind that is not loopback."""
    if no_token and not is_loopback(host):
        raise ServeError(
            f"--no-token is for loopback only: on {host} anyone who can reach the port "
            "could run commands as you"
        )
    if no_token:
        print(NO_TOKEN_WARNING, file=sys.stderr, flush=True)
        token = None
    elif new_token or server.token is None:
        token = secrets.token_urlsafe(TOKEN_BYTES)
    else:
        token = server.token
    if token is not None:
        register_secret(token)  # printed once on purpose; masked in every log line
    return HttpSecurity(
        token=token,
        allowed_origins=server.allowed_origins,
        allowed_hosts=hosts_for(host, server.allowed_hosts),
    )


async def serve_http(
    config: Config,
    host: str,
    port: int,
    security: HttpSecurity,
    *,
    limits: HttpLimits | None = None,
    setup: Setup | None = None,
) -> None:
    listening = bind(host, port)  # before anything starts: a taken port is one line
    with contextlib.closing(listening):
        await _serve_on(listening, config, host, security, limits=limits, setup=setup)


async def _serve_on(
    listening: socket.socket,
    config: Config,
    host: str,
    security: HttpSecurity,
    *,
    limits: HttpLimits | None,
    setup: Setup | None,
) -> None:
    # uvicorn (~60 ms) only for --http: crow serve on stdio imports this module too.
    import uvicorn

    from .ws_bursts import BurstWebSocketProtocol  # uvicorn's too (see above)

    trace(config.server)
    # Without a token nobody is authenticated: no client may name MCP servers (commands).
    agent = start_agent(config, clients_authenticated=security.token is not None)
    if setup is not None:
        setup(agent)
    agent.learn_model(config.chain[0])  # before the first client's initialize, if it can

    count(agent)

    async def serve(transport: HttpTransport) -> None:
        kind = "websocket" if transport.websocket else "http"
        metrics.connected(kind, +1)
        try:
            await serve_connection(agent, transport)  # v1 or v2, by its initialize
        finally:
            metrics.connected(kind, -1)

    acp = AcpHttpApp(serve, limits=limits, check=security.check, on_expired=collect_now)
    probes = ProbesApp(
        acp,
        agent,
        check_place=security.check_place,
        check_token=security.check_token,
        metrics_public=config.server.metrics_public,
    )
    app = WebApp(probes, check_place=security.check_place)
    published: list[Path] = []  # the runtime file, once written
    stopped_by: list[int] = []  # the signals that stopped the server (SIGINT, SIGTERM)
    hurry = asyncio.Event()  # Ctrl-C again: the running turns get no more grace
    loop = asyncio.get_running_loop()

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            # uvicorn's raises the signals again as it returns, before the finally
            # below has closed the store: a SIGTERM ended the process there, a SIGINT
            # cancelled the close.  They are raised after it instead (_leave_as_asked).
            if threading.current_thread() is not threading.main_thread():
                yield
                return
            handled = (signal.SIGINT, signal.SIGTERM)
            before = {sig: signal.signal(sig, self.handle_exit) for sig in handled}
            try:
                yield
            finally:
                for sig, handler in before.items():
                    signal.signal(sig, handler)

        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            if sig == signal.SIGINT and signal.SIGINT in stopped_by:
                # Ctrl-C again: no more grace for the running turns.  Not uvicorn's
                # force_exit, which skips the app's lifespan end (a traceback).
                loop.call_soon_threadsafe(hurry.set)  # (a signal handler: not hurry.set)
                return
            stopped_by.append(sig)
            _unpublish(published)  # clients stop finding a server that is stopping
            super().handle_exit(sig, frame)

        async def shutdown(self, sockets: Any = None) -> None:
            # Connections are closed (their clients reconnect elsewhere and resume from
            # their cursor); running turns then get the grace period to finish, or
            # until Ctrl-C again after a Ctrl-C.
            acp.close_all()  # their streams end: uvicorn has no response to wait for
            await super().shutdown(sockets=sockets)
            interrupted = signal.SIGINT in stopped_by
            grace_s = config.server.shutdown_grace_s
            await agent.shutdown(grace_s=grace_s, hurry=hurry if interrupted else None)

    server = Server(
        uvicorn.Config(
            app,
            host=host,
            port=listening.getsockname()[1],  # the socket is bound already
            log_level="warning",
            log_config=None,  # uvicorn's records go through Crow's handlers (redacted)
            lifespan="on",
            ws=BurstWebSocketProtocol,
            ws_max_size=acp.limits.max_message_bytes,
            # ACP messages are small JSON, mostly on loopback: compressing each one
            # costs CPU per update and a zlib context (~300 KiB) per connection.
            ws_per_message_deflate=False,
            timeout_graceful_shutdown=3,
            # Crow reads no client address or scheme: uvicorn's X-Forwarded-* middleware
            # would parse the peer's IP on every request for nothing.
            proxy_headers=False,
        )
    )
    announce = asyncio.create_task(
        _announce(server, host, security.token, config.paths.run, published)
    )
    try:
        await server.serve(sockets=[listening])
    finally:
        announce.cancel()
        _unpublish(published)
        await agent.shutdown()
        await agent.store.aclose()
    _leave_as_asked(stopped_by)


def _leave_as_asked(signals: list[int]) -> None:
    """Once stopped and closed: a Ctrl-C leaves as a Ctrl-C does (KeyboardInterrupt,
    crow serve's exit 130), a SIGTERM ends the process by that signal."""
    if signal.SIGINT in signals:
        raise KeyboardInterrupt
    if signal.SIGTERM in signals:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.raise_signal(signal.SIGTERM)


def trace(server: ServerSettings) -> None:
    """Trace turns if ``[server] tracing`` asks (before anything starts: the extra
    may be missing)."""
    if server.tracing:
        try:
            tracing.enable()
        except tracing.TracingUnavailable as exc:
            raise ServeError(str(exc)) from None


def count(agent: Any) -> None:
    """Count for /metrics: what the agent holds is read at each scrape."""
    metrics.enable(
        live_sessions=lambda: len(agent.live),
        running_turns=lambda: sum(
            1 for s in agent.live.values() if s.turn is not None and not s.turn.done
        ),
    )


def bind(host: str, port: int) -> socket.socket:
    """The listening socket (uvicorn's options: SO_REUSEADDR).  Raises AddressInUse
    or ServeError with one line for people, instead of uvicorn's logged error."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as exc:
        raise ServeError(f"--http {host}:{port}: cannot resolve {host} ({exc.strerror})") from None
    listening = socket.socket(family, kind, proto)
    listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listening.bind(address)
    except OSError as exc:
        listening.close()
        if exc.errno == errno.EADDRINUSE:
            raise AddressInUse(
                f"{host}:{port} is already in use (another crow serve?): stop it, or pick "
                "another port (--http HOST:0 takes a free one)"
            ) from None
        raise ServeError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    listening.set_inheritable(True)
    return listening


async def _announce(
    server: Any,
    host: str,
    token: str | None,
    run_dir: Path,
    published: list[Path],
) -> None:
    """Once the socket is bound (port 0 picks a free one): write the runtime file,
    then print the URL, with its token, once.  Before that, what start-up imported
    leaves the collector's view (crow.runtime.gc_tuning)."""
    while not server.started:
        await asyncio.sleep(0.02)
    settle()
    sockets = [s for srv in server.servers for s in srv.sockets]
    port = sockets[0].getsockname()[1] if sockets else 0
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{port}/acp"
    try:
        published.append(publish(run_dir, url=url, token=token))
    except OSError as exc:
        print(f"crow: no runtime file, clients need the token: {exc}", file=sys.stderr)
    shown_url = f"{url}?token={quote(token, safe='')}" if token is not None else url
    print(f"crow: serving ACP at {shown_url}", file=sys.stderr, flush=True)
    # In the fragment: a browser never sends it, so it reaches no log or Referer.
    page = f"http://{shown}:{port}/" + (f"#token={quote(token, safe='')}" if token else "")
    print(f"crow: web app at {page}", file=sys.stderr, flush=True)


def _unpublish(published: list[Path]) -> None:
    while published:
        with contextlib.suppress(OSError):
            published.pop().unlink()
