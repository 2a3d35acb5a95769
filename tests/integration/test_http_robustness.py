"""``crow serve --http`` under bad input, idle clients and clients that stop reading.

Each test runs the real server in a subprocess (``serve_http``, as ``crow serve
--http`` runs it) with small ``HttpLimits``, so expiry and back-pressure show up
in a few hundred milliseconds and a few megabytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
from crow_testing.fakemodel import Text
from crow_testing.serve_support import HttpServer, write_config
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from crow.acp import ClientSide, schema
from crow.acp.errors import AcpError
from crow.acp.transports.http_client import connect_url

CLIENT_INFO = schema.Implementation(name="robustness-test", version="0")

#: Runs the server as ``crow serve --http`` does, with the limits given as NAME=VALUE.
LAUNCH = """
import asyncio, sys
from crow.acp.transports.http_server import HttpLimits
from crow.serve.http import HttpSecurity, serve_http
from crow.config import load_config
limits = {k: float(v) for k, v in (a.split("=") for a in sys.argv[1:])}
limits = {k: int(v) if k.startswith("max_") and k.endswith(("bytes", "connections")) else v
          for k, v in limits.items()}
asyncio.run(serve_http(load_config(), "127.0.0.1", 0, HttpSecurity(), limits=HttpLimits(**limits)))
"""


class LimitedServer(HttpServer):
    def __init__(self, **limits: float) -> None:
        settings = [f"{k}={v}" for k, v in limits.items()]
        super().__init__(command=[sys.executable, "-c", LAUNCH, *settings])
        host_port = self.url.split("//")[1].split("/")[0]
        self.host, self.port = host_port.rsplit(":", 1)[0], int(host_port.rsplit(":", 1)[1])


@pytest.fixture
def start(crow_home, scripted_model) -> Iterator[Any]:
    write_config(crow_home, scripted_model.base_url, extra="[tools]\nbuiltin = []\n")
    started: list[LimitedServer] = []

    def run(**limits: float) -> LimitedServer:
        started.append(LimitedServer(**limits))
        return started[-1]

    yield run
    for server in started:
        server.stop()


@pytest.fixture
def server(start) -> LimitedServer:
    return start()


def rpc(rid: Any, method: str, **params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}


INIT = rpc(1, "initialize", protocolVersion=2, info={"name": "t", "version": "1"})


def post(url: str, body: Any, **headers: str) -> httpx2.Response:
    return httpx2.post(
        url,
        content=json.dumps(body),
        headers={"Content-Type": "application/json", **headers},
        timeout=10,
    )


def open_connection(url: str) -> str:
    opened = post(url, INIT)
    assert opened.status_code == 200, opened.text
    return opened.headers["acp-connection-id"]


@contextlib.contextmanager
def event_stream(server: LimitedServer, connection: str) -> Iterator[httpx2.Response]:
    """The connection's own SSE stream, open."""
    headers = {"Accept": "text/event-stream", "Acp-Connection-Id": connection}
    with httpx2.stream("GET", server.url, headers=headers, timeout=10) as stream:
        assert stream.status_code == 200
        yield stream


async def client_for(url: str) -> ClientSide:
    client = ClientSide(await connect_url(url), info=CLIENT_INFO)
    await client.__aenter__()
    await client.initialize()
    return client


# ---- 1. Acp-Session-Id is required and must match; an unknown one is -32002 -------
def test_a_session_post_without_its_session_header_is_refused(server, scripted_model):
    scripted_model.set_default(Text(text="ok"))

    async def new_session() -> str:
        client = await client_for(server.url)
        session = await client.new_session("/tmp")
        await client.aclose()
        return session.id

    session_id = asyncio.run(new_session())
    connection = open_connection(server.url)
    prompt = rpc(2, "session/prompt", sessionId=session_id, prompt=[{"type": "text", "text": "x"}])
    missing = post(server.url, prompt, **{"Acp-Connection-Id": connection})
    assert missing.status_code == 400
    assert "missing Acp-Session-Id" in missing.json()["error"]
    other = post(
        server.url, prompt, **{"Acp-Connection-Id": connection, "Acp-Session-Id": "sess_other"}
    )
    assert other.status_code == 400 and "mismatched" in other.json()["error"]
    # A session-scoped method needs the header even without params.sessionId.
    bare = post(server.url, rpc(3, "session/prompt"), **{"Acp-Connection-Id": connection})
    assert bare.status_code == 400
    named = {"Acp-Connection-Id": connection, "Acp-Session-Id": session_id}
    assert post(server.url, prompt, **named).status_code == 202


