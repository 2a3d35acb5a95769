"""crow serve with its sessions in PostgreSQL (``CROW_STORE_URL``): the same behaviour
as the SQLite file, and several servers sharing one store."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from crow_testing.fakemodel import Hang, Text
from crow_testing.serve_support import notes, text_of, updates

from crow.acp.errors import REQUEST_CANCELLED


@pytest.fixture
def shared_store(postgres_url, monkeypatch) -> str:
    """Every crow serve the test starts keeps its sessions in PostgreSQL."""
    monkeypatch.setenv("CROW_STORE_URL", postgres_url)
    return postgres_url


def _session_watched_elsewhere(crow, runner):
    """A new session on ``runner``, and another server's client attached to it."""
    sid = runner.new_session()
    other = crow(write=False)
    other.resume(sid)
    return sid, other


def test_two_servers_share_sessions_through_postgres(crow, crow_home, scripted_model, shared_store):
    scripted_model.script(Text(text="kept in postgres"))
    first = crow()
    sid = first.new_session()
    assert text_of(first.run_turn(sid, "hello")) == "kept in postgres"
    second = crow(write=False)
    listed = second.request("session/list", {})[0]["result"]["sessions"]
    assert [s["sessionId"] for s in listed] == [sid]
    response, replayed = second.resume(sid, replayFrom={"type": "start"})
    assert "result" in response, response
    replies = [
        block["text"]
        for update in replayed
        if update["sessionUpdate"] == "agent_message"
        for block in update["content"]
    ]
    assert replies == ["kept in postgres"]
    assert not (crow_home / "crow.db").exists()  # nothing went to the SQLite file


def test_a_server_killed_mid_turn_leaves_a_turn_another_server_closes(
    crow, scripted_model, shared_store
):
    scripted_model.script(Hang())
    first = crow()
    sid = first.new_session()
    first.prompt(sid, "work on it")
    scripted_model.wait_for_requests(1)
    first.proc.send_signal(signal.SIGKILL)
    first.proc.wait(timeout=10)
    scripted_model.script(Text(text="picked up"))
    second = crow(write=False)
    response, replayed = second.resume(sid, replayFrom={"type": "start"})
    assert "result" in response, response
    assert any("interrupted" in note for note in notes(replayed)), replayed
    assert text_of(second.run_turn(sid, "go on")) == "picked up"


def _seqs(messages):
    return [
        m["params"]["_meta"]["crow/seq"]
        for m in messages
        if m.get("method") == "session/update" and "_meta" in m["params"]
    ]


def test_a_turn_on_one_server_is_watched_live_from_another(crow, scripted_model, shared_store):
    scripted_model.script(Text(text="one two three four five six", chunks=6))
    runner = crow()
    sid = runner.new_session()
    watcher = crow(write=False)
    response, before = watcher.resume(sid)  # attached, no replay: live from here on
    assert "result" in response, response
    assert before == [{"sessionUpdate": "state_update", "state": "idle"}]  # the snapshot
    _, before = runner.prompt(sid, "count")
    ran = before + runner.until_update(lambda u: u.get("state") == "idle")
    seen = watcher.until_update(lambda u: u.get("state") == "idle")

    def logged_from_the_prompt(messages):
        """(seq, update) of each logged update (live-only notices have no seq)."""
        found = [
            (m["params"]["_meta"]["crow/seq"], m["params"]["update"])
            for m in messages
            if m.get("method") == "session/update" and "_meta" in m["params"]
        ]
        start = next(i for i, (_, u) in enumerate(found) if u["sessionUpdate"] == "user_message")
        return found[start:]

    # The same logged updates, in the same order, each once: what the running server sent.
    assert logged_from_the_prompt(seen) == logged_from_the_prompt(ran)
    assert _seqs(seen) == sorted(set(_seqs(seen)))
    assert text_of([m["params"]["update"] for m in seen]) == "one two three four five six"
    # A client that missed some resumes on a third server from its cursor.
    cursor = _seqs(seen)[2]
    late = crow(write=False)
    response, replayed = late.request(
        "session/resume",
        {"sessionId": sid, "cwd": "/tmp", "replayFrom": {"type": "_crow/after", "seq": cursor}},
    )
    assert "result" in response, response
    assert _seqs(replayed)[0] == cursor + 1


