"""The proxy role: a component between a predecessor (the client side) and a successor.

A proxy of a chain (PROXY-CHAINS.md §1) has one connection, to its conductor.  Plain
messages on it come from the predecessor; messages wrapped in ``_proxy/successor``
come from the successor, and to reach the successor a proxy wraps what it sends.
Responses are never wrapped.  ``ProxySide`` hides the envelope: a handler is
registered for one side's requests or notifications, and whatever has no handler is
forwarded unchanged to the other side, so an empty ``ProxySide`` is a pass-through.

    proxy = ProxySide(await open_stdio())
    proxy.on_successor_notification("session/update", prefix_replies)
    await proxy.serve()

Initialization: the conductor sends ``_proxy/initialize`` (the client's ``initialize``
params); by default it goes on to the successor as ``initialize`` and the successor's
answer comes back.  A plain ``initialize`` is refused (-32600), as the Rust SDK does.
A proxy speaks whichever version the chain negotiated and converts nothing.

Cancellation is hop by hop: the conductor's ``$/cancel_request`` (plain, or wrapped
for a request that came from the successor) cancels the handler, and a forwarded
request the handler was waiting on is withdrawn on its own hop, wrapped when it went
wrapped.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from .chain import (
    NOT_PROXY_INITIALIZE,
    ONLY_CONDUCTOR,
    PROXY_INITIALIZE,
    PROXY_SUCCESSOR,
    refusal,
    unwrap,
    wrap,
    wrap_message,
)
from .connection import CANCEL_REQUEST, INITIALIZE
from .errors import AcpError
from .jsonrpc import Peer, Transport

__all__ = ["Handler", "NotificationHandler", "ProxySide"]

log = logging.getLogger("crow.acp.proxy")

Handler = Callable[[Any], Awaitable[Any]]
NotificationHandler = Callable[[Any], Awaitable[None]]


class ProxySide:
    """One proxy's connection to its conductor, with per-side handlers."""

    def __init__(self, transport: Transport) -> None:
        self.peer = Peer(
            transport, on_request=self._on_request, on_notification=self._on_notification
        )
        self._requests: dict[tuple[str, str], Handler] = {}
        self._notifications: dict[tuple[str, str], NotificationHandler] = {}
        #: The version the chain runs, from ``_proxy/initialize`` (None before it).
        self.protocol_version: int | None = None

    @property
    def v1(self) -> bool:
        """The chain runs ACP v1 (its shapes: ``agentCapabilities``, no message ids)."""
        return self.protocol_version == 1

    # ---- handlers -------------------------------------------------------------
    def on_predecessor(self, method: str, fn: Handler) -> None:
        """Answer the predecessor's ``method`` requests with ``await fn(params)``."""
        self._requests[("predecessor", method)] = fn

    def on_successor(self, method: str, fn: Handler) -> None:
        """Answer the successor's ``method`` requests with ``await fn(params)``."""
        self._requests[("successor", method)] = fn

    def on_predecessor_notification(self, method: str, fn: NotificationHandler) -> None:
        self._notifications[("predecessor", method)] = fn

    def on_successor_notification(self, method: str, fn: NotificationHandler) -> None:
        self._notifications[("successor", method)] = fn

    # ---- sending --------------------------------------------------------------
    async def request_successor(self, method: str, params: Any) -> Any:
        """A request to the successor (wrapped); its result, or its error raised."""
        return await self.peer.request(PROXY_SUCCESSOR, wrap(method, params), envelope=wrap_message)

    async def notify_successor(self, method: str, params: Any) -> None:
        await self.peer.notify(PROXY_SUCCESSOR, wrap(method, params))

    async def request_predecessor(self, method: str, params: Any) -> Any:
        return await self.peer.request(method, params)

    async def notify_predecessor(self, method: str, params: Any) -> None:
        await self.peer.notify(method, params)

    async def serve(self) -> None:
        """Serve until the conductor closes the connection."""
        await self.peer.run()

    # ---- dispatch -------------------------------------------------------------
    async def _on_request(self, method: str, params: Any) -> Any:
        if method == PROXY_SUCCESSOR:
            inner, inner_params = unwrap(params)
            if inner in (INITIALIZE, PROXY_INITIALIZE):
                raise refusal(ONLY_CONDUCTOR)
            handler = self._requests.get(("successor", inner))
            if handler is not None:
                return await handler(inner_params)
            return await self.request_predecessor(inner, inner_params)
        if method == INITIALIZE:
            raise refusal(NOT_PROXY_INITIALIZE)
        if method == PROXY_INITIALIZE:
            version = (params or {}).get("protocolVersion")
            self.protocol_version = version if isinstance(version, int) else None
        handler = self._requests.get(("predecessor", method))
        if handler is not None:
            return await handler(params)
        forward_as = INITIALIZE if method == PROXY_INITIALIZE else method
        return await self.request_successor(forward_as, params)

    async def _on_notification(self, method: str, params: Any) -> None:
        if method != PROXY_SUCCESSOR:
            handler = self._notifications.get(("predecessor", method))
            await (handler(params) if handler else self.notify_successor(method, params))
            return
        try:
            inner, inner_params = unwrap(params)
        except AcpError as exc:
            log.warning("dropping a malformed %s notification: %s", PROXY_SUCCESSOR, exc)
            return
        if inner == CANCEL_REQUEST:  # the conductor withdraws a request it sent wrapped
            target = (inner_params or {}).get("requestId")
            if isinstance(target, (int, str)):
                self.peer.cancel_inbound(target)
            return
        handler = self._notifications.get(("successor", inner))
        await (handler(inner_params) if handler else self.notify_predecessor(inner, inner_params))
