"""``/healthz``, ``/readyz`` and ``/metrics`` beside ``/acp`` on crow serve --http.

- ``/healthz``: the process answers (200 ``{"status":"ok"}``).
- ``/readyz``: it can take sessions: the session store answers a read within
  ``READY_TIMEOUT_S`` and the model chain is configured (200, else 503
  ``{"status":"not ready"}``; the reason goes to the log, not to the caller).
- ``/metrics``: Prometheus' text format (crow.observe.metrics).  It needs the
  server's token like ``/acp``, unless ``[server] metrics_public = true``.

Load balancers and orchestrators probe without credentials, so the two probes
need no token; they say nothing but their status.  The ``Host`` and ``Origin``
checks still apply to every path (a web page must not reach them through DNS
rebinding either).  Only ``GET`` (and ``HEAD``) are answered.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from crow.observe import metrics

__all__ = ["PROBES", "ProbesApp"]

log = logging.getLogger("crow.agent")

PROBES = ("/healthz", "/readyz", "/metrics")
#: A store that takes longer than this to answer a read is not ready.
READY_TIMEOUT_S = 2.0


class ProbesApp:
    """The probes; every other path goes to ``inner`` (the ACP app)."""

    def __init__(
        self,
        inner: ASGIApp,
        agent: Any,
        *,
        check_place: Callable[[Scope], Response | None],
        check_token: Callable[[Scope], Response | None],
        metrics_public: bool,
    ) -> None:
        self.inner = inner
        self.agent = agent
        self.check_place = check_place
        self.check_token = check_token
        self.metrics_public = metrics_public

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "").rstrip("/")
        if scope["type"] != "http" or path not in PROBES:
            await self.inner(scope, receive, send)
            return
        response = await self._answer(scope, path)
        await response(scope, receive, send)

    async def _answer(self, scope: Scope, path: str) -> Response:
        refusal = self.check_place(scope)
        if refusal is None and path == "/metrics" and not self.metrics_public:
            refusal = self.check_token(scope)
        if refusal is not None:
            return refusal
        if scope.get("method") not in ("GET", "HEAD"):
            return JSONResponse({"error": "use GET"}, 405, headers={"Allow": "GET, HEAD"})
        if path == "/healthz":
            return JSONResponse({"status": "ok"}, headers=_NO_STORE)
        if path == "/readyz":
            ready = await self._ready()
            return JSONResponse(
                {"status": "ok" if ready else "not ready"}, 200 if ready else 503, headers=_NO_STORE
            )
        accept = dict(scope.get("headers", [])).get(b"accept", b"").decode("latin-1")
        body, content_type = metrics.exposition(accept)
        return Response(body, headers={**_NO_STORE, "Content-Type": content_type})

    async def _ready(self) -> bool:
        if not self.agent.config.chain:
            log.warning("readyz: no model is configured")
            return False
        try:
            async with asyncio.timeout(READY_TIMEOUT_S):
                await self.agent.store.get_session("readyz")  # an indexed read of no row
        except TimeoutError:
            log.warning("readyz: the session store did not answer in %.0f s", READY_TIMEOUT_S)
            return False
        except Exception as exc:  # whatever the store raises, the answer is "not ready"
            log.warning("readyz: the session store failed: %s", exc)
            return False
        return True


_NO_STORE = {"Cache-Control": "no-store"}
