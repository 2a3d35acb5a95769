"""Children die with Crow (``crow.runtime.children``): the reaper, the terminal server,
stdio MCP servers.

Every test starts real processes and kills for real.  A process counts as gone when it no
longer exists or is a zombie (an orphan's new parent here may never reap it).  Deadlines
are generous and polled: these are not timing tests, the machine may be busy.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path
from queue import Empty
from typing import Any

import pytest
from crow_testing.fakemodel import Text, ToolCalls
from crow_testing.serve_support import is_idle, updates
from crow_testing.support import ROOT
from mcp import Client, StdioServerParameters
from mcp_types import TextContent

from crow.config import McpServerSpec
from crow.runtime import children
from crow.tools.hub import ToolHub

GONE_S = 10.0
#: For things to start: a busy machine takes seconds to import the mcp package.
START_S = 60.0
PROBE = str(ROOT / "tests" / "mcp_probe.py")

# A group leader that starts a grandchild and then waits, both writing their pids.
FAMILY = "echo $$ > {name}.pid; sleep 300 & echo $! > {name}.child; exec sleep 300"
# Starts a grandchild that leaves the group: only the environment tag finds it.
ESCAPED = "setsid sleep 300 & echo $! > {name}.pid"
# Starts a grandchild with a scrubbed environment: only its group finds it.
SCRUBBED = "env -i /bin/sleep 300 & echo $! > {name}.pid"
# Starts a grandchild that leaves its group and its tag: only Crow, its subreaper, finds it
# (once the shell exits, it becomes Crow's child).  It forks a worker of its own.
VANISHED = "setsid env -i /bin/sh -c 'sleep 300 & exec sleep 300' & echo $! > {name}.pid"


def gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return True
    return stat[stat.rfind(b")") + 2 :].split()[0] == b"Z"


def wait_all_gone(pids: list[int], within: float = GONE_S) -> None:
    deadline = time.monotonic() + within
    while alive := [p for p in pids if not gone(p)]:
        assert time.monotonic() < deadline, f"still running: {alive}"
        time.sleep(0.02)


def read_pids(directory: Path, *names: str, within: float = START_S) -> list[int]:
    """The pids written to ``directory/NAME`` (waiting until each is complete)."""
    deadline = time.monotonic() + within
    pids = []
    for name in names:
        path = directory / name
        while not (content := path.read_text().strip() if path.exists() else "").isdigit():
            assert time.monotonic() < deadline, f"{path} was never written"
            time.sleep(0.02)
        pids.append(int(content))
    return pids


def processes_in(directory: Path) -> list[int]:
    """Live processes working in ``directory`` or below (every process a test starts does)."""
    found = []
    for name in os.listdir("/proc"):
        try:
            cwd = os.readlink(f"/proc/{name}/cwd") if name.isdigit() else ""
        except OSError:
            continue
        if (cwd == str(directory) or cwd.startswith(f"{directory}/")) and not gone(int(name)):
            found.append(int(name))
    return found


@pytest.fixture
def spawned(tmp_path: Path) -> Iterator[list[int]]:
    """Pids a test expects to die; whatever a failing test leaves running is killed here."""
    pids: list[int] = []
    yield pids
    for pid in processes_in(tmp_path):
        os.kill(pid, signal.SIGKILL)


def family(cwd: Path, command: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """``sh -c COMMAND`` leading a new group in ``cwd``, as the terminal server starts one."""
    return subprocess.Popen(["/bin/sh", "-c", command], cwd=cwd, env=env, start_new_session=True)


# -- the reaper, alone ----------------------------------------------------------------------


def reaper(token: str = "t") -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-I", "-S", children.__file__, token],
        stdin=subprocess.PIPE,
        start_new_session=True,
    )


def tell(process: subprocess.Popen[bytes], text: str) -> None:
    assert process.stdin is not None
    process.stdin.write(text.encode())
    process.stdin.flush()


def test_end_of_file_kills_the_registered_groups_only(tmp_path: Path, spawned: list[int]) -> None:
    kept = family(tmp_path, FAMILY.format(name="kept"))
    killed = family(tmp_path, FAMILY.format(name="killed"))
    ended = family(tmp_path, "exit 0")
    ended.wait()
    pids = read_pids(tmp_path, "kept.pid", "kept.child", "killed.pid", "killed.child")
    spawned += pids[2:]
    process = reaper()
    # Garbage is ignored, and so is 0 (killpg(0) would be the reaper's own group, and its
    # exit status would show it); an ended group is harmless.
    tell(process, "hello\n+abc\n+0\n+-5\n")
    tell(process, f"+{kept.pid}\n+{killed.pid}\n+{ended.pid}\n-{kept.pid}\n")
    assert process.stdin is not None
    process.stdin.close()
    assert process.wait(timeout=GONE_S) == 0
    wait_all_gone(pids[2:])
    assert not gone(pids[0]) and not gone(pids[1])
    kept.kill()  # the rest is left to the fixture
    kept.wait()
    killed.wait()


def test_end_of_file_kills_tagged_processes_that_left_their_group(
    tmp_path: Path, spawned: list[int]
) -> None:
    token = f"test{os.getpid()}"
    env = {**os.environ, children.TAG_PREFIX + token: "1"}
    leader = family(tmp_path, ESCAPED.format(name="escaped") + "; exec sleep 300", env)
    spawned += read_pids(tmp_path, "escaped.pid")
    process = reaper(token)  # nothing registered: the tag alone finds both
    assert process.stdin is not None
    process.stdin.close()
    process.wait(timeout=GONE_S)
    wait_all_gone([leader.pid, *spawned])
    leader.wait()


def wait_ignoring(pid: int, *signals: signal.Signals) -> None:
    """Wait until process ``pid`` ignores ``signals`` (its SigIgn mask in /proc)."""
    wanted = sum(1 << (sig - 1) for sig in signals)
    deadline = time.monotonic() + GONE_S
    while True:
        with open(f"/proc/{pid}/status") as f:
            mask = next(int(line.split()[1], 16) for line in f if line.startswith("SigIgn:"))
        if mask & wanted == wanted:
            return
        assert time.monotonic() < deadline, "the reaper never set up its signals"
        time.sleep(0.01)


def test_the_reaper_ignores_sigint_and_sighup(tmp_path: Path, spawned: list[int]) -> None:
    group = family(tmp_path, FAMILY.format(name="f"))
    spawned += read_pids(tmp_path, "f.pid", "f.child")
    process = reaper()
    tell(process, f"+{group.pid}\n")
    wait_ignoring(process.pid, signal.SIGINT, signal.SIGHUP)  # it has started
    process.send_signal(signal.SIGINT)
    process.send_signal(signal.SIGHUP)
    tell(process, "-0\n")  # it still reads
    assert process.poll() is None
    assert process.stdin is not None
    process.stdin.close()
    assert process.wait(timeout=GONE_S) == 0
    wait_all_gone(spawned)
    group.wait()


def test_end_of_file_kills_adopted_children_named_by_pid_and_start_time(
    tmp_path: Path, spawned: list[int]
) -> None:
    adopted = family(tmp_path, FAMILY.format(name="a"))
    reused = family(tmp_path, "exec sleep 300")  # a pid told with another start time
    spawned += read_pids(tmp_path, "a.pid", "a.child")
    start = children._start_of(adopted.pid)
    process = reaper()
    tell(process, f"+p{adopted.pid}:{start}\n+p{reused.pid}:1\n+p0:1\n+pnope\n")
    assert process.stdin is not None
    process.stdin.close()
    assert process.wait(timeout=GONE_S) == 0
    wait_all_gone(spawned)  # its whole group: it leads one
    assert not gone(reused.pid)
    reused.kill()
    for ended in (adopted, reused):
        ended.wait()


def test_only_groups_with_a_member_are_kept(tmp_path: Path) -> None:
    running = family(tmp_path, "exec sleep 300")
    ended = family(tmp_path, "exit 0")
    ended.wait()  # reaped: its group id is free to be recycled
    try:
        assert children.live_groups({running.pid, ended.pid}) == {running.pid}
    finally:
        running.kill()
        running.wait()


# -- a Crow process using crow.runtime.children ------------------------------------------------

OWNER = """
import os, subprocess, sys, time
from crow.runtime import children

