"""Reaching an agent: spawn ``crow serve`` (or any ACP v2 agent command) on stdio,
or attach to a running server's URL.

Every line-client command goes through ``connect``: it starts (or reaches) the
agent, initializes, and hands back a ``ClientSide`` whose projections every
renderer reads.  Failures to start or to speak v2 become ``AgentUnavailable``
with one sentence for people.
"""

from __future__ import annotations

import contextlib
import shlex
import sys
from collections.abc import AsyncIterator, Sequence
from importlib.metadata import version
from typing import Any

from crow.acp import AcpError, ClientSide, schema, spawn
from crow.acp.transports.http_client import connect_url, split_token
from crow.config import Paths
from crow.runtime import runtime_file
from crow.tls import client_context

__all__ = ["AgentUnavailable", "connect", "default_command"]


class AgentUnavailable(Exception):
    """The agent could not be started, or does not speak ACP v2."""


def default_command(options: Sequence[str] = ()) -> list[str]:
    """This Python's ``crow serve``: the agent the line client uses by default."""
    return [sys.executable, "-m", "crow", "serve", *options]


@contextlib.asynccontextmanager
async def connect(
    command: str | None,
    *,
    url: str | None = None,
    token: str | None = None,
    on_permission: Any = None,
    serve_options: Sequence[str] = (),
) -> AsyncIterator[ClientSide]:
    """An initialized client connected to the agent: spawned from ``command`` (default
    ``crow serve`` with ``serve_options``) or reached at ``url``; closed (and a
    spawned agent ended) after.

    Without ``token``, the one in ``url`` (``?token=``) or else the one a live local
    ``crow serve --http`` at that address wrote to its runtime file is sent."""
    argv = shlex.split(command) if command else default_command(serve_options)
    if url and not token and split_token(url)[1] is None:
        token = runtime_file.find_token(Paths.from_env().run, url)
    transport: Any
    try:
        tls = client_context() if url and url.startswith(("https:", "wss:")) else None
        transport = await connect_url(url, token=token, tls=tls) if url else await spawn(argv)
    except ConnectionError as exc:
        raise AgentUnavailable(str(exc)) from None
    if url:
        argv = [split_token(url)[0]]  # named in errors: without its token
    info = schema.Implementation(name="crow", title="Crow line client", version=version("crow-cli"))
    client = ClientSide(transport, info=info, on_permission=on_permission)
    async with client:
        try:
            await client.initialize()
        except (AcpError, ConnectionError) as exc:
            status = transport.process.returncode if getattr(transport, "process", None) else None
            failure = getattr(transport, "failure", None)  # why an HTTP server refused
            if failure:
                raise AgentUnavailable(failure) from None
            detail = getattr(exc, "message", None) or str(exc) or "the connection closed"
            if status is not None:
                detail += f" (the agent exited with status {status})"
            raise AgentUnavailable(
                f"{argv[0]} did not start as an ACP v2 agent: {detail}"
            ) from None
        yield client
