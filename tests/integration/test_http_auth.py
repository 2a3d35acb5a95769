"""``crow serve --http`` is authenticated by default (issue #11).

Every request needs the token, loopback included; the Host and Origin headers
are checked before it; Crow's own clients find the token in the runtime file.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx2
import pytest
from crow_testing.fakemodel import Text
from crow_testing.serve_support import HttpServer, client_for, write_config
from test_serve_http import INIT, post
from websockets.asyncio.client import connect

from crow.acp import schema
from crow.acp.errors import AUTH_REQUIRED, AcpError
from crow.acp.transports.http_client import connect_url
from crow.runtime.proc import start_time

CROW = [sys.executable, "-m", "crow"]
NO_TOOLS = "[tools]\nbuiltin = []\n"


@pytest.fixture
def server(crow_home, scripted_model) -> Iterator[HttpServer]:
    write_config(crow_home, scripted_model.base_url, extra=NO_TOOLS)
    running = HttpServer()
    yield running
    running.stop()


def port_of(url: str) -> int:
    port = urlsplit(url).port
    assert port is not None
    return port


def runtime_path(crow_home: Path, url: str) -> Path:
    return crow_home / "run" / f"server-{port_of(url)}.json"


def crow(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CROW, *args],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **env},
    )


# ---- the token ----------------------------------------------------------------------
def test_a_loopback_server_prints_its_url_with_a_generated_token(server):
    assert server.token and len(server.token) >= 32
    assert server.url == f"{server.bare_url}?token={server.token}"


def test_a_post_without_the_token_gets_401_before_any_acp(server):
    refused = post(server.bare_url, INIT)
    assert refused.status_code == 401
    assert refused.headers["www-authenticate"] == "Bearer"
    assert "jsonrpc" not in refused.json()
    garbage = httpx2.post(server.bare_url, content=b"{not json", timeout=10)
    assert garbage.status_code == 401  # not 400: nothing was parsed


def test_a_wrong_token_gets_401(server):
    assert post(server.bare_url, INIT, Authorization="Bearer wrong").status_code == 401
    assert post(f"{server.bare_url}?token=wrong", INIT).status_code == 401
    assert post(server.bare_url, INIT, Authorization=server.token).status_code == 401


def test_the_bearer_scheme_is_accepted_in_any_case(server):
    for scheme in ("Bearer", "bearer", "BEARER"):
        ok = post(server.bare_url, INIT, Authorization=f"{scheme} {server.token}")
        assert ok.status_code == 200, scheme


async def test_the_token_is_accepted_as_a_query_parameter(server):
    assert post(server.url, INIT).status_code == 200
    async with connect(server.ws_url) as ws:  # the query stays on the upgrade request
        await ws.send(json.dumps(INIT))
        assert "result" in json.loads(await ws.recv())


async def test_a_websocket_without_the_token_is_refused(server):
    with pytest.raises(ConnectionError, match=r"refused the token \(HTTP 401\)"):
        await connect_url(server.bare_url.replace("http://", "ws://"))
    transport = await connect_url(server.ws_url)  # the printed URL works as it is
    await transport.aclose()


def test_new_token_replaces_the_configured_one(crow_home, scripted_model):
    write_config(
        crow_home, scripted_model.base_url, extra=f'{NO_TOOLS}\n[server]\ntoken = "s3cret"\n'
    )
    running = HttpServer("--new-token")
    try:
        assert running.token not in (None, "s3cret")
        assert post(running.bare_url, INIT, Authorization="Bearer s3cret").status_code == 401
        assert post(running.url, INIT).status_code == 200
    finally:
        running.stop()


# ---- Host and Origin ------------------------------------------------------------------
def test_a_foreign_host_gets_403_even_with_the_token(server):
    port = port_of(server.url)
    refused = post(server.url, INIT, Host=f"evil.example:{port}")
    assert refused.status_code == 403
    assert refused.json() == {"error": f"host evil.example:{port} is not allowed"}
    for host in ("127.0.0.1", f"localhost:{port}", f"[::1]:{port}", "LOCALHOST"):
        assert post(server.url, INIT, Host=host).status_code == 200, host


def test_the_configured_token_and_allowed_hosts_are_used(crow_home, scripted_model):
    extra = f'{NO_TOOLS}\n[server]\ntoken = "s3cret"\nallowed_hosts = ["crow.lan"]\n'
    write_config(crow_home, scripted_model.base_url, extra=extra)
    running = HttpServer()
    try:
        assert running.token == "s3cret"
        port = port_of(running.url)
        assert post(running.url, INIT, Host=f"crow.lan:{port}").status_code == 200
        assert post(running.url, INIT, Host="crow.lan.evil").status_code == 403
    finally:
        running.stop()


def test_a_wildcard_bind_accepts_any_host_but_still_needs_the_token(crow_home, scripted_model):
    write_config(crow_home, scripted_model.base_url, extra=NO_TOOLS)
    running = HttpServer(bind="0.0.0.0:0")
    try:
        url = f"http://127.0.0.1:{port_of(running.url)}/acp"
        assert post(url, INIT, Host="crow.example").status_code == 401
        auth = f"Bearer {running.token}"
        assert post(url, INIT, Host="crow.example", Authorization=auth).status_code == 200
    finally:
        running.stop()


def test_a_foreign_origin_gets_403(server):
    assert post(server.url, INIT, Origin="https://evil.example").status_code == 403


# ---- the runtime file -------------------------------------------------------------------
def test_the_runtime_file_is_private_and_goes_with_the_server(crow_home, scripted_model):
    write_config(crow_home, scripted_model.base_url, extra=NO_TOOLS)
    running = HttpServer(preexec_fn=lambda: os.umask(0o022))
    path = runtime_path(crow_home, running.url)
    try:
        assert path.parent.stat().st_mode & 0o777 == 0o700
        assert path.stat().st_mode & 0o777 == 0o600
        assert json.loads(path.read_text()) == {
            "url": running.bare_url,
            "token": running.token,
            "pid": running.process.pid,
            "started": start_time(running.process.pid),
        }
    finally:
        running.stop()  # SIGTERM
    assert not path.exists()


def test_a_stale_runtime_file_is_replaced(crow_home, scripted_model):
    write_config(crow_home, scripted_model.base_url, extra=NO_TOOLS)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    gone = subprocess.Popen(["true"])
    gone.wait()
    path = crow_home / "run" / f"server-{port}.json"
    path.parent.mkdir(parents=True)
    url = f"http://127.0.0.1:{port}/acp"
    path.write_text(json.dumps({"url": url, "token": "old", "pid": gone.pid}))
    running = HttpServer(bind=f"127.0.0.1:{port}")
    try:
        held = json.loads(path.read_text())
        assert held["pid"] == running.process.pid and held["token"] == running.token
    finally:
        running.stop()


def test_crow_run_and_sessions_find_the_token_in_the_runtime_file(server, scripted_model, tmp_path):
    scripted_model.script(Text(text="Hello through the runtime file"))
    ran = crow("run", "--url", server.bare_url, "hi")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == "Hello through the runtime file\n"
    loopback = server.bare_url.replace("127.0.0.1", "localhost")  # the same server
    listed = crow("sessions", "--url", loopback)
    assert listed.returncode == 0, listed.stderr
    assert len(listed.stdout.splitlines()) == 2  # the header and the session
    # Another CROW_HOME has no runtime file: the server refuses the client.
    elsewhere = crow("sessions", "--url", server.bare_url, CROW_HOME=str(tmp_path / "other"))
    assert elsewhere.returncode == 7
    assert server.token not in elsewhere.stderr


#: A stand-in for whatever took the port: it records each request's headers, answers 401.
RECORDER = """
import http.server, sys
class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        print(dict(self.headers), flush=True)
        self.send_response(401); self.send_header("Content-Length", "0"); self.end_headers()