def start(command):
    env = children.tagged_env(os.environ)
    # close_fds=False: the reaper's pipe must not leak even then (it is close-on-exec).
    child = subprocess.Popen(
        ["/bin/sh", "-c", command], env=env, start_new_session=True, close_fds=False
    )
    children.register(child.pid)
    return child

start({first!r})
{between}
start({second!r})
print(children._reaper.proc.pid, flush=True)
time.sleep(300)
"""


OWNED = ("first.pid", "first.leader", "second.pid", "second.child")


def owner(tmp_path: Path, between: str = "") -> tuple[subprocess.Popen[str], int]:
    first = f"{SCRUBBED.format(name='first')}; echo $$ > first.leader; exec sleep 300"
    script = OWNER.format(first=first, second=FAMILY.format(name="second"), between=between)
    process = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script)],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    reaper_pid = int(process.stdout.readline())
    return process, reaper_pid


def kill_9(process: subprocess.Popen[str]) -> None:
    process.kill()
    process.wait()
    assert process.stdout is not None
    process.stdout.close()


def test_kill_9_of_the_owner_kills_its_groups(tmp_path: Path, spawned: list[int]) -> None:
    process, reaper_pid = owner(tmp_path)
    spawned += read_pids(tmp_path, *OWNED)
    kill_9(process)
    wait_all_gone([*spawned, reaper_pid])


def test_a_dead_reaper_is_replaced_and_told_every_group(tmp_path: Path, spawned: list[int]) -> None:
    # The first reaper dies between the two spawns; the second registration replaces it.
    kill_first = "os.kill(children._reaper.proc.pid, 9); children._reaper.proc.wait()"
    process, reaper_pid = owner(tmp_path, kill_first)
    spawned += read_pids(tmp_path, *OWNED)
    kill_9(process)
    wait_all_gone([*spawned, reaper_pid])


def test_a_forked_child_does_not_keep_the_reaper_waiting(
    tmp_path: Path, spawned: list[int]
) -> None:
    fork = (
        "if os.fork() == 0:\n"
        "    open('forked.pid', 'w').write(str(os.getpid()))\n"
        "    time.sleep(300)\n"
        "    os._exit(0)"
    )
    process, reaper_pid = owner(tmp_path, fork)
    spawned += read_pids(tmp_path, "forked.pid", *OWNED)
    kill_9(process)
    # The reaper ends even though the copy may live on (holding no pipe of Crow's); the
    # copy itself is Crow's child, so whether it dies too depends on whether Crow had
    # told the reaper about it yet (every PRUNE_S): not asserted.
    wait_all_gone([*spawned[1:], reaper_pid])


def test_without_a_reaper_children_still_start_and_it_is_said(tmp_path: Path) -> None:
    script = (
        "import os, subprocess, sys\n"
        "sys.executable = '/nonexistent/python'\n"
        "from crow.runtime import children\n"
        "env = children.tagged_env(os.environ)\n"
        "child = subprocess.Popen(['/bin/true'], env=env, start_new_session=True)\n"
        "children.register(child.pid)\n"
        "child.wait()\n"
        "children.unregister(child.pid)\n"
        "print('started', child.returncode)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.stdout == "started 0\n", done.stderr
    assert "cannot start the reaper of child processes" in done.stderr


def until_idle(agent: Any, within: float = START_S) -> list[dict[str, Any]]:
    """The updates up to the idle that ends the turn, however long the tools take to start."""
    deadline = time.monotonic() + within
    seen = []
    while True:
        try:
            message = agent.recv(timeout=0.5)
        except Empty:
            assert time.monotonic() < deadline, "the turn never ended"
            continue
        seen.append(message)
        if message.get("method") == "session/update" and is_idle(message["params"]["update"]):
            return updates(seen)


# -- the terminal server --------------------------------------------------------------------

YOLO = '[tools]\nbuiltin = ["terminal"]\n\n[permissions]\nexecute = "allow"\n'


def test_kill_9_of_crow_serve_kills_terminal_commands_and_all_they_started(
    crow: Any, scripted_model: Any, tmp_path: Path, spawned: list[int]
) -> None:
    background = f"{ESCAPED.format(name='escaped')}; {FAMILY.format(name='bg')}"
    foreground = f"{SCRUBBED.format(name='scrubbed')}; {FAMILY.format(name='fg')}"
    scripted_model.script(
        ToolCalls(
            calls=[
                ("terminal__start", {"command": background}),
                ("terminal__run", {"command": foreground}),
            ]
        )
    )
    agent = crow(extra=YOLO)
    agent.prompt(agent.new_session(str(tmp_path)), "start them")
    names = ("bg.pid", "bg.child", "escaped.pid", "scrubbed.pid", "fg.pid", "fg.child")
    spawned += read_pids(tmp_path, *names)
    agent.proc.kill()
    agent.proc.wait()
    wait_all_gone(spawned)


@pytest.mark.parametrize("how", ["kill -9", "end of input"])
def test_a_command_that_leaves_its_group_and_its_tag_dies_with_crow_serve(
    crow: Any, scripted_model: Any, tmp_path: Path, spawned: list[int], how: str
) -> None:
    """``setsid env -i CMD &``: neither the group nor the tag finds CMD; Crow, a child
    subreaper, adopts it when the command's shell exits, and it dies with Crow."""
    command = f"{VANISHED.format(name='vanished')}; sleep 0.2"
    scripted_model.script(
        ToolCalls(calls=[("terminal__run", {"command": command})]), Text(text="done")
    )
    agent = crow(extra=YOLO)
    agent.prompt(agent.new_session(str(tmp_path)), "run it")
    assert until_idle(agent)[-1]["stopReason"] == "end_turn"
    [pid] = read_pids(tmp_path, "vanished.pid")
    spawned += [pid, *processes_in(tmp_path)]
    assert not gone(pid)  # it outlives its command, as background work may
    if how == "kill -9":
        agent.proc.kill()
        agent.proc.wait()
    else:
        assert agent.close() == 0
    wait_all_gone(spawned)


