"""The conductor: runs a proxy chain and shows it to its client as one agent.

    client → conductor → proxy 0 … proxy N-1 → agent          (agent mode)
    outer conductor → conductor → proxy 0 … proxy N-1 → …      (proxy mode, nested)

The wire rules are PROXY-CHAINS.md's (the Rust SDK's ``agent-client-protocol-conductor``):

- Nothing starts before the client's first message, which must be ``initialize``
  (``_proxy/initialize`` in proxy mode); its raw ``protocolVersion`` picks the chain's
  version (1, or 2 for anything newer, rewritten to 2).  A refused first message
  leaves the conductor failed: every later request gets the same error.
- Then the agent is started, then the proxies; each proxy gets ``_proxy/initialize``
  and answers it after initializing its successor through ``_proxy/successor``.  The
  agent's answer must carry the chain's version.
- Left to right, a message from the client or proxy i-1 goes to proxy i plain, or to
  the agent as it is.  Right to left, a message from the agent or proxy i goes to
  proxy i-1 wrapped in ``_proxy/successor``, or to the client as it is.  In proxy mode
  the last proxy's successor is reached through our own upstream link, wrapped.
- Every forwarded request gets a fresh id on its hop (``<link>/<n>``); its response
  or error goes back unchanged to whoever asked, with their id.  ``$/cancel_request``
  is never forwarded: it is re-issued on the next hop with that hop's id, wrapped
  when the request went wrapped.  (One exception to "unchanged": a refused
  ``_proxy/initialize`` says which component refused it, code and data kept.)
- Routing is synchronous, in the order each link's messages arrive, and every link
  writes in order: an update the agent sends before a response reaches the client
  before it.  A link toward the client that falls far behind pauses the readers of
  the components behind it (backpressure, instead of an unbounded buffer).
- A component that exits takes the chain down: every request the client is still
  owed is answered ``-32603`` naming the component, its exit code and its last
  stderr line, and the conductor exits 1.  So does a chain whose ``initialize`` is
  not answered within ``init_timeout_s`` (``--init-timeout``, 60 s): the error names
  the component the request stopped at (the furthest one asked and still silent).
  When the client goes, the components' stdin closes and they are given a moment to
  exit, then killed.

Components run in process groups of their own, registered with ``crow.runtime.children``:
a conductor killed outright takes them with it.  Their stderr is passed on to ours,
each line prefixed with the component's name.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO, Any

from crow.acp.chain import (
    EXPECTED_INITIALIZE,
    ONLY_CONDUCTOR,
    PROXY_INITIALIZE,
    PROXY_SUCCESSOR,
    refusal,
    select_version,
    unwrap,
    wrap,
    wrap_message,
)
from crow.acp.connection import (
    CANCEL_REQUEST,
    INITIALIZE,
    CancelRequest,
    Event,
    Notification,
    Request,
    RequestId,
    Response,
    Send,
)
from crow.acp.errors import (
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    AcpError,
    InternalError,
)
from crow.acp.jsonrpc import Transport
from crow.acp.transports.stdio import StdioTransport
from crow.runtime import children

from .component import Component, ComponentError
from .link import STDERR_LINE_BYTES, Link, Trace, capped_lines

__all__ = ["Component", "ComponentError", "Conductor", "Trace"]

log = logging.getLogger("crow.conductor")

#: How long a component has to exit after its stdin closes, before it is killed.
EXIT_WAIT_S = 2.0
#: How long the chain has to answer the client's initialize (--init-timeout): an agent
#: that loads a model first may take a while, one that never answers must not hang
#: its client forever.
INIT_TIMEOUT_S = 60.0


@dataclass
class _Pending:
    """A request we forwarded: who asked, with which id, and how to check the answer."""

    origin: Link
    origin_id: RequestId
    agent_initialize: bool = False


@dataclass
class _Forwarded:
    """Where a request went on, for re-issuing its cancellation on that hop."""

    target: Link
    target_id: RequestId
    wrapped: bool
    cancelled: bool = False


class Conductor:
    """One chain.  ``agent`` None: proxy mode (the chain is itself a proxy)."""

    def __init__(
        self,
        proxies: Sequence[Component],
        agent: Component | None,
        *,
        trace: Trace | None = None,
        stderr: IO[str] | None = None,
        init_timeout_s: float = INIT_TIMEOUT_S,
    ) -> None:
        self.proxy_specs = list(proxies)
        self.init_timeout_s = init_timeout_s
        self.agent_spec = agent
        self.trace = trace
        self.stderr = stderr or sys.stderr
        self.upstream: Link | None = None
        self.proxies: list[Link] = []
        self.agent: Link | None = None
        self.version: int | None = None
        self._failure: AcpError | None = None  # a refused first message: sticky
        self._pending: dict[tuple[str, str], _Pending] = {}
        self._forwarded: dict[tuple[str, str], _Forwarded] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._done = asyncio.Event()
        self.exit_code = 0

    @property
    def proxy_mode(self) -> bool:
        return self.agent_spec is None

    # ---- running --------------------------------------------------------------
    async def run(self, upstream: Transport) -> int:
        """Serve the client on ``upstream`` until it leaves or the chain breaks."""
        self.upstream = Link("client", upstream, self.trace)
        self._start(self._read(self.upstream), "conductor-client")
        try:
            await self._done.wait()
        finally:
            await self._stop()
        return self.exit_code

    def _start(self, coro: Any, name: str) -> None:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _read(self, link: Link) -> None:
        try:
            while (events := await link.read_events()) is not None:
                for event in events:
                    await self._on_event(link, event)
                await self._backpressure(link)
        except Exception:
            log.exception("reading from %s failed", link.name)
        if link is self.upstream:
            self._done.set()  # the client has gone: so does the chain
        elif not (self._done.is_set() or link.stopping):
            await self._component_ended(link)

    async def _backpressure(self, link: Link) -> None:
        """A component reads no more while a link toward the client is far behind (a
        client that stops reading stops the agent, not the conductor's memory).  Only
        traffic toward the client waits, and the client's own link never does: no two
        readers can wait on each other."""
        if link is self.upstream:
            return
        ahead = [self.upstream, *self.proxies[: self._position(link)]]
        for target in ahead:
            if target is not None and target.out.backed_up:
                await target.out.drained()

    async def _on_event(self, link: Link, event: Event) -> None:
        if isinstance(event, Send):
            link.send(event.message)  # type: ignore[arg-type]
        elif isinstance(event, Response):
            self._on_response(link, event)
        elif isinstance(event, CancelRequest):
            self._cancel(link, event.id)
        elif link is self.upstream and self.version is None:
            await self._first_message(link, event)
        elif isinstance(event, (Request, Notification)):
            self._route(link, event)

    # ---- initialization -------------------------------------------------------
    async def _first_message(self, link: Link, event: Event) -> None:
        if not isinstance(event, Request):
            return  # notifications before initialize are dropped
        expected = PROXY_INITIALIZE if self.proxy_mode else INITIALIZE
        if self._failure is None:
            try:
                if event.method != expected:
                    raise refusal(EXPECTED_INITIALIZE)
                version = select_version(event.params)
                await self._spawn_all()
            except AcpError as exc:
                self._failure = exc
            else:
                self.version = version
                params = dict(event.params or {})
                params["protocolVersion"] = version
                self._route(link, Request(id=event.id, method=INITIALIZE, params=params))
                self._start(self._initialize_deadline(event.id), "conductor-init-timeout")
                return
        link.send(link.connection.error(event.id, self._failure))

    async def _spawn_all(self) -> None:
        """The agent first, then the proxies (as the Rust conductor does)."""
        if self.agent_spec is not None:
            self.agent = await self._spawn(self.agent_spec, "agent")
        for i, spec in enumerate(self.proxy_specs):
            self.proxies.append(await self._spawn(spec, f"proxy-{i}"))

    async def _spawn(self, spec: Component, name: str) -> Link:
        label = f"conductor-{name}"
        env = children.tagged_env({**os.environ, **spec.env}, label)
        try:
            process = await asyncio.create_subprocess_exec(
                *spec.argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=env,
                start_new_session=True,
                limit=1024 * 1024,
            )
        except OSError as exc:
            await self._stop_components()
            raise InternalError(
                f"cannot start {name} ({spec}): {exc.strerror or exc}",
                data={"component": name, "command": list(spec.argv)},
            ) from None
        children.register(process.pid, label=label)
        assert process.stdout is not None and process.stdin is not None
        link = Link(
            name, StdioTransport(process.stdout, process.stdin, process=process), self.trace
        )
        link.command = str(spec)
        self._start(self._pass_stderr(link, process.stderr), f"conductor-{name}-stderr")
        self._start(self._read(link), f"conductor-{name}")
        return link

    async def _pass_stderr(self, link: Link, stream: asyncio.StreamReader | None) -> None:
        if stream is None:
            return
        async for text in capped_lines(stream, STDERR_LINE_BYTES):
            link.stderr_tail.append(text)
            with contextlib.suppress(OSError, ValueError):
                print(f"[{link.name}] {text}", file=self.stderr, flush=True)

    async def _initialize_deadline(self, rid: RequestId) -> None:
        """Fail the chain if the client's initialize is still unanswered in time."""
        await asyncio.sleep(self.init_timeout_s)
        upstream = self.upstream
        if upstream is None or self._done.is_set() or not upstream.connection.owes_reply(rid):
            return
        stuck = self._furthest_asked()
        if stuck is None:
            who, last, stderr = "the chain's successor", "", []
        else:
            last = next((line for line in reversed(stuck.stderr_tail) if line.strip()), "")
            who, stderr = f"the chain's {stuck.name} ({stuck.command})", list(stuck.stderr_tail)
        message = f"{who} did not answer initialize within {self.init_timeout_s:g} s" + (
            f": {last}" if last else ""
        )
        log.error("%s", message)
        component = stuck.name if stuck is not None else "successor"
        error = InternalError(message, data={"component": component, "stderr": stderr})
        upstream.answer(rid, error=error.to_error())
        self.exit_code = 1
        self._done.set()

    def _furthest_asked(self) -> Link | None:
        """The component furthest down the chain that was sent a request still unanswered
        (during initialize: the one it is stuck at).  None: our own successor (proxy
        mode) or nobody."""
        waiting = {name for name, _ in self._pending}
        for link in reversed([*self.proxies, *([self.agent] if self.agent else [])]):
            if link.name in waiting:
                return link
        return None

    # ---- routing --------------------------------------------------------------
    def _position(self, link: Link) -> int:
        """0…N-1 for the proxies, N for the agent (or, in proxy mode, our successor)."""
        return self.proxies.index(link) if link in self.proxies else len(self.proxies)

    def _route(self, link: Link, event: Request | Notification) -> None:
        if link is self.upstream:
            self._from_upstream(event)
        elif link is self.agent:
            self._toward_client(len(self.proxies), link, event)
        elif event.method == PROXY_SUCCESSOR:
            self._from_proxy_to_successor(link, event)
        else:
            self._toward_client(self._position(link), link, event)

    def _from_upstream(self, event: Request | Notification) -> None:
        assert self.upstream is not None
        if self.proxy_mode and event.method == PROXY_SUCCESSOR:
            # Proxy mode: our predecessor's successor traffic is for our last proxy.
            inner = self._unwrapped(self.upstream, event)
            if inner is not None:
                self._toward_client(len(self.proxies), self.upstream, inner)
            return
        if event.method == PROXY_INITIALIZE and isinstance(event, Request):
            if not self.proxy_mode:
                self._refuse(self.upstream, event.id, ONLY_CONDUCTOR)
                return
            event = Request(id=event.id, method=INITIALIZE, params=event.params)
        self._toward_agent(0, self.upstream, event)

    def _from_proxy_to_successor(self, link: Link, event: Request | Notification) -> None:
        inner = self._unwrapped(link, event)
        if inner is None:
            return
        if inner.method == PROXY_INITIALIZE:
            if isinstance(inner, Request):
                self._refuse(link, inner.id, ONLY_CONDUCTOR)
            return
        self._toward_agent(self._position(link) + 1, link, inner)

    def _unwrapped(
        self, link: Link, event: Request | Notification
    ) -> Request | Notification | None:
        """The message inside a ``_proxy/successor``; a withdrawal is handled here."""
        try:
            method, params = unwrap(event.params)
        except AcpError as exc:
            if isinstance(event, Request):
                link.send(link.connection.error(event.id, exc))
            return None
        if method == CANCEL_REQUEST:
            target = params.get("requestId") if isinstance(params, dict) else None
            if isinstance(target, (int, str)) and not isinstance(target, bool):
                self._cancel(link, target)
            if isinstance(event, Request):
                link.answer(event.id, result={})
            return None
        if isinstance(event, Request):
            return Request(id=event.id, method=method, params=params)
        return Notification(method=method, params=params)

    def _toward_agent(self, k: int, source: Link, event: Request | Notification) -> None:
        """From the client (k = 0) or proxy k-1, to proxy k, the agent or our successor."""
        if k < len(self.proxies):
            method = PROXY_INITIALIZE if event.method == INITIALIZE else event.method
            self._forward(source, event, self.proxies[k], method, wrapped=False)
        elif self.agent is not None:
            self._forward(source, event, self.agent, event.method, wrapped=False)
        else:
            assert self.upstream is not None
            self._forward(source, event, self.upstream, event.method, wrapped=True)

    def _toward_client(self, i: int, source: Link, event: Request | Notification) -> None:
        """From proxy i, the agent or our successor (i = N), to proxy i-1 or the client."""
        if i > 0:
            self._forward(source, event, self.proxies[i - 1], event.method, wrapped=True)
        else:
            assert self.upstream is not None
            self._forward(source, event, self.upstream, event.method, wrapped=False)

    def _forward(
        self,
        source: Link,
        event: Request | Notification,
        target: Link,
        method: str,
        *,
        wrapped: bool,
    ) -> None:
        params = event.params
        if wrapped:
            method, params = PROXY_SUCCESSOR, wrap(method, params)
        if isinstance(event, Notification):
            target.send(target.connection.notification(method, params))
            return
        out_id, message = target.connection.request(method, params)
        checks_version = target is self.agent and method == INITIALIZE
        self._pending[(target.name, str(out_id))] = _Pending(source, event.id, checks_version)
        self._forwarded[(source.name, str(event.id))] = _Forwarded(target, out_id, wrapped)
        target.send(message)

    def _on_response(self, link: Link, response: Response) -> None:
        pending = self._pending.pop((link.name, str(response.id)), None)
        if pending is None:
            return
        self._forwarded.pop((pending.origin.name, str(pending.origin_id)), None)
        error = response.error
        if error is None and pending.agent_initialize:
            error = self._version_mismatch(response.result)
        elif error is not None and response.method == PROXY_INITIALIZE:
            error = self._refused_proxy_initialize(link, error)
        pending.origin.answer(pending.origin_id, result=response.result, error=error)

    @staticmethod
    def _refused_proxy_initialize(link: Link, error: dict[str, Any]) -> dict[str, Any]:
        """A proxy's refusal of ``_proxy/initialize``, saying which component refused
        (code and data unchanged, for clients that match on them).  An agent put
        where a proxy goes refuses it as unknown or as "before initialize": say so."""
        code, data = error.get("code"), error.get("data")
        hint = ""
        if code == METHOD_NOT_FOUND or (code == INVALID_REQUEST and data is None):
            hint = " (it is not an ACP proxy? agents go last in the chain)"
        message = f"{link.name} ({link.command}) refused {PROXY_INITIALIZE}: "
        return {**error, "message": message + str(error.get("message", "")) + hint}

    def _version_mismatch(self, result: Any) -> dict[str, Any] | None:
        """An error if the agent's ``initialize`` answer is not in the chain's version."""
        answered = result.get("protocolVersion") if isinstance(result, dict) else None
        if answered == self.version:
            return None
        return InternalError(
            f"the agent answered initialize with protocolVersion {answered!r}, "
            f"but this chain runs protocol version {self.version}",
            data={"expected": self.version, "received": answered},
        ).to_error()

    def _cancel(self, link: Link, rid: RequestId) -> None:
        """``link`` withdrew its request ``rid``: withdraw it on the next hop, once."""
        forwarded = self._forwarded.get((link.name, str(rid)))
        if forwarded is None or forwarded.cancelled:
            return  # unknown, finished or already withdrawn: ignored (§6)
        forwarded.cancelled = True
        target = forwarded.target
        cancel = target.connection.notification(CANCEL_REQUEST, {"requestId": forwarded.target_id})
        target.send(wrap_message(cancel) if forwarded.wrapped else cancel)

    def _refuse(self, link: Link, rid: RequestId, rule: str) -> None:
        link.send(link.connection.error(rid, refusal(rule)))

    # ---- ending ---------------------------------------------------------------
    async def _component_ended(self, link: Link) -> None:
        """A component closed its output: the chain cannot go on without it."""
        code: int | None = None
        if link.process is not None:
            with contextlib.suppress(TimeoutError):
                code = await asyncio.wait_for(link.process.wait(), EXIT_WAIT_S)
            await asyncio.sleep(0.05)  # its last stderr lines
        if self._done.is_set() or link.stopping:
            return
        how = f"exited with code {code}" if code is not None else "closed its connection"
        last = next((line for line in reversed(link.stderr_tail) if line.strip()), "")
        message = f"the chain's {link.name} ({link.command}) {how}" + (f": {last}" if last else "")
        log.error("%s", message)
        error = InternalError(
            message,
            data={"component": link.name, "exitCode": code, "stderr": list(link.stderr_tail)},
        ).to_error()
        upstream = self.upstream
        assert upstream is not None
        for rid in upstream.connection.owed():
            upstream.answer(rid, error=error)
        self.exit_code = 1
        self._done.set()

    async def _stop(self) -> None:
        if self.upstream is not None:
            await self.upstream.out.close()
        await self._stop_components()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _stop_components(self) -> None:
        links = [*self.proxies, *([self.agent] if self.agent else [])]
        await asyncio.gather(*(self._stop_one(link) for link in links), return_exceptions=True)

    async def _stop_one(self, link: Link) -> None:
        link.stopping = True
        await link.out.close()  # closes its stdin; waits for it to exit, then kills it
        if link.process is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(link.process.pid, signal.SIGKILL)  # what it left in its group
            children.unregister(link.process.pid)
