"""The HTTP under a model call: one streamed ``POST`` over aiohttp.

Crow sends chat completions itself rather than through the ``openai`` SDK.  The
body is JSON Crow already holds, the reply is server-sent events it reads as
bytes, and what is left of the SDK on that path (its request options, an
``httpx2`` request, a transport adapter, URL parsing per call) cost 1.4 ms of
CPU per model call, where aiohttp alone costs 0.25 ms (bench/http_bench.py:
a fifth of crow serve's CPU per prompt).  aiohttp parses HTTP in C and keeps
every connection alive.

Failures become ``ModelError``s here, as ``errors`` classifies them: a status
of 400 and up by its code and text; a refused or failed connection as
unreachable; a read that times out as a timeout.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import time
import urllib.request
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

import aiohttp
import orjson

from ..redact import redact, redact_url
from ..tls import client_context
from .errors import ModelError, ModelUnreachable, retry_after_s, status_error

__all__ = ["ModelHttp"]

USER_AGENT = "crow-cli"
#: Bytes of an error answer's body read for its message.
ERROR_BODY_BYTES = 64 * 1024
#: Characters of that message kept: it is one line for people (an HTML error page is not).
ERROR_TEXT_CHARS = 500


class ModelHttp:
    """Streamed POSTs to one model server: one aiohttp session (made on first
    use, inside the running loop), its connections kept alive."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str,
        timeout_s: float,
        connect_timeout_s: float,
        max_connections: int,
        keepalive_s: float = 5.0,
    ) -> None:
        self.base_url = base_url
        self._url, authorization = _split_credentials(base_url.rstrip("/"), api_key)
        self._headers = {
            "Authorization": authorization,
            "Content-Type": "application/json",
            "Accept": "application/json",  # as the openai SDK asks; the reply is SSE anyway
            "User-Agent": USER_AGENT,
        }
        self._timeout = aiohttp.ClientTimeout(
            total=None, connect=timeout_s, sock_connect=connect_timeout_s, sock_read=timeout_s
        )
        self._max_connections = max_connections
        self._keepalive_s = keepalive_s
        self._proxy = proxy_for(self._url)
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(
                limit=self._max_connections,
                keepalive_timeout=self._keepalive_s,
                ssl=client_context(),  # the one trust source of every client (crow.tls)
            )
            # No trust_env: it reads the whole environment for proxies, and .netrc in a
            # thread, on every request; the proxy is found once (proxy_for), and the
            # Authorization header is always Crow's own.
            self._session = aiohttp.ClientSession(connector=connector)
        return self._session

    async def post_stream(
        self, path: str, body: bytes, model: str
    ) -> AsyncGenerator[list[bytes], None]:
        """POST ``body`` to ``path`` and yield the data of its server-sent events, in
        batches: the events that arrived together (a busy or fast server sends
        several per read; the caller may handle those at once).

        The stream ends at ``[DONE]`` (the rest of the body is read, so that the
        connection goes back to the pool) or when the server ends the body.
        Raises ``ModelError``s; leaving early closes the connection, which tells
        the server to stop generating.
        """
        with _failures(model, self.base_url, sending=True):
            response = await self._client().post(
                self._url + path,
                data=body,
                headers=self._headers,
                proxy=self._proxy,
                allow_redirects=False,
                auto_decompress=True,
                compress=False,
                timeout=self._timeout,
            )
        try:
            if response.status >= 400:
                text = await _error_text(response)
                headers = response.headers
                wait = retry_after_s(
                    headers.get("retry-after-ms"), headers.get("retry-after"), now=time.time()
                )
                raise status_error(model, response.status, text, retry_after=wait)
            with _failures(model, self.base_url, sending=False):
                async for batch in _event_batches(response):
                    if b"[DONE]" in batch:
                        if before := batch[: batch.index(b"[DONE]")]:
                            yield before
                        await _drain(response)
                        return
                    yield batch
        finally:
            response.release()  # to the pool if read to its end, else closed

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()


