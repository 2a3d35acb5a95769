"""What crow serve --http gives the web app (issue #35), over real connections.

The app's URL (the token in its fragment), a WebSocket from the server's own origin,
the memory panel's requests (``_crow/memory/*``: a session's own scopes only), who
prompted (``_meta["crow/client"]``) and the list's state.  The page itself is tested in
a browser (tests/web).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
import websockets
from crow_testing.fakemodel import Text
from crow_testing.serve_support import HttpServer, client_for, write_config

from crow.acp import AcpError
from crow.extensions import CLIENT, MEMORY_FORGET, MEMORY_REMEMBER, MEMORY_SEARCH, STATE


@pytest.fixture
def server(crow_home, scripted_model) -> Iterator[HttpServer]:
    memory = f'[memory]\nembedder = "openai"\nurl = "{scripted_model.base_url}"\n'
    write_config(crow_home, scripted_model.base_url, extra=memory)
    running = HttpServer()
    yield running
    running.stop()


def origin_of(server: HttpServer) -> str:
    return server.bare_url.removesuffix("/acp")


def test_crow_serve_prints_the_apps_url_with_the_token_in_its_fragment(server):
    assert server.process.stderr is not None
    line = server.process.stderr.readline()
    found = re.fullmatch(r"crow: web app at (http://\S+)/#token=(\S+)\n", line)
    assert found, line
    assert found.group(1) == origin_of(server)
    assert found.group(2) == server.token
    # The fragment is the browser's: what it asks for is the page, with no token.
    page = httpx2.get(found.group(1) + "/", timeout=10)
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    assert "content-security-policy" in page.headers


async def test_a_page_of_this_server_opens_acp_over_a_websocket(server):
    url = f"{server.ws_url}"
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize"}
    initialize["params"] = {"protocolVersion": 2, "info": {"name": "crow-web", "version": "0"}}
    async with websockets.connect(url, origin=origin_of(server)) as socket:
        await socket.send(json.dumps(initialize))
        answer = json.loads(await asyncio.wait_for(socket.recv(), 10))
    assert answer["id"] == 1 and answer.get("result", {}).get("protocolVersion") == 2, answer
    # Another site's page is refused, token or not.
    with pytest.raises(websockets.InvalidStatus) as refused:
        async with websockets.connect(url, origin="http://evil.example"):
            pass
    assert refused.value.response.status_code == 403


async def test_the_memory_panel_keeps_to_the_sessions_own_scopes(server, tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "theirs").mkdir()
    client = await client_for(server.url)
    other = await client_for(server.url)
    try:
        mine = (await client.new_session(str(tmp_path / "mine"))).id
        theirs = (await other.new_session(str(tmp_path / "theirs"))).id

        def ask(side: Any, method: str, **params: Any) -> Any:
            return side.peer.request(method, params)

        kept = await ask(client, MEMORY_REMEMBER, sessionId=mine, text="deploys go out on Fridays")
        assert kept["scope"] == f"project:{tmp_path / 'mine'}" and kept["replaced"] is None
        just_here = await ask(
            client, MEMORY_REMEMBER, sessionId=mine, text="this session tests", scope="session"
        )
        assert just_here["scope"] == f"session:{mine}"
        elsewhere = await ask(other, MEMORY_REMEMBER, sessionId=theirs, text="the other secret")

        found = await ask(client, MEMORY_SEARCH, sessionId=mine, query="when do deploys go out")
        assert found["memories"][0]["id"] == kept["id"]
        listed = await ask(client, MEMORY_SEARCH, sessionId=mine)
        assert {m["id"] for m in listed["memories"]} == {kept["id"], just_here["id"]}
        assert set(listed["memories"][0]) == {"id", "text", "scope", "tags", "created", "updated"}

        # Another project's memory is out of reach: not forgotten, still there.
        with pytest.raises(AcpError) as beyond:
            await ask(client, MEMORY_FORGET, sessionId=mine, id=elsewhere["id"])
        assert beyond.value.code == -32602 and "beyond" in beyond.value.message
        theirs_now = await ask(other, MEMORY_SEARCH, sessionId=theirs)
        assert [m["id"] for m in theirs_now["memories"]] == [elsewhere["id"]]
        # A session this connection has not open is not its to search.
        with pytest.raises(AcpError) as not_open:
            await ask(client, MEMORY_SEARCH, sessionId=theirs, query="secret")
        assert not_open.value.code == -32002
        for bad in ({"scope": "all"}, {"scope": f"project:{tmp_path / 'theirs'}"}, {"limit": 0}):
            with pytest.raises(AcpError) as refused:
                await ask(client, MEMORY_SEARCH, sessionId=mine, query="x", **bad)
            assert refused.value.code == -32602, bad

        gone = await ask(client, MEMORY_FORGET, sessionId=mine, id=kept["id"])
        assert gone == {"forgotten": True}
        again = await ask(client, MEMORY_FORGET, sessionId=mine, id=kept["id"])
        assert again == {"forgotten": False}
    finally:
        await client.aclose()
        await other.aclose()


async def test_the_list_says_each_sessions_state_and_prompts_say_who_sent_them(
    server, scripted_model, tmp_path
):
    scripted_model.script(Text(text="hello"))
    client = await client_for(server.url)
    try:
        session = await client.new_session(str(tmp_path))
        seen: list[dict[str, Any]] = []
        client.on_update(lambda sid, update: seen.append(update.to_wire()))
        await session.wait(await session.prompt("hi"))
        listed = await client.list_sessions(cwd=str(tmp_path))
    finally:
        await client.aclose()
    users = [u for u in seen if u["sessionUpdate"] == "user_message"]
    assert users and users[0]["_meta"][CLIENT] == "http-test"
    [entry] = listed.sessions
    assert entry.meta[STATE] == "idle"
    assert entry.meta["crow/stopReason"] == "end_turn"
