"""The web MCP server, through a real MCP client, against a local HTTP server on 127.0.0.1.

fetch refuses loopback addresses (issue #11), so the tests open the local server to it with
``allow_hosts``; the refusals themselves are tested at the end of the fetch section.
"""

from __future__ import annotations

import asyncio
import gc
import json
import socket
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from mcp import Client, StdioServerParameters
from mcp_types import CallToolResult, TextContent

from crow.servers.web import build_server, html_to_text, main

MAX_BYTES = 20_000
TIMEOUT_S = 0.5

PAGE = b"""<!doctype html>
<html><head><title>Test page</title>
<style>body { color: red }</style>
<script>var secret = "SCRIPT-TEXT"; document.write("<p>no</p>");</script>
</head><body>
<nav><a href="/home">NAV-HOME</a><ul><li>NAV-ITEM</li></ul></nav>
<h1>Main Heading</h1>
<p>First paragraph with a <a href="/docs/guide.html">guide link</a> and <b>bold</b> text.</p>
<h2>Second &amp; last</h2>
<ul><li>alpha</li><li>beta <a href="https://example.org/beta">beta site</a></li></ul>
<noscript>NOSCRIPT-TEXT</noscript>
<svg viewBox="0 0 1 1"><title>SVG-TITLE</title><path d="M0 0"/></svg>
<p>Caf\xc3\xa9 closing paragraph.</p>
</body></html>
"""

RESULTS = [
    {
        "title": f"Result {n}",
        "url": f"https://example.com/{n}",
        "content": f"Snippet   number {n}.",
    }
    for n in range(1, 11)
]


class _Server(ThreadingHTTPServer):
    daemon_threads = False  # so server_close() joins every handler thread
    released: threading.Event
    connections = 0  # accepted so far: a refused fetch must make none

    def verify_request(self, request: Any, client_address: Any) -> bool:
        self.connections += 1
        return True

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://[{host}]:{port}" if ":" in str(host) else f"http://{host}:{port}"


class _Server6(_Server):
    address_family = socket.AF_INET6


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, status: int, ctype: str, body: bytes, *, length: bool = True) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        if length:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        query = parse_qs(parts.query)
        match parts.path:
            case "/search":
                if query.get("format") != ["json"]:
                    self._send(400, "text/plain", b"format=json required")
                    return
                results = [dict(RESULTS[0], title=f"About {query['q'][0]}"), *RESULTS[1:]]
                self._send(200, "application/json", json.dumps({"results": results}).encode())
            case "/search-empty":
                self._send(200, "application/json", b'{"results": []}')
            case "/search-bad":
                self._send(200, "text/html", b"<html>not json</html>")
            case "/search-slow" | "/slow":
                if self.server.released.wait(10):
                    return  # the test is over; nobody is listening
                self._send(200, "text/plain", b"late")
            case "/page":
                self._send(200, "text/html; charset=utf-8", PAGE)
            case "/redirect":
                self.send_response(302)
                self.send_header("Location", "/page")
                self.send_header("Content-Length", "0")
                self.end_headers()
            case "/to":
                self.send_response(302)
                self.send_header("Location", query["url"][0])
                self.send_header("Content-Length", "0")
                self.end_headers()
            case "/loop":
                self.send_response(302)
                self.send_header("Location", "/loop")
                self.send_header("Content-Length", "0")
                self.end_headers()
            case "/big":
                self._send(200, "text/plain", b"x" * (MAX_BYTES * 3))
            case "/big-stream":  # no Content-Length: the reader must stop by itself
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.end_headers()
                try:
                    for _ in range(200):
                        self.wfile.write(b"y" * 1000)
                except OSError:
                    pass  # the client stopped reading, as it should
            case "/image.png":
                self._send(200, "image/png", b"\x89PNG\r\n\x1a\n" + b"\x00" * 64)
            case "/long.txt":
                self._send(200, "text/plain; charset=utf-8", b"0123456789" * 10)
            case "/data.json":
                self._send(200, "application/json", b'{"a": [1, 2, 3]}')
            case _:
                self._send(404, "text/html", b"<h1>Not found</h1>")