def test_an_unknown_session_is_answered_32002_on_its_stream_not_404(server):
    """ACP-V2.md §11: the TS SDK's client takes HTTP 404 for "the connection is gone" and
    closes it; an unknown session is a JSON-RPC error on the session's stream."""
    connection = open_connection(server.url)
    unknown = {"Acp-Connection-Id": connection, "Acp-Session-Id": "sess_nope"}
    headers = {"Accept": "text/event-stream", **unknown}
    with httpx2.stream("GET", server.url, headers=headers, timeout=10) as stream:
        assert stream.status_code == 200
        prompt = rpc(2, "session/prompt", sessionId="sess_nope", prompt=[])
        assert post(server.url, prompt, **unknown).status_code == 202
        close = rpc(3, "session/close", sessionId="sess_nope")
        assert post(server.url, close, **unknown).status_code == 202
        answers = {}
        lines = stream.iter_lines()
        while len(answers) < 2:
            line = next(lines)
            if line.startswith("data:"):
                message = json.loads(line[5:])
                answers[message["id"]] = message
    assert answers[2]["error"]["code"] == -32002
    assert answers[2]["error"]["data"] == {"sessionId": "sess_nope"}
    assert answers[3]["result"] == {}  # closing an unknown session succeeds (§5.4)
    # The connection is still usable.
    listed = post(server.url, rpc(4, "session/list"), **{"Acp-Connection-Id": connection})
    assert listed.status_code == 202


async def test_the_http_client_gets_a_json_rpc_error_for_an_unknown_session(server):
    client = await client_for(server.url)
    async with asyncio.timeout(20):
        with pytest.raises(AcpError) as refused:
            await client.resume_session("sess_nope", "/tmp")
        assert refused.value.code == -32002
        listed = await client.call("session/list", schema.ListSessionsRequest())
        assert listed is not None  # the connection lives on
    await client.aclose()


# ---- 2. malformed initialize ids and headers are 400, not 500 ----------------------
@pytest.mark.parametrize("rid", [{"a": 1}, [1], None, 1.5, True])
def test_initialize_with_a_bad_id_is_400(server, rid):
    refused = post(server.url, {**INIT, "id": rid})
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == -32600
    assert "id" in refused.json()["error"]["message"]
    assert post(server.url, INIT).status_code == 200  # and the server is fine


def raw_request(server: LimitedServer, head: bytes, body: bytes = b"") -> bytes:
    with socket.create_connection((server.host, server.port), timeout=10) as raw:
        raw.sendall(head + body)
        reply = b""
        while chunk := raw.recv(65536):
            reply += chunk
    return reply


def test_a_header_that_is_not_utf8_is_400(server):
    body = json.dumps(INIT).encode()
    head = (
        b"POST /acp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"X-Name: caf\xe9\xff\r\nConnection: close\r\n"
        b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n"
    )
    reply = raw_request(server, head, body)
    assert reply.startswith(b"HTTP/1.1 400")
    assert b"not valid UTF-8" in reply
    assert post(server.url, INIT).status_code == 200


# ---- 3. deeply nested JSON gets an error and the connection lives --------------------
@pytest.mark.parametrize("depth", [1_000, 100_000])
async def test_deeply_nested_json_over_websocket_gets_an_error_reply(server, depth):
    async with asyncio.timeout(20), connect(server.ws_url, max_size=None) as ws:
        await ws.send(json.dumps(INIT))
        assert "result" in json.loads(await ws.recv())
        await ws.send("[" * depth + "]" * depth)
        error = json.loads(await ws.recv())
        assert error["id"] is None and error["error"]["code"] in (-32700, -32600)
        await ws.send(json.dumps(rpc(2, "session/list")))
        assert json.loads(await ws.recv())["id"] == 2


async def test_a_websocket_that_offers_compression_gets_plain_frames(server):
    """permessage-deflate would cost a zlib context per connection and CPU per update."""
    async with asyncio.timeout(20), connect(server.ws_url, compression="deflate") as ws:
        assert "Sec-WebSocket-Extensions" in ws.request.headers  # offered
        assert "Sec-WebSocket-Extensions" not in ws.response.headers  # declined
        await ws.send(json.dumps(INIT))
        assert "result" in json.loads(await ws.recv())