server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


@pytest.mark.parametrize("reused", ["pid", "port"])
def test_crow_run_sends_no_token_to_whatever_took_a_dead_servers_port(crow_home, reused):
    """kill -9 leaves the runtime file; another program takes the port and the pid goes
    to another process (``reused="pid"``: a live pid with another start time) or stays
    with a live process that no longer listens there (``"port"``): no token is sent."""
    recorder = subprocess.Popen([sys.executable, "-c", RECORDER], stdout=subprocess.PIPE, text=True)
    try:
        assert recorder.stdout is not None
        port = int(recorder.stdout.readline())
        url = f"http://127.0.0.1:{port}/acp"
        path = crow_home / "run" / f"server-{port}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        pid = os.getpid()
        started = "1" if reused == "pid" else start_time(pid)
        secret = "the-dead-servers-token"
        path.write_text(json.dumps({"url": url, "token": secret, "pid": pid, "started": started}))
        ran = crow("run", "--url", url, "hi")
        assert ran.returncode == 7
        recorder.kill()
        seen = recorder.communicate()[0]
    finally:
        recorder.kill()
        recorder.wait()
    assert "Content-Type" in seen  # it was asked, without the token
    assert secret not in seen and "Authorization" not in seen


@pytest.mark.parametrize("scheme", ["http", "ws"])
def test_crow_run_tells_a_wrong_token_a_wrong_path_and_nothing_listening_apart(server, scheme):
    bare = server.bare_url.replace("http", scheme, 1)
    wrong_token = crow("run", "--url", bare, "--token", "wrong", "hi")
    wrong_path = crow("run", "--url", bare.replace("/acp", "/nope"), "hi")
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        nothing = f"{scheme}://127.0.0.1:{free.getsockname()[1]}/acp"
    nobody = crow("run", "--url", nothing, "hi")
    assert [r.returncode for r in (wrong_token, wrong_path, nobody)] == [7, 7, 7]
    assert "refused the token (HTTP 401): pass the server's token" in wrong_token.stderr
    assert "nothing serves ACP at" in wrong_path.stderr and "(HTTP 404)" in wrong_path.stderr
    assert f"nothing is listening at {nothing}" in nobody.stderr


