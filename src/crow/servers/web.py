"""Crow's built-in web MCP server: ``search`` (a SearXNG-compatible endpoint) and ``fetch``.

Run it alone over stdio with ``python -m crow.servers.web --search-url URL``; the search URL
defaults to the ``CROW_SEARCH_URL`` environment variable. Logs go to stderr only: stdout
carries the MCP messages.

``fetch`` connects only to public addresses (``_web_guard.py``): loopback, private, link-local
and metadata hosts need ``web.allow_hosts`` in config.toml (``--allow-host`` when run alone).
The search endpoint is the user's own choice and is not guarded.
"""

import argparse
import json
import logging
import os
import sys
from collections.abc import Awaitable
from typing import Annotated, Any
from urllib.parse import urlsplit

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field

from ..extensions import CONTENT_TYPE, HTTP_STATUS, TOOL_KIND, TRUNCATED, URL
from ..redact import redact_url
from ._stdio import run_stdio
from ._web_guard import parse_allow_host
from ._web_html import SPACE, decode, html_to_text
from ._web_http import Web, text_kind

__all__ = ["build_server", "html_to_text", "main"]

logger = logging.getLogger(__name__)

MAX_SEARCH_LIMIT = 50
NOT_CONFIGURED = (
    "Web search is not configured: set web.search_url in config.toml or the CROW_SEARCH_URL "
    "environment variable to a SearXNG-compatible JSON endpoint "
    "(for example http://localhost:8888/search)."
)
_ACCEPT = "text/html,application/xhtml+xml,text/plain;q=0.9,application/json;q=0.9,*/*;q=0.5"


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
        title = SPACE.sub(" ", title).strip() if isinstance(title, str) else ""
        snippet = SPACE.sub(" ", snippet).strip() if isinstance(snippet, str) else ""
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


async def _answer(tool: str, work: Awaitable[CallToolResult]) -> CallToolResult:
    """The tool's result, or its failure as an ``is_error`` result of one sentence."""
    try:
        return await work
    except ToolError as exc:
        logger.info("%s failed: %s", tool, exc)
        return _result(str(exc), is_error=True)


async def _search(web: Web, search_url: str | None, query: str, limit: int) -> CallToolResult:
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
    return _result(_format_results(query, results, limit))


async def _fetch(web: Web, url: str, limit: int) -> CallToolResult:
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
        URL: resp.url,
        HTTP_STATUS: resp.status,
        CONTENT_TYPE: resp.media_type,
        TRUNCATED: False,
    }
    if resp.body is None and resp.status >= 400:
        text = f"{resp.url} answered HTTP {resp.status} {resp.reason}."
        return _result(text, is_error=True, meta=meta)
    kind = text_kind(resp.media_type)
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
    text = decode(body, resp.charset, html=kind == "html")
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
        meta[TRUNCATED] = True
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
    web = Web(timeout_s=timeout_s, max_bytes=max_bytes, allow=allow)
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
        meta={TOOL_KIND: "search"},
    )
    async def search(
        query: Annotated[str, Field(description="What to search for.")],
        limit: Annotated[int, Field(description="Maximum number of results (1-50).")] = 8,
    ) -> CallToolResult:
        return await _answer("search", _search(web, search_url, query, limit))

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
        meta={TOOL_KIND: "fetch"},
    )
    async def fetch(
        url: Annotated[str, Field(description="The http or https URL to fetch.")],
        max_chars: Annotated[
            int | None,
            Field(description=f"Most characters to return (default {default_max_chars})."),
        ] = None,
    ) -> CallToolResult:
        limit = default_max_chars if max_chars is None else max_chars
        return await _answer("fetch", _fetch(web, url, limit))

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
