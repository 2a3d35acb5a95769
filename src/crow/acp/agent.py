"""The agent role: typed handlers, ``initialize``, and sending to the client.

``AgentSide`` serves one connection.  Register a handler per method with
``handle(method, fn)``: ``fn`` receives the validated params model (from
``schema.AGENT_METHODS``) and returns the result model, a dict, or None for
``{}``.  The peer turns exceptions into JSON-RPC errors, a params
``ValidationError`` into ``-32602``.

``initialize`` is built in (ACP-V2.md §3): version 2 or newer is answered with
2 and this agent's ``info`` and ``capabilities``; an older version gets
``-32022`` with ``{requested, supported}`` (version 1 is served by the router,
not here).  Until it succeeds every other request gets ``-32600``.

Work that outlives a request (a prompt turn) is started with ``spawn``: the
agent side owns those tasks and cancels them when the connection ends.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from pydantic import ValidationError

from . import schema
from .connection import Connection
from .errors import ConnectionClosed, MethodNotFound, UnsupportedProtocolVersion
from .jsonrpc import Peer, Transport

__all__ = ["PROTOCOL_VERSION", "AgentSide"]

log = logging.getLogger("crow.acp")

PROTOCOL_VERSION = 2
SUPPORTED_VERSIONS = [PROTOCOL_VERSION]

Handler = Callable[[Any], Awaitable[Any]]


class AgentSide:
    """One connection, seen from the agent."""

    def __init__(
        self,
        transport: Transport,
        *,
        info: schema.Implementation,
        capabilities: schema.AgentCapabilities | None = None,
        accept_batches: bool = False,
    ) -> None:
        self.info = info
        self.capabilities = capabilities or schema.AgentCapabilities()
        self.client_info: schema.Implementation | None = None
        self.client_capabilities: schema.ClientCapabilities | None = None
        self.connection = Connection(require_initialize=True, accept_batches=accept_batches)
        self.peer = Peer(
            transport,
            on_request=self._on_request,
            on_notification=self._on_notification,
            connection=self.connection,
        )
        self._requests: dict[str, tuple[Any, Handler]] = {}  # method: (params type, handler)
        self._notifications: dict[str, tuple[Any, Handler]] = {}
        # Registrations not yet sorted into the two tables above: sorting reads
        # schema.AGENT_METHODS, which imports the models initialize does not need,
        # so it waits for the first other message (see crow.acp.schema).
        self._unsorted: list[tuple[str, Handler, bool]] = []  # (method, fn, notification)
        self._tasks: set[asyncio.Task[Any]] = set()
        #: Set once ``initialize`` has succeeded.
        self.initialized = asyncio.Event()
        # initialize reads the version before the v2 shape: a v1 client's params
        # are not a v2 InitializeRequest, and it deserves -32022, not -32602.
        self._requests["initialize"] = (schema.AcpModel, self._initialize)

    # ---- registration -------------------------------------------------------
    def handle(self, method: str, fn: Handler) -> None:
        """Serve ``method`` with ``fn(params_model)``."""
        self._unsorted.append((method, fn, False))
        if method == "initialize":  # replaces the built-in one from now on
            self._sort_handlers()

    def handle_notification(self, method: str, fn: Handler) -> None:
        """Serve a notification (an extension's, for instance)."""
        self._unsorted.append((method, fn, True))

    def _sort_handlers(self) -> None:
        """File the registrations so far under requests or notifications, in order."""
        for method, fn, notification in self._unsorted:
            params_type, result_type = schema.AGENT_METHODS.get(method, (schema.AcpModel, None))
            if notification or (method in schema.AGENT_METHODS and result_type is None):
                self._notifications[method] = (params_type, fn)
            else:
                self._requests[method] = (params_type, fn)
        self._unsorted.clear()

    # ---- serving ------------------------------------------------------------
    async def serve(self) -> None:
        """Serve until the client goes away; then cancel the spawned work."""
        try:
            await self.peer.run()
        finally:
            tasks = list(self._tasks)
            for task in tasks:
                task.cancel()
            if tasks:
                await asyncio.wait(tasks, timeout=1.0)

    def spawn(self, coro: Coroutine[Any, Any, Any], *, name: str = "acp-work") -> asyncio.Task[Any]:
        """Run work that outlives the request that started it."""
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._finished)
        return task

    def _finished(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None and not isinstance(exc, ConnectionClosed):
            log.error("%s failed", task.get_name(), exc_info=exc)

    # ---- sending ------------------------------------------------------------
    async def send_update(self, session_id: str, update: schema.AcpModel | dict[str, Any]) -> None:
        """Send one ``session/update`` notification."""
        payload = update.to_wire() if isinstance(update, schema.AcpModel) else update
        await self.peer.notify("session/update", {"sessionId": session_id, "update": payload})

    async def request_permission(
        self, params: schema.RequestPermissionRequest
    ) -> schema.RequestPermissionResponse:
        """Ask the client; cancelling the caller withdraws the question (§7.3)."""
        result = await self.peer.request("session/request_permission", params.to_wire())
        return schema.RequestPermissionResponse.model_validate(result)

    # ---- dispatch -----------------------------------------------------------
    async def _on_request(self, method: str, params: dict[str, Any] | None) -> Any:
        if self._unsorted and method != "initialize":
            self._sort_handlers()
        entry = self._requests.get(method)
        if entry is None:
            entry = self._notifications.get(method)
            if entry is None:
                raise MethodNotFound.for_method(method)
            # A notification sent with an id (session/cancel as a request): it
            # runs as the notification and is answered, invalid params -32602.
            params_type, fn = entry
            await fn(schema.adapter(params_type).validate_python(params or {}))
            return {}
        params_type, fn = entry
        result = await fn(schema.adapter(params_type).validate_python(params or {}))
        if result is None:
            return {}
        if isinstance(result, schema.AcpModel):
            return result.to_wire()
        return result

    async def _on_notification(self, method: str, params: dict[str, Any] | None) -> None:
        if self._unsorted:
            self._sort_handlers()
        entry = self._notifications.get(method)
        if entry is None:
            return  # unknown notifications are ignored (§2.3)
        params_type, fn = entry
        try:
            model = schema.adapter(params_type).validate_python(params or {})
        except ValidationError as exc:
            log.warning("dropping malformed %s: %s", method, exc.errors()[0].get("msg"))
            return
        await fn(model)

    async def _initialize(self, raw: schema.AcpModel) -> schema.InitializeResponse:
        requested = (raw.model_extra or {}).get("protocolVersion")
        if type(requested) is int and 0 <= requested < PROTOCOL_VERSION:
            raise UnsupportedProtocolVersion.for_versions(requested, SUPPORTED_VERSIONS)
        params = schema.InitializeRequest.model_validate(raw.model_extra or {})
        self.client_info = params.info
        caps = params.capabilities
        self.client_capabilities = (
            caps if isinstance(caps, schema.ClientCapabilities) else schema.ClientCapabilities()
        )
        self.connection.initialized()
        self.initialized.set()
        return schema.InitializeResponse(
            protocol_version=PROTOCOL_VERSION, info=self.info, capabilities=self.capabilities
        )
