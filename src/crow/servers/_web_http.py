"""The web server's HTTP client (crow.servers.web): one GET with an overall timeout and
a byte limit, through the address guard (``_web_guard.py``) for ``fetch``, each failure
turned into one sentence (a ``ToolError``)."""

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import Literal

import httpx2
from mcp.server.mcpserver.exceptions import ToolError

from ..tls import client_context
from ._web_guard import AllowRule, GuardedTransport, Refused

__all__ = ["MAX_REDIRECTS", "Response", "Web", "text_kind"]

MAX_REDIRECTS = 5
_TEXT_TYPES = frozenset(
    {
        "application/json",
        "application/xml",
        "application/javascript",
        "application/x-javascript",
        "application/ecmascript",
        "application/x-ndjson",
        "application/yaml",
        "application/x-yaml",
        "application/toml",
        "application/x-sh",
        "application/sql",
        "application/graphql",
    }
)
_HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})


def _user_agent() -> str:
    try:
        return f"crow/{version('crow-cli')}"
    except PackageNotFoundError:  # pragma: no cover - running from a bare checkout
        return "crow/0"


def _media_type(content_type: str) -> str:
    return content_type.split(";", 1)[0].strip().lower()


def text_kind(media_type: str) -> Literal["html", "text", "unknown"] | None:
    """How a media type is read: as HTML, as text, sniffed (none given), or refused (None)."""
    if not media_type:
        return "unknown"
    if media_type in _HTML_TYPES:
        return "html"
    if (
        media_type.startswith("text/")
        or media_type in _TEXT_TYPES
        or media_type.endswith(("+json", "+xml"))
    ):
        return "text"
    return None


@dataclass
class Response:
    url: str
    status: int
    reason: str
    media_type: str
    charset: str | None
    body: bytes | None = None  # None when not read (an error status, or a refused type)


class Web:
    def __init__(self, *, timeout_s: float, max_bytes: int, allow: Sequence[AllowRule]) -> None:
        self.timeout_s = timeout_s
        self.max_bytes = max_bytes
        self.allow = tuple(allow)
        self.user_agent = _user_agent()

    def _client(self, *, guarded: bool) -> httpx2.AsyncClient:
        # A guarded client connects only through the guard, so it ignores proxy variables: a
        # proxy would resolve names where the guard cannot see the addresses.
        return httpx2.AsyncClient(
            follow_redirects=True,
            max_redirects=MAX_REDIRECTS,
            timeout=httpx2.Timeout(self.timeout_s),
            headers={"User-Agent": self.user_agent},
            transport=GuardedTransport(self.allow) if guarded else None,
            verify=client_context(),
        )

    async def get(
        self,
        url: str,
        *,
        params: dict[str, str] | None = None,
        accept: str,
        readable: bool = False,
        guarded: bool = False,
    ) -> Response:
        """GET ``url``, reading at most ``max_bytes`` of body within ``timeout_s`` overall.

        The body is left unread for an error status and, when ``readable``, for a content
        type that is not text. ``guarded``: every connection, redirects included, goes to a
        public or allow-listed address. Raises ``ToolError`` with one sentence on any failure.
        """
        try:
            async with asyncio.timeout(self.timeout_s):
                return await self._get(
                    url, params=params, accept=accept, readable=readable, guarded=guarded
                )
        except Refused as exc:
            raise ToolError(_refusal(url, exc)) from None
        except (TimeoutError, httpx2.TimeoutException):
            raise ToolError(f"Timed out after {self.timeout_s:g} s waiting for {url}.") from None
        except httpx2.TooManyRedirects:
            raise ToolError(f"Too many redirects (more than {MAX_REDIRECTS}) from {url}.") from None
        except httpx2.UnsupportedProtocol:
            raise ToolError(
                f"Refused: {url} redirected to a URL that is not http or https."
            ) from None
        except httpx2.InvalidURL as exc:
            raise ToolError(f"Invalid URL {url!r}: {exc}.") from None
        except httpx2.ConnectError as exc:
            raise ToolError(f"Could not connect to {url} ({exc or 'connection failed'}).") from None
        except httpx2.HTTPError as exc:
            raise ToolError(
                f"Request to {url} failed ({type(exc).__name__}: {exc or 'no detail'})."
            ) from None

    async def _get(
        self,
        url: str,
        *,
        params: dict[str, str] | None,
        accept: str,
        readable: bool,
        guarded: bool,
    ) -> Response:
        async with (
            self._client(guarded=guarded) as client,
            client.stream("GET", url, params=params, headers={"Accept": accept}) as resp,
        ):
            result = Response(
                url=str(resp.url),
                status=resp.status_code,
                reason=resp.reason_phrase,
                media_type=_media_type(resp.headers.get("content-type", "")),
                charset=resp.charset_encoding,
            )
            if resp.is_error or (readable and text_kind(result.media_type) is None):
                return result
            declared = resp.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > self.max_bytes:
                raise ToolError(self._too_large(result.url))
            chunks: list[bytes] = []
            size = 0
            async for chunk in resp.aiter_bytes():
                size += len(chunk)
                if size > self.max_bytes:
                    raise ToolError(self._too_large(result.url))
                chunks.append(chunk)
            result.body = b"".join(chunks)
            return result

    def _too_large(self, url: str) -> str:
        return f"Refused: the response from {url} is larger than the {self.max_bytes}-byte limit."


def _refusal(url: str, exc: Refused) -> str:
    asked, hop = httpx2.URL(url), httpx2.URL(exc.url or url)
    same = (asked.scheme, asked.host, asked.port) == (hop.scheme, hop.host, hop.port)
    where = url if same else f"{url} redirected to {hop}, which"
    return (
        f"fetch refused: {where} resolves to {exc.address}, {exc.what}; Crow's fetch does not "
        "reach loopback, private, link-local or metadata addresses "
        "(allow it with web.allow_hosts in config.toml)."
    )