def test_a_turn_after_another_servers_sees_what_it_added(crow, scripted_model, shared_store):
    """A server answers its model calls from what it wrote itself (crow.store.tails),
    but a turn another server ran since is read: here by a /compact, whose summary
    request is the first thing its turn reads (no write of its own comes before)."""
    scripted_model.script(Text(text="reply one"), Text(text="reply two"), Text(text="summary"))
    first = crow()
    sid = first.new_session()
    assert text_of(first.run_turn(sid, "prompt one")) == "reply one"
    second = crow(write=False)
    assert "result" in second.resume(sid)[0]
    assert text_of(second.run_turn(sid, "prompt two")) == "reply two"
    first.until_update(lambda u: u.get("state") == "idle")  # heard the other's turn end
    first.run_turn(sid, "/compact")
    summarised = str(scripted_model.requests[-1]["messages"])
    for said in ("prompt one", "reply one", "prompt two", "reply two"):
        assert said in summarised


def test_a_cancel_sent_to_another_server_stops_the_turn(crow, scripted_model, shared_store):
    scripted_model.script(Hang())
    runner = crow(timeout_s=120.0)  # the turn runs until cancelled, however slow the machine
    sid, other = _session_watched_elsewhere(crow, runner)
    runner.prompt(sid, "wait for me")
    scripted_model.wait_for_requests(1)
    other.until_update(lambda u: u.get("state") == "running")
    # One turn at a time, whichever server: another server's prompt is held...
    held = {"sessionId": sid, "prompt": [{"type": "text", "text": "me too"}]}
    other.send({"jsonrpc": "2.0", "id": 77, "method": "session/prompt", "params": held})
    other.until_update(lambda u: [p["preview"] for p in u.get("prompts", [])] == ["me too"])
    other.send({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}})
    # ... and the cancel answers it -32800 while the turn where it runs is cancelled.
    answer, before = other.until_response(77)  # (the idle may come first)
    assert answer["error"]["code"] == REQUEST_CANCELLED
    if not [u for u in updates(before) if u.get("state") == "idle"]:
        before += other.until_update(lambda u: u.get("state") == "idle")
    [idle] = [u for u in updates(before) if u.get("state") == "idle"]
    assert idle["stopReason"] == "cancelled"
    ran = runner.until_update(lambda u: u.get("state") == "idle")[-1]["params"]["update"]
    assert ran["stopReason"] == "cancelled"