# ---- --no-token -----------------------------------------------------------------------------
def test_no_token_is_refused_off_loopback(crow_home, scripted_model):
    write_config(crow_home, scripted_model.base_url, extra=NO_TOOLS)
    result = crow("serve", "--http", "0.0.0.0:0", "--no-token")
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1].startswith("crow: --no-token")


def test_no_token_on_loopback_serves_without_a_token_and_warns(crow_home, scripted_model):
    write_config(crow_home, scripted_model.base_url, extra=NO_TOOLS)
    running = HttpServer("--no-token")
    try:
        assert "WARNING" in running.first_lines
        assert "run commands as you" in running.first_lines
        assert running.token is None
        assert post(running.url, INIT).status_code == 200
        held: dict[str, Any] = json.loads(runtime_path(crow_home, running.url).read_text())
        assert held["token"] is None
    finally:
        running.stop()


async def test_without_a_token_no_client_may_name_an_mcp_server(crow_home, scripted_model):
    write_config(crow_home, scripted_model.base_url, extra=NO_TOOLS)
    running = HttpServer("--no-token")
    try:
        client = await client_for(running.url)
        server = schema.McpServerStdio(name="x", command="/bin/sh", args=["-c", "id"])
        with pytest.raises(AcpError) as refused:
            await client.new_session("/tmp", mcp_servers=[server])
        assert refused.value.code == AUTH_REQUIRED and "--no-token" in refused.value.message
        session = await client.new_session("/tmp")  # without servers it works
        assert session.id
        await client.aclose()
    finally:
        running.stop()