def test_deeply_nested_json_over_http_is_400_and_the_connection_lives(server):
    connection = open_connection(server.url)
    deep = b"[" * 100_000 + b"]" * 100_000
    refused = httpx2.post(
        server.url,
        content=deep,
        headers={"Content-Type": "application/json", "Acp-Connection-Id": connection},
        timeout=10,
    )
    assert refused.status_code == 400 and refused.json()["error"]["code"] == -32700
    listed = post(server.url, rpc(2, "session/list"), **{"Acp-Connection-Id": connection})
    assert listed.status_code == 202


# ---- 4. idle HTTP connections expire; failed initializes hold no slot ---------------
def test_an_idle_connection_expires_and_frees_its_slot(start):
    server = start(idle_timeout_s=2.0, max_connections=2)
    first, second = open_connection(server.url), open_connection(server.url)
    with contextlib.ExitStack() as streams:
        for connection in (first, second):  # open streams keep both alive while we look
            headers = {"Accept": "text/event-stream", "Acp-Connection-Id": connection}
            opened = streams.enter_context(
                httpx2.stream("GET", server.url, headers=headers, timeout=10)
            )
            assert opened.status_code == 200
        full = post(server.url, INIT)
        assert full.status_code == 503 and "too many connections" in full.json()["error"]
    deadline = time.monotonic() + 20
    while (opened_again := post(server.url, INIT)).status_code == 503:
        assert time.monotonic() < deadline, "idle connections never expired"
        time.sleep(0.1)
    assert opened_again.status_code == 200
    for connection in (first, second):
        expired = post(server.url, rpc(2, "session/list"), **{"Acp-Connection-Id": connection})
        assert expired.status_code == 410 and "expired" in expired.json()["error"]


def test_an_idle_event_stream_gets_keepalive_comments_and_then_its_events(start):
    server = start(keepalive_s=0.3)
    connection = open_connection(server.url)
    with event_stream(server, connection) as stream:
        lines = stream.iter_lines()
        comments = 0
        while comments < 3:
            line = next(lines)
            assert not line.startswith("data:"), line
            comments += line == ": keepalive"
        listed = post(server.url, rpc(2, "session/list"), **{"Acp-Connection-Id": connection})
        assert listed.status_code == 202
        answer = next(line for line in lines if line.startswith("data:"))
        assert json.loads(answer[5:])["id"] == 2


WS_INIT = json.dumps({**INIT, "id": "init"})


async def test_a_websocket_past_the_connection_limit_is_told_503(start):
    server = start(max_connections=1)
    async with asyncio.timeout(20), connect(server.ws_url, max_size=None) as first:
        await first.send(WS_INIT)
        assert json.loads(await first.recv())["id"] == "init"
        with pytest.raises(InvalidStatus) as refused:
            await connect(server.ws_url, max_size=None)
    assert refused.value.response.status_code == 503
    assert b"too many connections" in refused.value.response.body


async def test_a_websocket_that_never_initializes_is_closed_after_init_timeout(start):
    """[server] init_timeout_s: a socket that says nothing goes (1008, with why); one
    that initialized stays."""
    server = start(init_timeout_s=0.5)
    async with (
        asyncio.timeout(20),
        connect(server.ws_url, max_size=None) as silent,
        connect(server.ws_url, max_size=None) as talking,
    ):
        await talking.send(WS_INIT)
        assert json.loads(await talking.recv())["id"] == "init"
        with pytest.raises(ConnectionClosed) as closed:
            await silent.recv()
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
        assert "no initialize within 0.5 s" in closed.value.rcvd.reason
        await asyncio.sleep(1.0)  # past the timeout: the initialized one lives on
        await talking.send(json.dumps(rpc("list", "session/list")))
        assert json.loads(await talking.recv())["id"] == "list"


async def test_silent_websockets_do_not_lock_other_clients_out(start):
    """Connections waiting to initialize have a budget of their own, and the oldest
    silent one makes room: 256 silent sockets held every client out with 503."""
    server = start(max_connections=2, max_pending_connections=2, init_timeout_s=60)
    async with contextlib.AsyncExitStack() as sockets, asyncio.timeout(30):
        for _ in range(6):
            await sockets.enter_async_context(connect(server.ws_url, max_size=None))
        for url in (server.ws_url, server.url):
            client = await client_for(url)
            assert await client.list_sessions() is not None
            await client.aclose()