async def test_sigterm_lets_the_turn_finish_while_its_client_moves_to_another_server(
    crow_home, scripted_model, postgres_url
):
    """SIGTERM of the server running a turn: its connections close, the turn runs on;
    the client resumes on another server from its cursor and misses nothing."""
    import asyncio

    from crow_testing.fakemodel import Slow
    from crow_testing.serve_support import HttpServer, client_for, write_config

    write_config(crow_home, scripted_model.base_url, extra="[tools]\nbuiltin = []\n")
    words = "one two three four five six seven eight nine ten"
    # 5 s: longer than uvicorn's own grace for open connections (3 s)
    scripted_model.script(Slow(words, chunks=10, delay_s=0.5))
    env = {"CROW_STORE_URL": postgres_url}
    first, second = HttpServer(env=env), HttpServer(env=env)
    clients = []  # closed at the end: a client left open is GC'd in a later test
    try:
        client = await client_for(first.url)
        clients.append(client)
        session = await client.new_session("/tmp")
        await session.prompt("count to eight")
        while "two" not in session.projection.text():
            await client.next_update(session.id)
        cursor = client.seqs[session.id]
        first.process.terminate()  # SIGTERM, mid-turn
        with contextlib.suppress(Exception):
            while True:  # the connection closes under us
                await asyncio.wait_for(client.next_update(session.id), 10)
        elsewhere = await client_for(second.url)
        clients.append(elsewhere)
        seqs: list[int] = []  # every crow/seq received, as it came
        deliver = elsewhere.peer._on_notification

        async def recording(method, params):
            seq = ((params or {}).get("_meta") or {}).get("crow/seq")
            if seq is not None:
                seqs.append(seq)
            await deliver(method, params)

        elsewhere.peer._on_notification = recording
        moved = await elsewhere.resume_session(session.id, "/tmp", replay_after=cursor)
        while not (moved.projection.state == "idle" and moved.projection.stop_reason):
            await asyncio.wait_for(elsewhere.next_update(session.id), 20)
        assert moved.projection.stop_reason == "end_turn"  # finished, not cancelled
        assert seqs == list(range(cursor + 1, cursor + 1 + len(seqs)))  # no gap, each once
        assert first.process.wait(timeout=20) is not None
        full = await elsewhere.resume_session(session.id, "/tmp", replay_after=0)
        assert full.projection.text() == words
    finally:
        for opened in clients:
            with contextlib.suppress(Exception):
                await opened.aclose()
        first.stop()
        second.stop()


def test_a_permission_asked_on_one_server_is_answered_on_another(
    crow, crow_home, scripted_model, shared_store
):
    from crow_testing.fakemodel import ToolCalls
    from test_serve_tools import probe_config

    scripted_model.script(
        ToolCalls(calls=[("probe__touch", {"path": "x.txt"})]), Text(text="touched")
    )
    runner = crow(extra=probe_config(extra='[permissions]\nedit = "ask"\n'))
    sid, other = _session_watched_elsewhere(crow, runner)
    runner.prompt(sid, "touch it")
    asked_here = runner.recv()
    while asked_here.get("method") != "session/request_permission":
        asked_here = runner.recv()  # the runner's client sees it, and does not answer
    asked_there = other.recv()
    while asked_there.get("method") != "session/request_permission":
        asked_there = other.recv()
    assert asked_there["params"] == asked_here["params"], (asked_there, asked_here)
    allow = next(o for o in asked_there["params"]["options"] if o["kind"] == "allow_once")
    outcome = {"outcome": {"outcome": "selected", "optionId": allow["optionId"]}}
    other.send({"jsonrpc": "2.0", "id": asked_there["id"], "result": outcome})
    seen = runner.until_update(lambda u: u.get("state") == "idle")
    withdrawn = [m for m in seen if m.get("method") == "$/cancel_request"]
    assert [m["params"]["requestId"] for m in withdrawn] == [asked_here["id"]]
    updates = [m["params"]["update"] for m in seen if m.get("method") == "session/update"]
    assert updates[-1]["stopReason"] == "end_turn"
    finals = [u.get("status") for u in updates if u["sessionUpdate"] == "tool_call_update"]
    assert "completed" in finals
    assert text_of(updates) == "touched"


def test_a_dead_servers_turn_ends_for_clients_watching_elsewhere(
    crow, scripted_model, shared_store
):
    scripted_model.script(Hang())
    runner = crow()
    sid, watcher = _session_watched_elsewhere(crow, runner)
    runner.prompt(sid, "work")
    watcher.until_update(lambda u: u.get("state") == "running")
    runner.proc.send_signal(signal.SIGKILL)
    runner.proc.wait(timeout=10)
    # Nobody resumes or prompts: the survivor closes the turn on its own (a sweep).
    seen = watcher.until_update(lambda u: u.get("state") == "idle")
    updates = [m["params"]["update"] for m in seen if m.get("method") == "session/update"]
    assert updates[-1]["stopReason"] == "error"
    assert any("interrupted" in note for note in notes(updates))


