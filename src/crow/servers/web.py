"""Crow's built-in web MCP server: ``search`` (a SearXNG-compatible endpoint) and ``fetch``.

Run it alone over stdio with ``python -m crow.servers.web --search-url URL``; the search URL
defaults to the ``CROW_SEARCH_URL`` environment variable. Logs go to stderr only: stdout
carries the MCP messages.

``fetch`` connects only to public addresses (``_web_guard.py``): loopback, private, link-local
and metadata hosts need ``web.allow_hosts`` in config.toml (``--allow-host`` when run alone).
The search endpoint is the user's own choice and is not guarded.
"""

import argparse
import asyncio
import codecs
import json
import logging
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from html.parser import HTMLParser
from importlib.metadata import PackageNotFoundError, version
from typing import Annotated, Any, Literal
from urllib.parse import urljoin, urlsplit

import httpx2
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field

from ..redact import redact_url
from ..tls import client_context
from ._stdio import run_stdio
from ._web_guard import AllowRule, GuardedTransport, Refused, parse_allow_host

__all__ = ["build_server", "html_to_text", "main"]

logger = logging.getLogger(__name__)

MAX_REDIRECTS = 5
MAX_SEARCH_LIMIT = 50
NOT_CONFIGURED = (
    "Web search is not configured: set web.search_url in config.toml or the CROW_SEARCH_URL "
    "environment variable to a SearXNG-compatible JSON endpoint "
    "(for example http://localhost:8888/search)."
)
_ACCEPT = "text/html,application/xhtml+xml,text/plain;q=0.9,application/json;q=0.9,*/*;q=0.5"
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


def _text_kind(media_type: str) -> Literal["html", "text", "unknown"] | None:
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


# ---------------------------------------------------------------------------------------------
# HTML to text


_SKIP_TAGS = frozenset(
    {"script", "style", "nav", "noscript", "svg", "template", "iframe", "canvas", "object"}
)
_PARAGRAPH_TAGS = frozenset(
    {
        "p",
        "blockquote",
        "pre",
        "table",
        "ul",
        "ol",
        "dl",
        "section",
        "article",
        "main",
        "header",
        "footer",
        "aside",
        "figure",
        "form",
        "fieldset",
        "details",
        "address",
        "hr",
    }
)
_LINE_TAGS = frozenset({"div", "br", "tr", "dt", "dd", "li", "figcaption", "summary", "caption"})
_HEADINGS = {f"h{n}": n for n in range(1, 7)}
_SPACE = re.compile(r"\s+")
_BLANK_LINES = re.compile(r"\n{3,}")
_META_CHARSET = re.compile(
    rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.IGNORECASE
)