@contextmanager
def _serving(server: _Server) -> Iterator[_Server]:
    server.released = threading.Event()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield server
    finally:
        server.released.set()
        server.shutdown()
        server.server_close()  # joins the handler threads
        thread.join(5)
        assert not thread.is_alive()
        gc.collect()  # surface any unclosed socket as a ResourceWarning here, in this test


@pytest.fixture
def site_server() -> Iterator[_Server]:
    with _serving(_Server(("127.0.0.1", 0), _Handler)) as server:
        yield server


@pytest.fixture
def site(site_server: _Server) -> str:
    return site_server.url


@pytest.fixture
def other() -> Iterator[_Server]:
    """A second local server, on another port, that fetch is not opened to."""
    with _serving(_Server(("127.0.0.1", 0), _Handler)) as server:
        yield server


@pytest.fixture
def site6() -> Iterator[_Server]:
    try:
        server = _Server6(("::1", 0), _Handler)
    except OSError:  # pragma: no cover - a host without IPv6
        pytest.skip("no IPv6 loopback here")
    with _serving(server):
        yield server


def _text(result: CallToolResult) -> str:
    assert len(result.content) == 1
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


async def _call(server: Any, tool: str, **arguments: Any) -> CallToolResult:
    async with asyncio.timeout(15), Client(server) as client:
        return await client.call_tool(tool, arguments)


def _web(site: str, **kwargs: Any) -> Any:
    """The server under test, its fetch opened to ``site`` (and to nothing else)."""
    options: dict[str, Any] = {
        "timeout_s": TIMEOUT_S,
        "max_bytes": MAX_BYTES,
        "allow_hosts": (urlsplit(site).netloc,),
    }
    options.update(kwargs)
    return build_server(search_url=f"{site}/search", **options)


# --- listing


async def test_tools_listed_with_kind_and_annotations(site: str) -> None:
    async with asyncio.timeout(15), Client(_web(site)) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert set(tools) == {"search", "fetch"}
    for name in ("search", "fetch"):
        tool = tools[name]
        assert tool.meta == {"crow/kind": name}
        assert tool.annotations is not None
        assert tool.annotations.read_only_hint is True
        assert tool.annotations.open_world_hint is True
    assert set(tools["search"].input_schema["properties"]) == {"query", "limit"}
    assert set(tools["fetch"].input_schema["properties"]) == {"url", "max_chars"}
    assert tools["search"].input_schema["required"] == ["query"]


# --- search


async def test_search_formats_numbered_results(site: str) -> None:
    result = await _call(_web(site), "search", query="crow agent")
    assert not result.is_error
    text = _text(result)
    assert text.startswith(
        "1. About crow agent\n   https://example.com/1\n   Snippet number 1.\n\n2. Result 2\n"
    )
    assert "8. Result 8" in text
    assert "9. Result 9" not in text  # default limit 8


async def test_search_limit(site: str) -> None:
    text = _text(await _call(_web(site), "search", query="q", limit=3))
    assert [line for line in text.splitlines() if line[:1].isdigit()] == [
        "1. About q",
        "2. Result 2",
        "3. Result 3",
    ]


async def test_search_no_results(site: str) -> None:
    server = build_server(search_url=f"{site}/search-empty", timeout_s=TIMEOUT_S)
    result = await _call(server, "search", query="nothing")
    assert not result.is_error
    assert _text(result) == "No results for 'nothing'."


async def test_search_not_configured() -> None:
    result = await _call(build_server(search_url=None), "search", query="x")
    assert result.is_error
    text = _text(result)
    assert "not configured" in text
    assert "web.search_url" in text
    assert "CROW_SEARCH_URL" in text


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/search-bad", "did not return valid JSON"),
        ("/search-missing", "answered HTTP 404 Not Found"),
        ("/search-slow", f"Timed out after {TIMEOUT_S:g} s"),
    ],
)
async def test_search_errors(site: str, path: str, expected: str) -> None:
    server = build_server(search_url=f"{site}{path}", timeout_s=TIMEOUT_S)
    result = await _call(server, "search", query="x")
    assert result.is_error
    text = _text(result)
    assert expected in text
    assert "\n" not in text
    assert text.endswith(".")


