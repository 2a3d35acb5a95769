"""Built-in servers shared by the sessions of one process, each connection in its own scope.

One server object per built-in kind (and settings) serves every session of the process
(`shared`): what a server costs to build (its tools' argument models) is paid once.  What
a session may reach (its roots, its terminal's directory and jobs, its memory place) is
its connection's *scope*: Crow's tool hub names it when it connects (`Scoped`), the
server's lifespan reads it then (`scoped_lifespan`, one lifespan per connection) and
keeps it in that connection's state, where every tool call of the connection finds it.
A tool call's arguments and ``_meta`` never name it, so neither the model nor another
session can widen it; and a connection's state (a terminal's background jobs) ends with
the connection.

The scope travels from the hub to the lifespan in a context variable that is set only
while the connection opens (`opening`).  A server that runs alone (``crow mcp fs``)
gets a default scope when built; a shared one has none, and a connection that brings
no scope is refused.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = [
    "Scoped",
    "connection_state",
    "open_connections",
    "opening",
    "scoped_lifespan",
    "shared",
]

log = logging.getLogger("crow.servers")

S = TypeVar("S")
T = TypeVar("T")

_SCOPE: ContextVar[Any] = ContextVar("crow_server_scope", default=None)
_open: Counter[str] = Counter()


@dataclass(frozen=True, slots=True)
class Scoped:
    """A (shared) built-in server and the scope of one connection to it."""

    server: Any  # an MCPServer made with a scoped_lifespan
    scope: Any  # what the connection reaches: Roots, a directory, a MemoryPlace; None: nothing


@contextmanager
def opening(scope: Any) -> Iterator[None]:
    """The scope of the connection opened inside this block (by the hub, never a client)."""
    token = _SCOPE.set(scope)
    try:
        yield
    finally:
        _SCOPE.reset(token)


def scoped_lifespan(
    enter: Callable[[S], AbstractAsyncContextManager[T]], *, name: str, default: S | None = None
) -> Callable[[Any], AbstractAsyncContextManager[T]]:
    """A server lifespan making each connection's state with ``enter(scope)``: the scope
    its opener gave, else ``default`` (a server run alone); without either it refuses."""

    @asynccontextmanager
    async def lifespan(_server: Any) -> AsyncIterator[T]:
        scope = _SCOPE.get()
        if scope is None:
            scope = default
        if scope is None:
            raise RuntimeError(
                f"the shared {name} server was connected without a scope: "
                "connect it through crow.tools.hub with a Scoped target"
            )
        _open[name] += 1
        try:
            async with enter(scope) as state:
                yield state
        finally:
            _open[name] -= 1

    return lifespan


def open_connections(name: str) -> int:
    """How many connections to the ``name`` servers (scoped ones) are open now."""
    return _open[name]


def connection_state(ctx: Any, kind: type[T]) -> T:
    """The calling connection's state (an MCPServer tool's ``ctx``), made by its lifespan."""
    state = ctx.request_context.lifespan_context
    if not isinstance(state, kind):
        raise RuntimeError(f"this connection has no {kind.__name__}: it opened without a scope")
    return state


_servers: dict[tuple[Any, ...], Any] = {}
_lock = threading.Lock()


def shared(key: tuple[Any, ...], build: Callable[[], T]) -> T:
    """The process's one server for ``key`` (its kind and the settings it is built
    with), built by ``build`` the first time it is asked for."""
    with _lock:
        server = _servers.get(key)
        if server is None:
            server = _servers[key] = build()
            log.info(
                "built-in server %s made (%s), shared by this process's sessions",
                key[0],
                f"{id(server):x}",
            )
        return server
