"""The built-in servers one process's sessions share (crow.servers.shared) keep them apart.

Two sessions with different working directories get their built-ins the way a first
turn does (``crow.agent.tooling.builtin_servers`` and a ``ToolHub`` each), so each kind
is one server object for both; every call goes through the hub, as the model's would.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from crow.agent.tooling import builtin_servers
from crow.config import load_config
from crow.extensions import PID
from crow.servers.shared import Scoped, open_connections
from crow.tools.hub import ToolHub, ToolResult

LIMIT_S = 20


@dataclass
class Session:
    id: str
    cwd: Path
    hub: ToolHub
    events: list[str]

    async def call(self, qualified: str, **arguments: object) -> ToolResult:
        tool = self.hub.find(qualified)
        assert tool is not None, qualified
        async with asyncio.timeout(LIMIT_S):
            return await self.hub.call(tool, dict(arguments))


async def open_session(sid: str, cwd: Path) -> Session:
    config = load_config()
    events: list[str] = []

    async def on_event(message: str, severity: str) -> None:
        events.append(message)

    hub = ToolHub(on_event=on_event)
    await hub.start(builtin_servers(config, str(cwd), [], sid), [], builtin_timeout_s=LIMIT_S)
    assert not events, events
    return Session(sid, cwd, hub, events)


@pytest.fixture
async def two(tmp_path: Path, crow_home: Path) -> AsyncIterator[tuple[Session, Session]]:
    # Text-only memory: no embedder to load; scopes are what is tested.
    (crow_home / "config.toml").write_text('[memory]\nembedder = "none"\n')
    a_dir, b_dir = tmp_path / "a", tmp_path / "b"
    for folder in (a_dir, b_dir):
        folder.mkdir()
        (folder / ".git").mkdir()  # each its own project (memory's project scope)
    (a_dir / "only-a.txt").write_text("secret of a\n")
    (b_dir / "only-b.txt").write_text("secret of b\n")
    a = await open_session("sess-a", a_dir)
    b = await open_session("sess-b", b_dir)
    try:
        yield a, b
    finally:
        await a.hub.aclose()
        await b.hub.aclose()


def target(session: Session, name: str) -> Scoped:
    scoped = session.hub.servers[name].target
    assert isinstance(scoped, Scoped)
    return scoped


async def test_each_kind_is_one_server_object_for_both_sessions(two):
    a, b = two
    for name in ("fs", "terminal", "web", "memory"):
        assert target(a, name).server is target(b, name).server, name
    assert target(a, "fs").scope != target(b, "fs").scope


async def test_fs_reaches_each_sessions_own_roots_only(two):
    a, b = two
    listed_a = (await a.call("fs__list")).text
    listed_b = (await b.call("fs__list")).text
    assert "only-a.txt" in listed_a and "only-b.txt" not in listed_a
    assert "only-b.txt" in listed_b and "only-a.txt" not in listed_b

    for session, other in ((a, b), (b, a)):
        mine = "only-a.txt" if session is a else "only-b.txt"
        theirs = other.cwd / ("only-a.txt" if other is a else "only-b.txt")
        assert "secret" in (await session.call("fs__read", path=mine)).text
        for result in (
            await session.call("fs__read", path=str(theirs)),
            await session.call("fs__read", path=f"../{other.cwd.name}/{theirs.name}"),
            await session.call("fs__write", path=str(other.cwd / "planted.txt"), content="x"),
            await session.call("fs__list", path=str(other.cwd)),
            await session.call("fs__grep", pattern="secret", path=str(other.cwd)),
        ):
            assert result.is_error, result.text
            assert "outside the allowed roots" in result.text
        assert not (other.cwd / "planted.txt").exists()

    written = await a.call("fs__write", path="new.txt", content="made by a\n")
    assert not written.is_error, written.text
    assert (a.cwd / "new.txt").read_text() == "made by a\n"
    assert not (b.cwd / "new.txt").exists()


async def test_a_call_cannot_name_its_scope(two):
    """What a connection reaches is not an argument: extra arguments and a ``_meta``
    naming roots or a cwd change nothing."""
    a, b = two
    tool = a.hub.find("fs__read")
    assert tool is not None
    forged = {"path": str(b.cwd / "only-b.txt"), "roots": [str(b.cwd)], "cwd": str(b.cwd)}
    meta = {"roots": [str(b.cwd)], "cwd": str(b.cwd), "scope": str(b.cwd)}
    result = await a.hub.call(tool, forged, meta=meta)
    assert result.is_error
    assert "secret of b" not in result.text
    ran = await a.call("terminal__run", command="pwd", cwd=None)
    assert ran.text.splitlines()[0] == str(a.cwd.resolve())


async def test_terminal_runs_in_each_cwd_and_keeps_its_jobs_to_itself(two):
    a, b = two
    assert (await a.call("terminal__run", command="pwd")).text.splitlines()[0] == str(
        a.cwd.resolve()
    )
    assert (await b.call("terminal__run", command="pwd")).text.splitlines()[0] == str(
        b.cwd.resolve()
    )

    started = await a.call("terminal__start", command="sleep 60")
    assert not started.is_error, started.text
    pid = started.meta[PID]
    assert "bg_1" in started.text

    assert (await b.call("terminal__list_processes")).text == "No background processes."
    for tool in ("terminal__output", "terminal__stop"):
        refused = await b.call(tool, id="bg_1")
        assert refused.is_error
        assert "no background process with id 'bg_1'" in refused.text
    assert alive(pid)
    listed = (await a.call("terminal__list_processes")).text
    assert "bg_1" in listed and "running" in listed


async def test_closing_one_session_stops_its_jobs_only(two):
    a, b = two
    pid_a = (await a.call("terminal__start", command="sleep 60")).meta[PID]
    pid_b = (await b.call("terminal__start", command="sleep 60")).meta[PID]

    await a.hub.aclose()
    await wait_gone(pid_a)
    assert alive(pid_b)

    listed = (await b.call("fs__list")).text
    assert "only-b.txt" in listed
    assert (await b.call("terminal__run", command="echo still here")).text.startswith("still here")
    assert "bg_1" in (await b.call("terminal__list_processes")).text
    assert not b.events, b.events


async def test_memory_writes_land_in_each_sessions_scope(two):
    a, b = two
    for session in (a, b):
        for scope in ("project", "session"):
            done = await session.call(
                "memory__remember", text=f"{session.id} {scope} fact", scope=scope
            )
            assert not done.is_error, done.text
    listed_a = (await a.call("memory__list_memories")).text
    listed_b = (await b.call("memory__list_memories")).text
    assert "sess-a project fact" in listed_a and "sess-a session fact" in listed_a
    assert "sess-b" not in listed_a
    assert "sess-b project fact" in listed_b and "sess-b session fact" in listed_b
    assert "sess-a" not in listed_b
    assert f"project:{a.cwd.resolve()}" in listed_a
    assert "session:sess-a" in listed_a

    # Naming the other's scope outright is refused (it is beyond this place).
    beyond = await a.call("memory__list_memories", scope=f"project:{b.cwd.resolve()}")
    assert beyond.is_error, beyond.text


async def test_a_session_connects_to_a_listed_server_at_its_first_call_only(two, tmp_path):
    """The tools of a shared server are listed once per process: a later session has
    them at once, and its own connection opens when it first calls one (once, however
    many calls race to open it), and closes with the session."""
    a, _ = two
    c_dir = tmp_path / "c"
    c_dir.mkdir()
    (c_dir / "only-c.txt").write_text("c\n")
    before = {kind: open_connections(kind) for kind in ("fs", "terminal", "memory")}
    c = await open_session("sess-c", c_dir)
    try:
        assert [t.qualified for t in c.hub.tools()] == [t.qualified for t in a.hub.tools()]
        assert {k: open_connections(k) for k in before} == before
        lists = await asyncio.gather(*(c.call("fs__list") for _ in range(3)))
        assert all("only-c.txt" in r.text and not r.is_error for r in lists)
        assert open_connections("fs") == before["fs"] + 1
        assert open_connections("terminal") == before["terminal"]
        assert (await c.call("terminal__run", command="pwd")).text.startswith(str(c_dir))
        assert open_connections("terminal") == before["terminal"] + 1
    finally:
        await c.hub.aclose()
    assert {k: open_connections(k) for k in before} == before
    assert not c.events, c.events


async def test_a_shared_server_refuses_a_connection_without_a_scope(two):
    from mcp import Client

    a, _ = two
    with pytest.raises(Exception, match="without a scope"):
        async with asyncio.timeout(LIMIT_S):
            async with Client(target(a, "fs").server):
                pass


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 :].split()[0] != b"Z"


async def wait_gone(pid: int, within: float = 5.0) -> None:
    deadline = time.monotonic() + within
    while alive(pid):
        assert time.monotonic() < deadline, f"pid {pid} is still alive"
        await asyncio.sleep(0.02)


def test_the_scope_is_not_in_any_tool_schema():
    """No tool of the shared servers takes a root, a cwd of its own choosing beyond the
    terminal's relative one, or a session: the scope never travels in arguments."""

    async def schemas() -> dict[str, dict]:
        session = await open_session("s", Path(os.getcwd()))
        try:
            return {t.qualified: t.input_schema for t in session.hub.tools()}
        finally:
            await session.hub.aclose()

    found = asyncio.run(schemas())
    for name, schema in found.items():
        props = set(schema.get("properties", {}))
        assert not props & {"roots", "root", "session", "session_id", "place"}, name


async def test_a_call_after_the_session_closed_opens_no_connection(two):
    """A call racing the close of its session's tools (a lazily connected server) is
    refused instead of opening a connection nothing would close."""
    from crow.tools.hub import ToolServerError

    _, b = two
    c = await open_session("sess-late", b.cwd)
    tool = c.hub.find("terminal__run")
    assert tool is not None
    before = open_connections("terminal")
    await c.hub.aclose()
    with pytest.raises(ToolServerError, match="not running"):
        await c.hub.call(tool, {"command": "echo no"})
    assert open_connections("terminal") == before