async def test_search_unreachable_endpoint() -> None:
    server = build_server(search_url="http://127.0.0.1:9/search", timeout_s=TIMEOUT_S)
    result = await _call(server, "search", query="x")
    assert result.is_error
    assert "127.0.0.1:9" in _text(result)


# --- fetch


async def test_fetch_html_to_text(site: str) -> None:
    result = await _call(_web(site), "fetch", url=f"{site}/page")
    assert not result.is_error
    text = _text(result)
    for gone in ("SCRIPT-TEXT", "color: red", "NAV-HOME", "NAV-ITEM", "NOSCRIPT", "SVG-TITLE"):
        assert gone not in text
    lines = text.splitlines()
    assert lines[0] == "# Main Heading"
    assert "## Second & last" in lines
    assert f"First paragraph with a guide link ({site}/docs/guide.html) and bold text." in lines
    assert "- alpha" in lines
    assert "- beta beta site (https://example.org/beta)" in lines
    assert "Café closing paragraph." in lines
    assert result.meta is not None
    crow_meta = {k: v for k, v in result.meta.items() if k.startswith("crow/")}
    assert crow_meta == {  # the SDK may add its own serverInfo stamp beside these
        "crow/url": f"{site}/page",
        "crow/status": 200,
        "crow/contentType": "text/html",
        "crow/truncated": False,
    }


async def test_fetch_follows_redirect(site: str) -> None:
    result = await _call(_web(site), "fetch", url=f"{site}/redirect")
    assert not result.is_error
    assert result.meta is not None
    assert result.meta["crow/url"] == f"{site}/page"
    assert result.meta["crow/status"] == 200
    assert "# Main Heading" in _text(result)


async def test_fetch_redirect_loop_refused(site: str) -> None:
    result = await _call(_web(site), "fetch", url=f"{site}/loop")
    assert result.is_error
    assert "Too many redirects (more than 5)" in _text(result)


@pytest.mark.parametrize("path", ["/big", "/big-stream"])
async def test_fetch_size_limit(site: str, path: str) -> None:
    result = await _call(_web(site), "fetch", url=f"{site}{path}")
    assert result.is_error
    assert f"larger than the {MAX_BYTES}-byte limit" in _text(result)


async def test_fetch_timeout(site: str) -> None:
    loop = asyncio.get_running_loop()
    start = loop.time()
    result = await _call(_web(site), "fetch", url=f"{site}/slow")
    assert loop.time() - start < 5
    assert result.is_error
    assert _text(result) == f"Timed out after {TIMEOUT_S:g} s waiting for {site}/slow."


@pytest.mark.parametrize(
    ("url", "what"),
    [
        ("file:///etc/passwd", "a file: URL"),
        ("ftp://127.0.0.1/x", "a ftp: URL"),
        ("javascript:alert(1)", "a javascript: URL"),
        ("example.com/page", "a URL without a scheme"),
    ],
)
async def test_fetch_refuses_other_schemes(site: str, url: str, what: str) -> None:
    result = await _call(_web(site), "fetch", url=url)
    assert result.is_error
    assert _text(result) == f"Refused: fetch reads only http and https URLs, not {what}."


async def test_fetch_refuses_binary(site: str) -> None:
    result = await _call(_web(site), "fetch", url=f"{site}/image.png")
    assert result.is_error
    text = _text(result)
    assert "image/png" in text
    assert "Refused" in text


async def test_fetch_404(site: str) -> None:
    result = await _call(_web(site), "fetch", url=f"{site}/missing")
    assert result.is_error
    assert _text(result) == f"{site}/missing answered HTTP 404 Not Found."
    assert result.meta is not None
    assert result.meta["crow/status"] == 404


async def test_fetch_truncates_with_note(site: str) -> None:
    result = await _call(_web(site), "fetch", url=f"{site}/long.txt", max_chars=25)
    assert not result.is_error
    assert _text(result) == (
        "0123456789012345678901234\n\n"
        "[truncated: 75 more characters; call fetch with a larger max_chars]"
    )
    assert result.meta is not None
    assert result.meta["crow/truncated"] is True
    assert result.meta["crow/contentType"] == "text/plain"


