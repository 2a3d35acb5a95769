"""An ``httpx2`` transport that sends model requests with aiohttp.

The ``openai`` SDK speaks ``httpx2``; this swaps only the layer below it.  Under
100 concurrent turns, httpcore's pure-Python HTTP/1.1 and its per-read cancel
scopes were the largest share of Crow's CPU; aiohttp parses in C and keeps every
connection alive (bench/http_bench.py: ~1.4x the prompts/s).

The SDK vendors a transport like this one (``openai.DefaultAioHttpClient``), but
it reports a refused connection as a timeout and rejects base URLs that carry
credentials, so Crow keeps its own, with the error mapping ``errors`` relies on:
connect timeout, read timeout, connect error, read error.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import httpx2

__all__ = ["AiohttpTransport"]


class AiohttpTransport(httpx2.AsyncBaseTransport):
    """One aiohttp session (made on first use, inside the running loop)."""

    def __init__(self, *, max_connections: int, keepalive_s: float = 5.0) -> None:
        self._max_connections = max_connections
        self._keepalive_s = keepalive_s
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(
                limit=self._max_connections, keepalive_timeout=self._keepalive_s
            )
            # trust_env: HTTP(S)_PROXY, NO_PROXY and .netrc, as httpx honours them
            self._session = aiohttp.ClientSession(connector=connector, trust_env=True)
        return self._session

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        timeout = request.extensions.get("timeout", {})
        # httpx has already turned URL credentials into the Authorization header
        url = str(request.url.copy_with(username=None, password=None))
        with _mapped_errors(connecting=True):
            response = await self._client().request(
                request.method,
                url,
                headers=request.headers.multi_items(),
                data=await request.aread() or None,
                allow_redirects=False,
                auto_decompress=False,  # httpx decodes the body itself
                compress=False,
                timeout=aiohttp.ClientTimeout(
                    total=None,
                    connect=timeout.get("pool"),
                    sock_connect=timeout.get("connect"),
                    sock_read=timeout.get("read"),
                ),
            )
        return httpx2.Response(
            status_code=response.status,
            headers=response.raw_headers,
            stream=_Body(response),
            request=request,
            extensions={"http_version": b"HTTP/1.1"},
        )

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()


class _Body(httpx2.AsyncByteStream):
    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with _mapped_errors(connecting=False):
            async for chunk in self._response.content.iter_any():
                yield chunk

    async def aclose(self) -> None:
        # back to the pool if the body was read to its end; closed (which tells
        # the server to stop generating) if it was not
        self._response.release()


@contextlib.contextmanager
def _mapped_errors(*, connecting: bool) -> Iterator[None]:
    """aiohttp's exceptions as the httpx ones the SDK and ``client`` expect."""
    try:
        yield
    except aiohttp.ConnectionTimeoutError as exc:
        raise httpx2.ConnectTimeout(str(exc) or "connecting timed out") from exc
    except aiohttp.ServerTimeoutError as exc:  # the socket read timeout
        raise httpx2.ReadTimeout(str(exc) or "reading timed out") from exc
    except aiohttp.ClientConnectorError as exc:
        raise httpx2.ConnectError(_text(exc)) from exc
    except aiohttp.InvalidURL as exc:
        raise httpx2.UnsupportedProtocol(f"not a usable URL: {exc}") from exc
    except (aiohttp.ClientError, OSError) as exc:
        error: Any = httpx2.ConnectError if connecting else httpx2.ReadError
        raise error(_text(exc)) from exc


def _text(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__