class _HTMLText(HTMLParser):
    """A small, forgiving HTML-to-text converter (see ``html_to_text``)."""

    def __init__(self, base_url: str) -> None:
        super().__init__(convert_charrefs=True)
        self._base = base_url
        self._out: list[str] = []
        self._newlines = 0  # line breaks owed before the next text
        self._line_start = True
        self._prefix = ""  # "## " or "- ", written before the next text of the block
        self._skipping: list[str] = []
        self._pre = 0
        self._link: tuple[str, list[str]] | None = None
        self._title: list[str] | None = None
        self.title = ""

    # -- output helpers

    def _break(self, n: int) -> None:
        self._newlines = max(self._newlines, n)
        self._prefix = ""

    def _write(self, text: str) -> None:
        if self._newlines and self._out:
            self._out.append("\n" * self._newlines)
            self._line_start = True
        self._newlines = 0
        if self._line_start:
            text = text.lstrip(" ")
            if not text:
                return
            if self._prefix:
                text = self._prefix + text
                self._prefix = ""
        elif text.startswith(" ") and self._out and self._out[-1].endswith(" "):
            text = text[1:]
        if text:
            self._out.append(text)
            self._line_start = text.endswith("\n")

    def _end_link(self) -> None:
        if self._link is None:
            return
        href, parts = self._link
        self._link = None
        text = _SPACE.sub(" ", "".join(parts)).strip()
        url = urljoin(self._base, href) if href and not href.startswith("#") else ""
        if urlsplit(url).scheme.lower() not in ("http", "https", "mailto"):
            url = ""
        if not text:
            return
        if not url or text == url:
            self._write(text)
        else:
            self._write(f"{text} ({url})")

    # -- HTMLParser callbacks

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self._skipping or tag in _SKIP_TAGS:
            if tag in _SKIP_TAGS:
                self._skipping.append(tag)
            return
        if tag == "title":
            self._title = []
        elif tag in _HEADINGS:
            self._end_link()
            self._break(2)
            self._prefix = "#" * _HEADINGS[tag] + " "
        elif tag == "li":
            self._break(1)
            self._prefix = "- "
        elif tag in _PARAGRAPH_TAGS:
            self._break(2)
            if tag == "pre":
                self._pre += 1
        elif tag in _LINE_TAGS:
            self._break(1)
        elif tag in ("td", "th"):
            self._write(" ")
        elif tag == "a":
            self._end_link()
            self._link = (dict(attrs).get("href") or "", [])
        elif tag == "img":
            alt = _SPACE.sub(" ", dict(attrs).get("alt") or "").strip()
            if alt:
                self.handle_data(f" [image: {alt}] ")

    def handle_endtag(self, tag: str) -> None:
        if self._skipping:
            if tag in self._skipping:  # close it, and whatever was left open inside it
                while self._skipping.pop() != tag:
                    pass
            return
        if tag == "title" and self._title is not None:
            self.title = _SPACE.sub(" ", "".join(self._title)).strip()
            self._title = None
        elif tag == "a":
            self._end_link()
        elif tag in _HEADINGS or tag in _PARAGRAPH_TAGS:
            self._end_link()
            self._break(2)
            if tag == "pre" and self._pre:
                self._pre -= 1
        elif tag in _LINE_TAGS:
            self._break(1)

    def handle_data(self, data: str) -> None:
        if self._skipping:
            return
        if self._title is not None:
            self._title.append(data)
        elif self._link is not None:
            self._link[1].append(data)
        elif self._pre:
            if self._newlines and self._out:
                self._out.append("\n" * self._newlines)
            self._newlines = 0
            self._out.append(data)
            self._line_start = data.endswith("\n")
        else:
            self._write(_SPACE.sub(" ", data))

    def text(self) -> str:
        self._end_link()
        lines = [line.rstrip() for line in "".join(self._out).split("\n")]
        body = _BLANK_LINES.sub("\n\n", "\n".join(lines)).strip("\n")
        if self.title and not body.startswith(("# ", f"{self.title}\n")):
            return f"Title: {self.title}\n\n{body}".rstrip()
        return body


def html_to_text(html: str, base_url: str = "") -> str:
    """Readable text from HTML.

    Drops script, style, nav, noscript and svg (and template, iframe, canvas, object); writes
    headings as ``#`` lines, paragraphs and list items (``- item``) on their own lines, and
    links as ``text (absolute url)``. The page title, when present, leads as ``Title: ...``.
    """
    parser = _HTMLText(base_url)
    try:
        parser.feed(html)
        parser.close()
    except Exception:  # pragma: no cover - html.parser is lenient; be safe anyway
        logger.debug("html.parser failed; falling back to tag stripping", exc_info=True)
        stripped = re.sub(r"(?is)<(script|style)\b.*?</\1>|<[^>]+>", " ", html)
        return _SPACE.sub(" ", stripped).strip()
    return parser.text()


def _decode(body: bytes, charset: str | None, *, html: bool) -> str:
    """Decode with the declared charset, else a ``<meta charset>``, else UTF-8 (lossy)."""
    candidates = [charset] if charset else []
    if html and (found := _META_CHARSET.search(body[:4096])):
        candidates.append(found.group(1).decode("ascii"))
    for name in candidates:
        try:
            codecs.lookup(name)
        except LookupError:
            continue
        return body.decode(name, errors="replace")
    return body.decode("utf-8", errors="replace")


# ---------------------------------------------------------------------------------------------
# HTTP


@dataclass
class _Response:
    url: str
    status: int
    reason: str
    media_type: str
    charset: str | None
    body: bytes | None = None  # None when not read (an error status, or a refused type)