def test_an_adopted_child_that_ends_is_reaped_while_crow_serve_runs(
    crow: Any, scripted_model: Any, tmp_path: Path
) -> None:
    """An orphan Crow adopted would stay a zombie of crow serve's: it is reaped.

    It must still be alive when Crow first looks (as the command's group ends, then every
    PRUNE_S): a zombie never seen alive is not known to be an orphan (see children.py).
    Three seconds covers a loaded machine's delay between the shell's exit and that look."""
    command = "setsid env -i /bin/sleep 3 & echo $! > brief.pid"
    scripted_model.script(
        ToolCalls(calls=[("terminal__run", {"command": command})]), Text(text="done")
    )
    agent = crow(extra=YOLO)
    agent.prompt(agent.new_session(str(tmp_path)), "run it")
    assert until_idle(agent)[-1]["stopReason"] == "end_turn"
    [pid] = read_pids(tmp_path, "brief.pid")
    deadline = time.monotonic() + 3 + GONE_S + children.PRUNE_S
    while os.path.exists(f"/proc/{pid}"):  # a zombie still has its entry
        assert time.monotonic() < deadline, f"{pid} was never reaped"
        time.sleep(0.05)
    assert agent.proc.poll() is None


async def test_kill_9_of_the_standalone_terminal_server_kills_its_commands(
    tmp_path: Path, spawned: list[int]
) -> None:
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "crow", "mcp", "terminal", "--cwd", str(tmp_path)]
    )
    async with asyncio.timeout(60), Client(params) as client:
        parent = (await client.call_tool("run", {"command": "echo $PPID"})).content[0]
        assert isinstance(parent, TextContent)
        server = int(parent.text.split()[0])
        await client.call_tool("start", {"command": FAMILY.format(name="bg")})
        run = asyncio.create_task(client.call_tool("run", {"command": FAMILY.format(name="fg")}))
        names = ("bg.pid", "bg.child", "fg.pid", "fg.child")
        spawned += await asyncio.to_thread(read_pids, tmp_path, *names)  # while run is sent
        os.kill(server, signal.SIGKILL)
        wait_all_gone(spawned)
        run.cancel()
        with suppress(Exception, asyncio.CancelledError):  # the server died under the call
            await run


