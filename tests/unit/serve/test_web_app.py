"""The web app's files and the same-origin rule (issue #35), as ASGI and as headers.

``WebApp`` is driven with httpx2's ASGI transport over a folder of the test's own, so
these hold whatever the app's files are; the real app is tested in a browser
(tests/web)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx2
import pytest

from crow.serve.http import HttpSecurity, hosts_for
from crow.serve.web import CSP, WebApp


async def inner(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 299, "headers": []})
    await send({"type": "http.response.body", "body": b"inner"})


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "webapp").mkdir()
    (tmp_path / "webapp" / "index.html").write_text("<!doctype html><title>Crow</title>")
    (tmp_path / "webapp" / "js").mkdir()
    (tmp_path / "webapp" / "js" / "main.js").write_text("export const x = 1;\n")
    (tmp_path / "secret.txt").write_text("not for the web")
    return tmp_path / "webapp"


def client(folder: Path, security: HttpSecurity | None = None) -> httpx2.AsyncClient:
    security = security or HttpSecurity(token="t", allowed_hosts=hosts_for("127.0.0.1", ()))
    app = WebApp(inner, check_place=security.check_place, folder=folder)
    return httpx2.AsyncClient(
        transport=httpx2.ASGITransport(app=app), base_url="http://127.0.0.1:8123"
    )


async def test_the_page_and_its_files_are_served_with_a_strict_policy(folder):
    async with client(folder) as http:
        page = await http.get("/")
        module = await http.get("/app/js/main.js")
    assert page.status_code == 200 and page.text.startswith("<!doctype html>")
    assert page.headers["content-type"].startswith("text/html")
    assert module.status_code == 200 and "export const" in module.text
    assert "javascript" in module.headers["content-type"]
    for answer in (page, module):
        assert answer.headers["content-security-policy"] == CSP
        assert answer.headers["x-content-type-options"] == "nosniff"
        assert answer.headers["referrer-policy"] == "no-referrer"
        assert answer.headers["x-frame-options"] == "DENY"
    assert "script-src 'self'" in CSP and "'unsafe-inline'" not in CSP
    assert "default-src 'none'" in CSP and "frame-ancestors 'none'" in CSP


async def test_an_unchanged_file_is_not_sent_again(folder):
    async with client(folder) as http:
        first = await http.get("/app/js/main.js")
        again = await http.get("/app/js/main.js", headers={"If-None-Match": first.headers["etag"]})
    assert again.status_code == 304 and again.content == b""


async def test_nothing_outside_the_folder_is_served(folder):
    async with client(folder) as http:
        for path in ("/app/%2e%2e/secret.txt", "/app/js/%2e%2e/%2e%2e/secret.txt", "/app/no.js"):
            answer = await http.get(path)
            assert answer.status_code == 404, path
            assert "not for the web" not in answer.text


async def test_other_paths_go_to_the_acp_app_and_only_get_is_answered(folder):
    async with client(folder) as http:
        assert (await http.get("/acp")).status_code == 299
        assert (await http.get("/healthz")).status_code == 299
        refused = await http.post("/", content=b"x")
    assert refused.status_code == 405 and refused.headers["allow"] == "GET, HEAD"


async def test_the_files_keep_the_host_and_origin_checks(folder):
    async with client(folder) as http:
        assert (await http.get("/", headers={"Host": "evil.example"})).status_code == 403
        foreign = await http.get("/app/js/main.js", headers={"Origin": "http://evil.example"})
        assert foreign.status_code == 403


async def test_a_crow_without_its_app_says_so(tmp_path):
    async with client(tmp_path / "nothing") as http:
        answer = await http.get("/")
    assert answer.status_code == 404
    assert answer.json() == {"error": "this Crow has no web app installed"}


# ---- the same-origin rule of HttpSecurity ---------------------------------------------
def headers(host: str, origin: str) -> dict[str, Any]:
    return {"headers": [(b"host", host.encode()), (b"origin", origin.encode())]}


def test_the_apps_own_origin_is_let_in_on_the_bound_host():
    security = HttpSecurity(token=None, allowed_hosts=hosts_for("127.0.0.1", ()))
    assert security.check_place(headers("127.0.0.1:8123", "http://127.0.0.1:8123")) is None
    assert security.check_place(headers("localhost:8123", "http://localhost:8123")) is None
    # A TLS proxy in front passes the Host on; the page's origin is then https.
    assert security.check_place(headers("127.0.0.1:8123", "https://127.0.0.1:8123")) is None
    # Another port of the same host is another origin: another site's page.
    other = security.check_place(headers("127.0.0.1:8123", "http://127.0.0.1:9999"))
    assert other is not None and other.status_code == 403


def test_on_a_wildcard_bind_only_an_address_counts_as_the_apps_own_origin():
    """A wildcard bind takes any Host, so a name there may be a DNS-rebinding site's
    (its page, at its own origin, reaches this server by that name)."""
    security = HttpSecurity(token="t", allowed_hosts=hosts_for("0.0.0.0", ()))
    assert security.check_place(headers("192.0.2.7:8123", "http://192.0.2.7:8123")) is None
    assert security.check_place(headers("[2001:db8::1]:8123", "http://[2001:db8::1]:8123")) is None
    rebound = security.check_place(headers("evil.example:8123", "http://evil.example:8123"))
    assert rebound is not None and rebound.status_code == 403
    listed = HttpSecurity(
        token="t", allowed_hosts=None, allowed_origins=("https://crow.example.org",)
    )
    assert listed.check_place(headers("crow.example.org", "https://crow.example.org")) is None