class _Web:
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
    ) -> _Response:
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
    ) -> _Response:
        async with (
            self._client(guarded=guarded) as client,
            client.stream("GET", url, params=params, headers={"Accept": accept}) as resp,
        ):
            result = _Response(
                url=str(resp.url),
                status=resp.status_code,
                reason=resp.reason_phrase,
                media_type=_media_type(resp.headers.get("content-type", "")),
                charset=resp.charset_encoding,
            )
            if resp.is_error or (readable and _text_kind(result.media_type) is None):
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


# ---------------------------------------------------------------------------------------------
# Tools


def _format_results(query: str, results: list[object], limit: int) -> str:
    entries: list[str] = []
    for item in results:
        if len(entries) >= limit:
            break
        if not isinstance(item, dict):
            continue
        url = item.get("url")
        if not isinstance(url, str) or not url.strip():
            continue
        title, snippet = item.get("title"), item.get("content")
        title = _SPACE.sub(" ", title).strip() if isinstance(title, str) else ""
        snippet = _SPACE.sub(" ", snippet).strip() if isinstance(snippet, str) else ""
        lines = [f"{len(entries) + 1}. {title or url.strip()}", f"   {url.strip()}"]
        if snippet:
            lines.append(f"   {snippet}")
        entries.append("\n".join(lines))
    if not entries:
        return f"No results for {query!r}."
    return "\n\n".join(entries)


def _result(
    text: str, *, is_error: bool = False, meta: dict[str, Any] | None = None
) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text=text)], is_error=is_error, _meta=meta
    )


async def _search(web: _Web, search_url: str | None, query: str, limit: int) -> str:
    if search_url is None:
        raise ToolError(NOT_CONFIGURED)
    query = query.strip()
    if not query:
        raise ToolError("The search query is empty.")
    limit = max(1, min(limit, MAX_SEARCH_LIMIT))
    resp = await web.get(
        search_url, params={"q": query, "format": "json"}, accept="application/json"
    )
    if resp.body is None:
        raise ToolError(
            f"The search endpoint {redact_url(search_url)} answered "
            f"HTTP {resp.status} {resp.reason}."
        )
    try:
        data = json.loads(resp.body)
    except ValueError:
        raise ToolError(
            f"The search endpoint {redact_url(search_url)} did not return valid JSON "
            "(is format=json enabled in its settings?)."
        ) from None
    results = data.get("results") if isinstance(data, dict) else None
    if not isinstance(results, list):
        raise ToolError(
            f"The search endpoint {redact_url(search_url)} returned JSON without a results list."
        )
    return _format_results(query, results, limit)


async def _fetch(web: _Web, url: str, limit: int) -> CallToolResult:
    if limit < 1:
        raise ToolError("max_chars must be at least 1.")
    url = url.strip()
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        what = f"a {scheme}: URL" if scheme else "a URL without a scheme"
        raise ToolError(f"Refused: fetch reads only http and https URLs, not {what}.")
    if not parts.hostname:
        raise ToolError(f"Refused: {url!r} has no host.")
    resp = await web.get(url, accept=_ACCEPT, readable=True, guarded=True)
    meta: dict[str, Any] = {
        "crow/url": resp.url,
        "crow/status": resp.status,
        "crow/contentType": resp.media_type,
        "crow/truncated": False,
    }
    if resp.body is None and resp.status >= 400:
        text = f"{resp.url} answered HTTP {resp.status} {resp.reason}."
        return _result(text, is_error=True, meta=meta)
    kind = _text_kind(resp.media_type)
    body = resp.body or b""
    if kind == "unknown":  # no Content-Type: sniff
        if b"\x00" in body[:4096]:
            raise ToolError(
                f"Refused: {resp.url} sent binary content without a Content-Type; "
                "fetch reads only HTML, text and JSON."
            )
        head = body[:512].lstrip().lower()
        kind = "html" if head.startswith((b"<!doctype html", b"<html")) else "text"
    if kind is None or resp.body is None:
        raise ToolError(
            f"Refused: {resp.url} is {resp.media_type}, not text; "
            "fetch reads only HTML, text and JSON."
        )
    text = _decode(body, resp.charset, html=kind == "html")
    if kind == "html":
        text = html_to_text(text, resp.url)
    if not text.strip():
        text = "(the response has no readable text)"
    if len(text) > limit:
        more = len(text) - limit
        text = (
            f"{text[:limit]}\n\n"
            f"[truncated: {more} more characters; call fetch with a larger max_chars]"
        )
        meta["crow/truncated"] = True
    return _result(text, meta=meta)