# -- stdio MCP servers ----------------------------------------------------------------------


def server_command(tmp_path: Path) -> list[str]:
    """The probe server behind a shell that leaves two grandchildren: one scrubbed, one escaped."""
    script = (
        f"cd {tmp_path}; echo $$ > server.pid; "
        "env -i /bin/sleep 300 & echo $! > scrubbed.pid; "
        "setsid sleep 300 & echo $! > escaped.pid; "
        "sleep 300 & echo $! > child.pid; "
        f"exec {sys.executable} {PROBE}"
    )
    return ["/bin/sh", "-c", script]


SERVER_PIDS = ("server.pid", "scrubbed.pid", "escaped.pid", "child.pid")


def test_kill_9_of_crow_serve_kills_a_client_named_server_and_its_children(
    crow: Any, scripted_model: Any, tmp_path: Path, spawned: list[int]
) -> None:
    scripted_model.script(Text(text="ok"))  # a turn waits for the session's servers
    agent = crow(extra="[tools]\nbuiltin = []\n")
    command, *args = server_command(tmp_path)
    server = {"type": "stdio", "name": "mine", "command": command, "args": args, "env": []}
    response, _ = agent.request("session/new", {"cwd": "/tmp", "mcpServers": [server]})
    agent.prompt(response["result"]["sessionId"], "call it")
    assert until_idle(agent)[-1]["stopReason"] == "end_turn"  # the server is registered
    spawned += read_pids(tmp_path, *SERVER_PIDS)
    agent.proc.kill()
    agent.proc.wait()
    wait_all_gone(spawned)


