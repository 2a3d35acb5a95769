"""Several clients on one session of ``crow serve --http``: who may end what.

The rules (README, "Several clients"): a client that disconnects only stops
watching; ``session/close`` detaches its caller and ends the turn only when
the last watcher leaves; a session nobody watches is unloaded once idle, its
tool servers with it; an open permission question waits for a client to
answer it, including one that attaches later.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from typing import Any

import websockets
from crow_testing.fakemodel import Text, ToolCalls
from crow_testing.serve_support import HttpServer, client_for, write_config
from crow_testing.web_support import seed_session
from test_serve_http import server  # noqa: F401  (the fixture)

from crow.acp import schema
from crow.runtime.quiet import QUIET_S


def probe_pids(server_pid: int) -> set[int]:
    """The MCP probe servers the Crow server runs (its children running mcp_probe.py)."""
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                parent = int(f.read().rsplit(b")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                command = f.read()
        except (OSError, ValueError, IndexError):
            continue
        if parent == server_pid and b"mcp_probe.py" in command:
            found.add(int(entry))
    return found


async def eventually(check: Any, what: str, within_s: float = 15.0) -> None:
    deadline = time.monotonic() + within_s
    while not check():
        assert time.monotonic() < deadline, f"never: {what}"
        await asyncio.sleep(0.1)


async def test_close_by_one_watcher_does_not_cancel_anothers_turn(server, scripted_model):  # noqa: F811
    scripted_model.script(Text(text="a b c d e", chunks=5, delay_s=0.2))
    owner = await client_for(server.url)
    onlooker = await client_for(server.ws_url)
    async with asyncio.timeout(30):
        session = await owner.new_session("/tmp")
        turn = await session.prompt("go")
        watching = await onlooker.resume_session(session.id, "/tmp")
        await watching.close()
        await session.wait(turn)
    assert turn.stop_reason == "end_turn"
    assert session.projection.text() == "a b c d e"
    await owner.aclose()
    await onlooker.aclose()


async def test_the_last_watcher_to_close_ends_the_turn(server, scripted_model):  # noqa: F811
    scripted_model.script(Text(text="a b c d e f g h", chunks=8, delay_s=0.3))
    client = await client_for(server.url)
    async with asyncio.timeout(30):
        session = await client.new_session("/tmp")
        turn = await session.prompt("go")
        while "a" not in session.projection.text():
            await client.next_update(session.id)
        await session.close()
    assert turn.stop_reason == "cancelled"
    await client.aclose()


async def test_a_question_whose_client_vanished_is_put_to_the_next_client(
    server,  # noqa: F811
    scripted_model,
):
    scripted_model.script(
        ToolCalls(calls=[("probe__touch", {"path": "later.txt"})]), Text(text="written")
    )
    asked = asyncio.Event()

    async def walk_away(request: Any) -> Any:
        asked.set()
        await asyncio.Event().wait()  # never answers: its client is about to vanish

    async def approve(request: Any) -> Any:
        return schema.RequestPermissionResponse(
            outcome=schema.SelectedPermissionOutcome(option_id="allow_once")
        )

    first = await client_for(server.url, on_permission=walk_away)
    async with asyncio.timeout(30):
        session = await first.new_session("/tmp")
        await session.prompt("write it")
        await asked.wait()
        await first.aclose()
        second = await client_for(server.ws_url, on_permission=approve)
        resumed = await second.resume_session(session.id, "/tmp", replay=True)
        assert resumed.projection.state == "requires_action"
        while resumed.projection.state != "idle" or not resumed.projection.stop_reason:
            await second.next_update(session.id)
    assert resumed.projection.stop_reason == "end_turn"
    assert [c.status for c in resumed.projection.tool_calls.values()] == ["completed"]
    await second.aclose()


async def test_a_session_nobody_watches_is_unloaded_with_its_tool_servers(
    server,  # noqa: F811
    scripted_model,
):
    scripted_model.set_default(Text(text="ok"))
    pid = server.process.pid
    client = await client_for(server.url)
    async with asyncio.timeout(60):
        session = await client.new_session("/tmp")
        await session.run("start the tools")
        assert len(probe_pids(pid)) == 1
        await client.aclose()
        await eventually(lambda: not probe_pids(pid), "the probe server stopped")
        again = await client_for(server.ws_url)
        resumed = await again.resume_session(session.id, "/tmp")
        turn = await resumed.run("back again")
        assert turn.stop_reason == "end_turn"
        assert len(probe_pids(pid)) == 1
        await again.aclose()
        await eventually(lambda: not probe_pids(pid), "the probe server stopped again")


async def test_the_server_gives_memory_back_once_its_last_session_unloads(
    server,  # noqa: F811
    scripted_model,
    crow_home,
):
    """Not while any session is live (the collection blocks the loop): only once
    the last one has gone, after a quiet moment (crow.runtime.quiet)."""
    scripted_model.set_default(Text(text="ok"))
    log = crow_home / "logs" / "crow.log"

    def releases() -> int:
        return log.read_text().count("gave memory back")

    staying = await client_for(server.url)
    leaving = await client_for(server.ws_url)
    async with asyncio.timeout(60):
        kept = await staying.new_session("/tmp")
        await kept.run("stay")
        gone = await leaving.new_session("/tmp")
        await gone.run("leave")
        await leaving.aclose()  # its session unloads; the other is still live
        await asyncio.sleep(QUIET_S + 1.0)
        assert releases() == 0
        await staying.aclose()
        await eventually(lambda: releases() == 1, "the memory was given back", QUIET_S + 10)
        assert re.search(
            r"gave memory back: \d+ objects collected, RSS [\d.]+ -> [\d.]+ MiB", log.read_text()
        )


async def test_another_clients_resume_keeps_the_running_tool_servers(
    server,  # noqa: F811
    scripted_model,
):
    scripted_model.set_default(Text(text="ok"))
    pid = server.process.pid
    first = await client_for(server.url)
    second = await client_for(server.ws_url)
    async with asyncio.timeout(60):
        session = await first.new_session("/tmp")
        await session.run("start the tools")
        before = probe_pids(pid)
        await second.resume_session(session.id, "/tmp")
        await session.run("still the same tools?")
        assert probe_pids(pid) == before  # not restarted: their background work goes on
    await first.aclose()
    await second.aclose()


async def test_a_held_prompt_whose_client_vanished_is_dropped_never_inserted(
    server,  # noqa: F811
    scripted_model,
):
    """A client holds a prompt behind another's turn, then its connection goes: the
    prompt leaves the queue (every watcher sees it go) and is never inserted."""
    from crow.extensions import QUEUE

    scripted_model.script(Text(text="a b c d e f g h", chunks=8, delay_s=0.3))
    owner = await client_for(server.url)
    vanishing = await client_for(server.ws_url)
    queues: list[list[str]] = []

    def on_update(session_id: str, update: Any) -> None:
        if getattr(update, "session_update", None) == QUEUE:
            prompts = (update.model_extra or {}).get("prompts") or getattr(update, "prompts", [])
            queues.append([p["preview"] for p in prompts])

    owner.on_update(on_update)
    async with asyncio.timeout(30):
        session = await owner.new_session("/tmp")
        turn = await session.prompt("go")
        watching = await vanishing.resume_session(session.id, "/tmp")
        held = asyncio.create_task(watching.prompt("never run me"))
        await eventually(lambda: ["never run me"] in queues, "the prompt held")
        await vanishing.aclose()
        await eventually(lambda: queues[-1] == [], "the held prompt dropped")
        await session.wait(turn)
    assert turn.stop_reason == "end_turn"
    await asyncio.sleep(1.0)  # an insertion would ask the model again by now
    assert len(scripted_model.requests) == 1
    held.cancel()
    await owner.aclose()


async def test_a_close_while_another_client_attaches_leaves_it_the_session(
    crow_home, scripted_model, tmp_path
):
    """One client closes the session while another's resume still replays a long log
    (it watches only once the replay is done; here it stalls, as a slow reader's does):
    the session stays loaded for the one attaching, which then prompts."""
    write_config(crow_home, scripted_model.base_url)
    seed_session(crow_home / "crow.db", "sess_long_attach", str(tmp_path), 20_000)
    running = HttpServer()
    first = await client_for(running.url)
    try:
        await first.resume_session("sess_long_attach", str(tmp_path), replay=False)
        async with websockets.connect(running.ws_url, max_size=None) as slow:
            ask = {"protocolVersion": 2, "info": {"name": "slow", "version": "0"}}
            await rpc(slow, 1, "initialize", ask)
            resume = {"sessionId": "sess_long_attach", "cwd": str(tmp_path)}
            resume["replayFrom"] = {"type": "start"}
            await slow.send(
                json.dumps(
                    {"jsonrpc": "2.0", "id": 2, "method": "session/resume", "params": resume}
                )
            )
            await asyncio.sleep(1.0)  # not read: the replay waits for this reader
            await first.close_session("sess_long_attach")  # nobody watches it yet
            assert "result" in await answer_to(slow, 2)
            scripted_model.script(Text(text="still here"))
            prompt = {
                "sessionId": "sess_long_attach",
                "prompt": [{"type": "text", "text": "are you there?"}],
            }
            acknowledged = await rpc(slow, 3, "session/prompt", prompt)
            assert "result" in acknowledged, acknowledged
    finally:
        await first.aclose()
        running.stop()


async def rpc(socket: Any, request_id: int, method: str, params: Any) -> Any:
    await socket.send(
        json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
    )
    return await answer_to(socket, request_id)


async def answer_to(socket: Any, request_id: int) -> Any:
    """The answer to ``request_id``, past the notifications before it."""
    async with asyncio.timeout(60):
        while True:
            message = json.loads(await socket.recv())
            if message.get("id") == request_id and "method" not in message:
                return message