def build_server(
    *,
    search_url: str | None,
    timeout_s: float = 20,
    max_bytes: int = 2 * 1024 * 1024,
    max_chars: int = 40_000,
    allow_hosts: tuple[str, ...] = (),
) -> MCPServer:
    """The web MCP server: ``search`` (needs ``search_url``) and ``fetch``.

    ``allow_hosts`` opens non-public hosts to ``fetch``: names or IPs, each optionally with
    ``:port``, or CIDR ranges; raises ValueError for an entry that is none of these. Failures
    come back as ``is_error`` results whose text is one sentence (no SDK prefix).
    """
    allow = [parse_allow_host(entry) for entry in allow_hosts]
    web = _Web(timeout_s=timeout_s, max_bytes=max_bytes, allow=allow)
    default_max_chars = max_chars
    server: MCPServer = MCPServer(
        name="crow-web",
        version=web.user_agent.removeprefix("crow/"),
        instructions="Search the web with `search`; read a page with `fetch`.",
    )
    annotations = ToolAnnotations(readOnlyHint=True, openWorldHint=True)

    @server.tool(
        name="search",
        title="Web search",
        description=(
            "Search the web. Returns a numbered list of results, each with title, URL and "
            "snippet; read a result with `fetch`."
        ),
        annotations=annotations,
        meta={"crow/kind": "search"},
    )
    async def search(
        query: Annotated[str, Field(description="What to search for.")],
        limit: Annotated[int, Field(description="Maximum number of results (1-50).")] = 8,
    ) -> CallToolResult:
        try:
            return _result(await _search(web, search_url, query, limit))
        except ToolError as exc:
            logger.info("search failed: %s", exc)
            return _result(str(exc), is_error=True)

    @server.tool(
        name="fetch",
        title="Fetch a web page",
        description=(
            "Fetch an http(s) URL and return its readable text. HTML becomes text with headings "
            "as # lines and links as `text (url)`; plain text and JSON come back as is; images "
            "and other binary types are refused, as are local and private network addresses. "
            "Long output is truncated to max_chars."
        ),
        annotations=annotations,
        meta={"crow/kind": "fetch"},
    )
    async def fetch(
        url: Annotated[str, Field(description="The http or https URL to fetch.")],
        max_chars: Annotated[
            int | None,
            Field(description=f"Most characters to return (default {default_max_chars})."),
        ] = None,
    ) -> CallToolResult:
        limit = default_max_chars if max_chars is None else max_chars
        try:
            return await _fetch(web, url, limit)
        except ToolError as exc:
            logger.info("fetch failed: %s", exc)
            return _result(str(exc), is_error=True)

    return server


# ---------------------------------------------------------------------------------------------
# Entry point


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="crow mcp web",
        description="Crow's web MCP server (tools: search, fetch), over stdio.",
    )
    parser.add_argument(
        "--search-url",
        metavar="URL",
        default=os.environ.get("CROW_SEARCH_URL") or None,
        help="SearXNG-compatible JSON search endpoint, e.g. http://localhost:8888/search "
        "(default: $CROW_SEARCH_URL; without one, search reports it is not configured)",
    )
    parser.add_argument(
        "--allow-host",
        metavar="HOST",
        action="append",
        default=[],
        help="let fetch reach this non-public host: a name or IP, optionally with :port, or a "
        "CIDR range (repeatable; fetch refuses loopback, private and metadata addresses)",
    )
    parser.add_argument(
        "--log-level",
        default="WARNING",
        choices=["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"],
        help="stderr log level (default: WARNING)",
    )
    args = parser.parse_args(argv)
    try:
        server = build_server(search_url=args.search_url, allow_hosts=tuple(args.allow_host))
    except ValueError as exc:
        parser.error(f"--allow-host: {exc}")
    return run_stdio(server, log_level=args.log_level)


if __name__ == "__main__":
    sys.exit(main())