async def test_closing_the_hub_leaves_no_child_or_grandchild(
    tmp_path: Path, spawned: list[int]
) -> None:
    events: list[str] = []

    async def on_event(message: str, severity: str) -> None:
        events.append(message)

    command, *args = server_command(tmp_path)
    hub = ToolHub(on_event=on_event)
    spec = McpServerSpec(name="probe", command=command, args=tuple(args), timeout_s=20)
    async with asyncio.timeout(60):
        await hub.start({}, [spec], builtin_timeout_s=20)
        assert hub.find("probe__echo") is not None, events
        pgid = hub.servers["probe"].pgid
        spawned += read_pids(tmp_path, *SERVER_PIDS)
        assert pgid == spawned[0]
        await hub.aclose()
    wait_all_gone(spawned)  # the probe exits on end-of-file; the rest was killed after it
    assert children._reaper is not None and pgid not in children._reaper.groups


def test_a_normal_exit_of_crow_serve_leaves_nothing(
    crow: Any, scripted_model: Any, tmp_path: Path, spawned: list[int]
) -> None:
    scripted_model.script(
        ToolCalls(calls=[("terminal__start", {"command": FAMILY.format(name="bg")})]),
        Text(text="started"),
    )
    agent = crow(extra=YOLO)
    command, *args = server_command(tmp_path)
    server = {"type": "stdio", "name": "mine", "command": command, "args": args, "env": []}
    params = {"cwd": str(tmp_path), "mcpServers": [server]}
    response, _ = agent.request("session/new", params)
    agent.prompt(response["result"]["sessionId"], "start it")
    assert until_idle(agent)[-1]["stopReason"] == "end_turn"
    spawned += read_pids(tmp_path, "bg.pid", "bg.child", *SERVER_PIDS)
    assert agent.close() == 0  # end of stdin: crow serve exits on its own
    wait_all_gone(spawned)