async def _event_batches(response: aiohttp.ClientResponse) -> AsyncIterator[list[bytes]]:
    """The data of each event of a ``text/event-stream`` body (other fields and
    comments skipped; several ``data:`` lines of one event joined by newlines), a
    list per network read: the events that read completed."""
    buffer = b""
    data: list[bytes] = []
    async for chunk in response.content.iter_any():
        buffer += chunk
        if b"\n" not in chunk:
            continue  # a long line on its way: split it once it has ended
        *lines, buffer = buffer.split(b"\n")
        batch = []
        for line in lines:
            line = line.removesuffix(b"\r")
            if line.startswith(b"data:"):
                data.append(line[5:].lstrip())
            elif not line and data:
                batch.append(b"\n".join(data))
                data = []
        if batch:
            yield batch
    if data:  # a body that ends without the blank line after its last event
        yield [b"\n".join(data)]


async def _drain(response: aiohttp.ClientResponse, seconds: float = 0.2) -> None:
    """Read past ``[DONE]`` to the end of the body; a server that keeps the body
    open after it is not waited for long (its connection is then closed)."""
    with contextlib.suppress(Exception):
        async with asyncio.timeout(seconds):
            await response.read()


async def _error_text(response: aiohttp.ClientResponse) -> str:
    """What an error answer says: its JSON ``error.message`` (or ``error`` as
    text, or ``message``), else its text, on one line and cut short; credentials
    masked, for it is logged and sent to the client."""
    raw = b""
    with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
        while len(raw) < ERROR_BODY_BYTES:
            chunk = await response.content.read(ERROR_BODY_BYTES - len(raw))
            if not chunk:
                break
            raw += chunk
    text = raw.decode("utf-8", "replace").strip()
    with contextlib.suppress(ValueError):
        body: Any = orjson.loads(raw)
        inner = body.get("error", body) if isinstance(body, dict) else None
        if isinstance(inner, dict) and inner.get("message"):
            text = str(inner["message"])
        elif isinstance(inner, str) and inner:
            text = inner
    text = " ".join(text.split()) or response.reason or "no reason given"
    if len(text) > ERROR_TEXT_CHARS:
        text = text[:ERROR_TEXT_CHARS] + "…"
    return redact(text)


@contextlib.contextmanager
def _failures(model: str, base_url: str, *, sending: bool) -> Iterator[None]:
    """aiohttp's exceptions as ModelErrors: connecting, or reading the reply."""
    try:
        yield
    except ModelError:
        raise
    except (aiohttp.ConnectionTimeoutError, aiohttp.ServerTimeoutError, TimeoutError) as exc:
        why = "the request timed out" if sending else "the model server stopped sending (timed out)"
        raise ModelUnreachable(f"{model}: {why}", model=model) from exc
    except (aiohttp.ClientConnectorError, aiohttp.InvalidURL) as exc:
        raise _cannot_reach(model, base_url, exc) from exc
    except (aiohttp.ClientError, OSError) as exc:
        if sending:
            raise _cannot_reach(model, base_url, exc) from exc
        raise ModelUnreachable(
            f"{model}: the connection failed ({redact(_text(exc))})", model=model
        ) from exc


def _cannot_reach(model: str, base_url: str, exc: BaseException) -> ModelUnreachable:
    return ModelUnreachable(
        f"{model}: cannot reach the model server at {redact_url(base_url)} "
        f"({redact(_text(exc))}): start it, or point Crow at another "
        "(OPENAI_BASE_URL, or base_url in config.toml)",
        model=model,
    )


def proxy_for(url: str) -> str | None:
    """The proxy for ``url`` as HTTP(S)_PROXY and NO_PROXY (or the system) say;
    None to connect directly."""
    parts = urlsplit(url)
    if not parts.hostname or urllib.request.proxy_bypass(parts.hostname):
        return None
    return urllib.request.getproxies().get(parts.scheme)


def _split_credentials(url: str, api_key: str) -> tuple[str, str]:
    """The URL without ``user:password@``, and the Authorization header: Basic
    with the URL's credentials when it has them, else Bearer with the key."""
    parts = urlsplit(url)
    if parts.username is None:
        return url, f"Bearer {api_key}"
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port else host
    pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
    return urlunsplit(parts._replace(netloc=netloc)), f"Basic {base64.b64encode(pair).decode()}"


def _text(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__