# ---- the database goes away and comes back ------------------------------------------
class PrivateServer:
    """A PostgreSQL cluster of this test's own (initdb in a temporary folder), so that
    restarting it disturbs no other test: loopback only, trust auth, fsync off."""

    def __init__(self, root: Path) -> None:
        bins = sorted(Path("/usr/lib/postgresql").glob("*/bin"))
        if not bins:
            if os.environ.get("CROW_REQUIRE_PG") == "1":
                pytest.fail("CROW_REQUIRE_PG=1 but no PostgreSQL server binaries")
            pytest.skip("no PostgreSQL server binaries (bash .ci/run installs them)")
        self.bin, self.root = bins[-1], root
        if os.geteuid() == 0:  # root may not run the server: the package's postgres user does
            shutil.chown(root, "postgres")
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self._run("initdb", "-D", str(root / "data"), "-A", "trust", "-U", "crow", "--no-sync")
        self.start()
        self.url = f"postgresql://crow@127.0.0.1:{self.port}/postgres"

    def _run(self, tool: str, *args: str) -> None:
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        subprocess.run(
            [*prefix, str(self.bin / tool), *args],
            check=True,
            capture_output=True,
            timeout=60,
        )

    def start(self) -> None:
        options = f"-k {self.root} -p {self.port} -c listen_addresses=127.0.0.1 -c fsync=off"
        log = str(self.root / "log")
        self._run("pg_ctl", "-D", str(self.root / "data"), "-l", log, "-w", "-o", options, "start")

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.root / "data"), "-m", "fast", "-w", "stop")

    def restart(self) -> None:
        self.stop()
        self.start()


@pytest.fixture
def private_server(crow_home, monkeypatch) -> Iterator[PrivateServer]:
    # Under /tmp, not pytest's folder: the postgres user must reach it.
    root = Path(tempfile.mkdtemp(prefix="crow-test-pg."))
    try:
        server = PrivateServer(root)
        monkeypatch.setenv("CROW_STORE_URL", server.url)
        yield server
        with contextlib.suppress(subprocess.CalledProcessError):
            server.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_a_server_restart_mid_run_is_picked_up_and_its_watchers_hear_again(
    crow, scripted_model, private_server
):
    """Every connection of both servers is cut (the store's and the LISTEN one): the
    next turn runs, is logged whole, and the other server's client watches it live."""
    scripted_model.script(Text(text="before"), Text(text="after the restart", chunks=3))
    runner = crow()
    sid = runner.new_session()
    watcher = crow(write=False)
    assert "result" in watcher.resume(sid)[0]
    assert text_of(runner.run_turn(sid, "one")) == "before"
    watcher.until_update(lambda u: u.get("state") == "idle")
    private_server.restart()
    assert text_of(runner.run_turn(sid, "two")) == "after the restart"
    seen = watcher.until_update(lambda u: u.get("state") == "idle")
    assert text_of([m["params"]["update"] for m in seen]) == "after the restart"
    # Nothing lost or doubled in the log: a third server replays both turns once.
    late = crow(write=False)
    _, replayed = late.resume(sid, replayFrom={"type": "start"})
    replies = [
        block["text"]
        for update in replayed
        if update["sessionUpdate"] == "agent_message"
        for block in update["content"]
    ]
    assert replies == ["before", "after the restart"]


def test_a_turn_running_as_the_database_goes_ends_with_a_clear_error(
    crow, scripted_model, private_server
):
    """The database stops mid-turn: the turn ends in error saying so (the client is
    not left waiting), and once the database is back the session works again."""
    scripted_model.script(Text(text="slow " * 40, chunks=40, delay_s=0.05))
    runner = crow()
    sid = runner.new_session()
    runner.prompt(sid, "go")
    scripted_model.wait_for_requests(1)
    private_server.stop()
    idle = runner.until_update(lambda u: u.get("state") == "idle")[-1]["params"]["update"]
    assert idle["stopReason"] == "error"
    assert "session store" in idle["error"]["message"]
    private_server.start()
    scripted_model.script(Text(text="back"))
    assert text_of(runner.run_turn(sid, "again")) == "back"