async def test_fetch_default_max_chars_from_server(site: str) -> None:
    result = await _call(_web(site, max_chars=10), "fetch", url=f"{site}/long.txt")
    assert _text(result).startswith("0123456789\n\n[truncated: 90 more characters;")


async def test_fetch_plain_text_and_json_as_is(site: str) -> None:
    async with asyncio.timeout(15), Client(_web(site)) as client:
        text = await client.call_tool("fetch", {"url": f"{site}/long.txt"})
        data = await client.call_tool("fetch", {"url": f"{site}/data.json"})
    assert _text(text) == "0123456789" * 10
    assert _text(data) == '{"a": [1, 2, 3]}'
    assert data.meta is not None
    assert data.meta["crow/contentType"] == "application/json"


async def test_fetch_max_chars_must_be_positive(site: str) -> None:
    result = await _call(_web(site), "fetch", url=f"{site}/long.txt", max_chars=0)
    assert result.is_error
    assert "max_chars" in _text(result)


# --- fetch refuses local and private addresses (issue #11)


def _refusal(where: str, address: str, what: str) -> str:
    return (
        f"fetch refused: {where} resolves to {address}, {what}; Crow's fetch does not reach "
        "loopback, private, link-local or metadata addresses "
        "(allow it with web.allow_hosts in config.toml)."
    )


@pytest.mark.parametrize(
    ("host", "address", "what"),
    [
        ("127.0.0.1", "127.0.0.1", "a loopback address"),
        ("2130706433", "127.0.0.1", "a loopback address"),  # 127.0.0.1 as one decimal number
        ("0x7f.1", "127.0.0.1", "a loopback address"),
        ("127.1", "127.0.0.1", "a loopback address"),
        ("[::ffff:127.0.0.1]", "::ffff:127.0.0.1", "a loopback address"),
        ("0", "0.0.0.0", "an unspecified address"),  # Linux connects 0.0.0.0 to loopback
    ],
)
async def test_fetch_refuses_loopback(site_server: _Server, host: str, address: str, what: str):
    url = f"http://{host}:{site_server.server_address[1]}/page"
    result = await _call(build_server(search_url=None, timeout_s=TIMEOUT_S), "fetch", url=url)
    assert result.is_error
    assert _text(result) == _refusal(url, address, what)
    assert site_server.connections == 0


async def test_fetch_refuses_localhost(site_server: _Server) -> None:
    url = f"http://localhost:{site_server.server_address[1]}/page"
    result = await _call(build_server(search_url=None, timeout_s=TIMEOUT_S), "fetch", url=url)
    assert result.is_error
    text = _text(result)
    assert text.startswith(f"fetch refused: {url} resolves to ")
    assert "a loopback address" in text
    assert site_server.connections == 0


async def test_fetch_refuses_ipv6_loopback(site6: _Server) -> None:
    url = f"{site6.url}/page"
    result = await _call(build_server(search_url=None, timeout_s=TIMEOUT_S), "fetch", url=url)
    assert result.is_error
    assert _text(result) == _refusal(url, "::1", "a loopback address")
    assert site6.connections == 0


@pytest.mark.parametrize(
    ("url", "address", "what"),
    [
        ("http://169.254.169.254/latest/meta-data/", "169.254.169.254", "a cloud metadata address"),
        ("http://[fd00:ec2::254]/latest/", "fd00:ec2::254", "a cloud metadata address"),
        ("http://[::ffff:169.254.169.254]/", "::ffff:169.254.169.254", "a cloud metadata address"),
        ("http://10.1.2.3/", "10.1.2.3", "a private address"),
        ("http://100.64.0.1/", "100.64.0.1", "a private address"),
        ("http://[64:ff9b::a00:1]/", "64:ff9b::a00:1", "a private address"),  # NAT64 10.0.0.1
        ("https://[fe80::1]/", "fe80::1", "a link-local address"),
    ],
)
async def test_fetch_refuses_metadata_private_and_link_local(url: str, address: str, what: str):
    # A connection attempt would time out (TIMEOUT_S) or fail, not answer with this sentence.
    result = await _call(build_server(search_url=None, timeout_s=TIMEOUT_S), "fetch", url=url)
    assert result.is_error
    assert _text(result) == _refusal(url, address, what)