def test_a_connection_with_an_open_stream_does_not_expire(start):
    server = start(idle_timeout_s=1.5)
    connection = open_connection(server.url)
    with event_stream(server, connection) as stream:
        time.sleep(4.0)  # over two idle timeouts, with the stream open
        listed = post(server.url, rpc(2, "session/list"), **{"Acp-Connection-Id": connection})
        assert listed.status_code == 202
        for line in stream.iter_lines():
            if line.startswith("data:"):
                assert json.loads(line[5:])["id"] == 2
                break


def test_a_failed_initialize_holds_no_slot(start):
    server = start(max_connections=2)
    wrong = rpc(1, "initialize", protocolVersion=0, info={"name": "t", "version": "1"})
    for _ in range(5):
        failed = post(server.url, wrong)
        assert failed.status_code == 200 and failed.json()["error"]["code"] == -32022
        assert "acp-connection-id" not in failed.headers
    open_connection(server.url)
    open_connection(server.url)


# ---- 5. a watcher that stops reading is dropped, never stalls the turn --------------
BIG_TURN = Text(text="x" * 1_000_000, chunks=50)
SMALL_BUFFERS = {"max_buffered_bytes": 262_144, "max_output_stall_s": 0.3}


def small_socket(server: LimitedServer) -> socket.socket:
    """A client socket with a small receive window, so a stalled reader backs up fast."""
    raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    raw.connect((server.host, server.port))
    return raw


async def run_turns(client: ClientSide, session: Any, count: int) -> None:
    for _ in range(count):
        turn = await session.run("go")
        assert turn.stop_reason == "end_turn"


async def new_shared_session(server: LimitedServer) -> tuple[ClientSide, Any]:
    driver = await client_for(server.url)
    return driver, await driver.new_session("/tmp")


async def test_a_stalled_websocket_watcher_is_dropped_with_a_close_reason_and_can_resume(
    start, scripted_model
):
    server = start(**SMALL_BUFFERS)
    scripted_model.set_default(BIG_TURN)
    async with asyncio.timeout(120):
        driver, session = await new_shared_session(server)
        raw = small_socket(server)
        ws = await connect(server.ws_url, sock=raw, max_queue=1, max_size=None, compression=None)
        await ws.send(json.dumps(INIT))
        await ws.recv()
        await ws.send(json.dumps(rpc(2, "session/resume", sessionId=session.id, cwd="/tmp")))
        # The watcher stops reading here; the turns must go on for the driver.
        await run_turns(driver, session, 12)
        last_seq = 0
        with pytest.raises(ConnectionClosed) as closed:
            while True:
                message = json.loads(await ws.recv())
                meta = (message.get("params") or {}).get("_meta") or {}
                last_seq = meta.get("crow/seq", last_seq)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
        assert "fell behind" in closed.value.rcvd.reason
        # It comes back and resumes from its cursor: the rest arrives, up to the last idle.
        back = await client_for(server.ws_url)
        seen: list[dict[str, Any]] = []
        back.on_update(lambda sid, update: seen.append(update.to_wire()))
        await back.call(
            "session/resume",
            schema.ResumeSessionRequest.model_validate(
                {
                    "sessionId": session.id,
                    "cwd": "/tmp",
                    "replayFrom": {"type": "_crow/after", "seq": last_seq},
                }
            ),
        )
        idles = [u for u in seen if u.get("sessionUpdate") == "state_update"]
        assert idles[-1]["state"] == "idle"
        await back.aclose()
        await driver.aclose()


async def test_a_stalled_sse_watcher_is_dropped_and_its_connection_says_why(start, scripted_model):
    server = start(**SMALL_BUFFERS)
    scripted_model.set_default(BIG_TURN)
    async with asyncio.timeout(120):
        driver, session = await new_shared_session(server)
        connection = await asyncio.to_thread(open_connection, server.url)
        raw = small_socket(server)
        raw.sendall(
            b"GET /acp HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n"
            b"Acp-Connection-Id: " + connection.encode() + b"\r\n"
            b"Acp-Session-Id: " + session.id.encode() + b"\r\n\r\n"
        )
        headers = {"Acp-Connection-Id": connection, "Acp-Session-Id": session.id}
        resume = rpc(2, "session/resume", sessionId=session.id, cwd="/tmp")
        assert (await asyncio.to_thread(post, server.url, resume, **headers)).status_code == 202
        # The SSE reader never reads; the driver's turns must not wait for it.
        await run_turns(driver, session, 12)
        gone = await asyncio.to_thread(post, server.url, rpc(3, "session/list"), **headers)
        assert gone.status_code == 410 and "fell behind" in gone.json()["error"]
        raw.close()
        await driver.aclose()