async def test_fetch_refuses_a_redirect_to_loopback(site_server: _Server, other: _Server):
    target = f"{other.url}/page"
    url = f"{site_server.url}/to?url={target}"
    result = await _call(_web(site_server.url), "fetch", url=url)
    assert result.is_error
    assert _text(result) == _refusal(
        f"{url} redirected to {target}, which", "127.0.0.1", "a loopback address"
    )
    assert (site_server.connections, other.connections) == (1, 0)


@pytest.mark.parametrize(
    ("allow", "fetched", "opened"),
    [
        ("127.0.0.1:{site}", "127.0.0.1:{site}", True),
        ("127.0.0.1:{site}", "127.0.0.1:{other}", False),  # the port counts
        ("localhost", "localhost:{other}", True),  # a name without a port: any port
        ("localhost", "127.0.0.1:{other}", False),  # a name opens that name only
        ("127.0.0.0/8", "127.0.0.1:{other}", True),
        ("10.0.0.0/8", "127.0.0.1:{other}", False),
        ("[::1]", "127.0.0.1:{other}", False),
    ],
)
async def test_fetch_allow_hosts_opens_only_what_it_names(
    site_server: _Server, other: _Server, allow: str, fetched: str, opened: bool
) -> None:
    ports = {"site": site_server.server_address[1], "other": other.server_address[1]}
    server = _web(site_server.url, allow_hosts=(allow.format(**ports),))
    url = f"http://{fetched.format(**ports)}/long.txt"
    result = await _call(server, "fetch", url=url)
    if opened:
        assert not result.is_error
        assert _text(result) == "0123456789" * 10
    else:
        assert result.is_error
        assert _text(result).startswith(f"fetch refused: {url} resolves to 127.0.0.1,")
        assert (site_server.connections, other.connections) == (0, 0)


async def test_search_endpoint_is_not_guarded(site: str) -> None:
    server = build_server(search_url=f"{site}/search", timeout_s=TIMEOUT_S)  # no allow_hosts
    result = await _call(server, "search", query="local")
    assert not result.is_error
    assert _text(result).startswith("1. About local\n")


@pytest.mark.parametrize("entry", ["", "http://localhost/", "localhost:0", "a b", "[wiki]:80"])
def test_bad_allow_host_is_refused(entry: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ValueError, match="is not a host name or IP"):
        build_server(search_url=None, allow_hosts=(entry,))
    with pytest.raises(SystemExit) as exited:
        main(["--allow-host", entry])
    assert exited.value.code == 2
    assert "--allow-host:" in capsys.readouterr().err


def test_html_to_text_is_forgiving() -> None:
    text = html_to_text(
        "<p>one<p>two <a href='#top'>top</a> <a href='javascript:x()'>js</a>"
        "<nav>never closed <b>hidden",
        "http://h/",
    )
    assert text == "one\n\ntwo top js"
    assert html_to_text("<title>T</title><p>body</p>") == "Title: T\n\nbody"
    assert html_to_text("<pre>  a\n    b</pre>after") == "  a\n    b\n\nafter"


# --- stdio


async def test_stdio_subprocess(site: str) -> None:
    params = StdioServerParameters(
        command=sys.executable,
        args=[
            *("-m", "crow.servers.web", "--search-url", f"{site}/search"),
            *("--allow-host", urlsplit(site).netloc),
        ],
    )
    async with asyncio.timeout(15), Client(params) as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
        found = await client.call_tool("search", {"query": "stdio", "limit": 2})
        page = await client.call_tool("fetch", {"url": f"{site}/redirect"})
    assert names == {"search", "fetch"}
    assert _text(found).startswith("1. About stdio\n")
    assert "3. " not in _text(found)
    assert page.meta is not None
    assert page.meta["crow/url"] == f"{site}/page"
    assert "# Main Heading" in _text(page)
