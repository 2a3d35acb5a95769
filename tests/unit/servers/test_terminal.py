"""The terminal MCP server, through a real MCP client (in-process, and once over stdio).

Null values in a result's ``_meta`` do not cross the SDK (it serializes results with
``exclude_none``), so the tests read optional keys with ``.get``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcp_types import CallToolResult, TextContent

import crow.servers.terminal as terminal
from crow.runtime import children
from crow.servers.terminal import build_server

LIMIT_S = 15


def text(result: CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


def meta(result: CallToolResult) -> dict[str, Any]:
    assert result.meta is not None
    return result.meta


def pid_gone(pid: int) -> bool:
    """No such process, or only its zombie (an orphan's reaper here may never reap it)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return True
    return stat[stat.rfind(b")") + 2 :].split()[0] == b"Z"


async def wait_gone(pid: int, within: float = 3.0) -> None:
    deadline = time.monotonic() + within
    while not pid_gone(pid):
        assert time.monotonic() < deadline, f"pid {pid} is still alive"
        await asyncio.sleep(0.02)


async def read_pid(path: Path, within: float = 5.0) -> int:
    deadline = time.monotonic() + within
    while True:
        content = path.read_text().strip() if path.exists() else ""
        if content.isdigit():
            return int(content)
        assert time.monotonic() < deadline, f"{path} was never written"
        await asyncio.sleep(0.02)


def processes_in(directory: Path) -> list[int]:
    """Live processes whose working directory is ``directory`` or below it."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            cwd = os.readlink(f"/proc/{name}/cwd")
        except OSError:
            continue
        if (cwd == str(directory) or cwd.startswith(f"{directory}/")) and not pid_gone(int(name)):
            found.append(int(name))
    return found


@pytest.fixture(autouse=True)
def no_leaked_processes(tmp_path: Path) -> Iterator[None]:
    yield
    deadline = time.monotonic() + 3.0
    while (left := processes_in(tmp_path)) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"processes left running in {tmp_path}: {left}"


async def run(tmp_path: Path, command: str, **args: Any) -> CallToolResult:
    async with asyncio.timeout(LIMIT_S), Client(build_server(tmp_path)) as c:
        return await c.call_tool("run", {"command": command, **args})


# -- the tool list ------------------------------------------------------------------------


async def test_tools_are_listed_with_kinds_and_annotations(tmp_path: Path) -> None:
    async with asyncio.timeout(LIMIT_S), Client(build_server(tmp_path)) as c:
        tools = {tool.name: tool for tool in (await c.list_tools()).tools}
    assert set(tools) == {"run", "start", "output", "stop", "list_processes"}
    kinds = {name: (tool.meta or {}).get("crow/kind") for name, tool in tools.items()}
    assert kinds == {
        "run": "execute",
        "start": "execute",
        "output": "read",
        "stop": "execute",
        "list_processes": "read",
    }
    for name, tool in tools.items():
        assert tool.annotations is not None
        assert tool.annotations.read_only_hint is (kinds[name] == "read")
    assert tools["run"].annotations is not None
    assert (tools["run"].description or "").endswith("The default timeout is 120 s.")
    assert tools["run"].annotations.destructive_hint is True
    assert set(tools["run"].input_schema["properties"]) == {"command", "timeout_s", "cwd"}
    assert tools["run"].input_schema["required"] == ["command"]
    assert set(tools["output"].input_schema["properties"]) == {"id", "since"}


# -- run ----------------------------------------------------------------------------------


async def test_run_reports_output_and_exit_code(tmp_path: Path) -> None:
    result = await run(tmp_path, "echo hello")
    assert text(result) == "hello\n[exit code 0]"
    assert not result.is_error
    m = meta(result)
    assert m["crow/command"] == "echo hello"
    assert m["crow/cwd"] == str(tmp_path.resolve())
    assert m["crow/exitCode"] == 0
    assert m.get("crow/signal") is None
    assert m["crow/timedOut"] is False
    assert m["crow/truncated"] is False


async def test_nonzero_exit_is_information_not_an_error(tmp_path: Path) -> None:
    result = await run(tmp_path, "echo out; echo err >&2; exit 3")
    assert text(result) == "out\nerr\n[exit code 3]"  # stderr merged, in order
    assert not result.is_error
    assert meta(result)["crow/exitCode"] == 3


async def test_output_without_final_newline_and_empty_output(tmp_path: Path) -> None:
    assert text(await run(tmp_path, "printf abc")) == "abc\n[exit code 0]"
    assert text(await run(tmp_path, "true")) == "[exit code 0]"


async def test_stdin_is_empty(tmp_path: Path) -> None:
    assert text(await run(tmp_path, "cat; echo done")) == "done\n[exit code 0]"


async def test_death_by_signal(tmp_path: Path) -> None:
    result = await run(tmp_path, "kill -TERM $$")
    assert text(result) == f"[terminated by signal {int(signal.SIGTERM)}]"
    assert meta(result).get("crow/exitCode") is None
    assert meta(result)["crow/signal"] == "SIGTERM"
    assert not result.is_error


async def test_output_is_streamed_as_progress_while_running(tmp_path: Path) -> None:
    events: list[tuple[float, float, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        events.append((time.monotonic(), progress, message))

    async with asyncio.timeout(LIMIT_S), Client(build_server(tmp_path)) as c:
        result = await c.call_tool(
            "run", {"command": "echo a; sleep 0.3; echo b"}, progress_callback=on_progress
        )
        finished = time.monotonic()
    assert text(result) == "a\nb\n[exit code 0]"
    assert [message for _, _, message in events] == ["a\n", "b\n"]
    first_at = events[0][0]
    assert finished - first_at > 0.2, "the first output arrived only when the command ended"
    assert [progress for _, progress, _ in events] == [2, 4]  # bytes so far, increasing


async def test_progress_keeps_a_split_character_whole(tmp_path: Path) -> None:
    messages: list[str] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        assert message is not None
        messages.append(message)

    async with asyncio.timeout(LIMIT_S), Client(build_server(tmp_path)) as c:
        result = await c.call_tool(
            "run",
            {"command": r"printf '\303'; sleep 0.2; printf '\251\n'"},
            progress_callback=on_progress,
        )
    assert "".join(messages) == "é\n"
    assert "\ufffd" not in "".join(messages)
    assert text(result) == "é\n[exit code 0]"


async def test_chatty_output_is_coalesced(tmp_path: Path) -> None:
    messages: list[str] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        assert message is not None
        messages.append(message)

    command = "i=0; while [ $i -lt 40 ]; do echo line$i; sleep 0.01; i=$((i+1)); done"
    async with asyncio.timeout(LIMIT_S), Client(build_server(tmp_path)) as c:
        result = await c.call_tool("run", {"command": command}, progress_callback=on_progress)
    expected = "".join(f"line{i}\n" for i in range(40))
    assert "".join(messages) == expected
    assert text(result) == expected + "[exit code 0]"
    assert len(messages) < 30  # ~0.4 s of output in ~50 ms batches, not 40 notifications


async def test_long_output_keeps_head_and_tail(tmp_path: Path) -> None:
    async with asyncio.timeout(LIMIT_S), Client(build_server(tmp_path, max_output_bytes=1000)) as c:
        result = await c.call_tool("run", {"command": "seq 1 3000"})
    full = "".join(f"{i}\n" for i in range(1, 3001))
    omitted = len(full) - 1000
    body = text(result)
    head, note, tail = body.partition(f"[... {omitted} bytes of output truncated ...]\n")
    assert note
    assert head == full[:500]
    assert tail == full[-500:] + "[exit code 0]"
    assert meta(result)["crow/truncated"] is True


async def test_timeout_kills_the_whole_group(tmp_path: Path) -> None:
    started = time.monotonic()
    result = await run(
        tmp_path, "echo $$ > shell.pid; sleep 30 & echo $! > child.pid; wait", timeout_s=0.5
    )
    assert time.monotonic() - started < 5
    assert text(result) == "[killed after timeout of 0.5 s]"
    m = meta(result)
    assert m["crow/timedOut"] is True
    assert m.get("crow/exitCode") is None
    assert m["crow/signal"] == "SIGTERM"
    assert not result.is_error
    for name in ("shell.pid", "child.pid"):
        assert pid_gone(int((tmp_path / name).read_text()))


async def test_timeout_escalates_to_sigkill(tmp_path: Path) -> None:
    # An ignored SIGTERM is inherited by the sleep too: only SIGKILL ends them.
    result = await run(
        tmp_path, "trap '' TERM; echo started; sleep 30 & echo $! > child.pid; wait", timeout_s=0.3
    )
    assert text(result) == "started\n[killed after timeout of 0.3 s]"
    assert meta(result)["crow/signal"] == "SIGKILL"
    assert pid_gone(int((tmp_path / "child.pid").read_text()))


async def test_processes_left_behind_are_ended_when_the_command_exits(tmp_path: Path) -> None:
    started = time.monotonic()
    result = await run(tmp_path, "sleep 30 & echo $! > child.pid; echo left")
    assert time.monotonic() - started < 5
    assert text(result) == "left\n[exit code 0]"
    assert pid_gone(int((tmp_path / "child.pid").read_text()))


async def test_cancelling_the_call_kills_the_process_group(tmp_path: Path) -> None:
    command = "echo $$ > shell.pid; sleep 30 & echo $! > child.pid; wait; echo never"
    async with asyncio.timeout(LIMIT_S), Client(build_server(tmp_path)) as c:
        call = asyncio.create_task(c.call_tool("run", {"command": command}))
        child = await read_pid(tmp_path / "child.pid")
        shell = int((tmp_path / "shell.pid").read_text())
        assert not pid_gone(child)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        await wait_gone(shell, within=1.0)
        await wait_gone(child, within=1.0)
        # The server is still usable.
        assert text(await c.call_tool("run", {"command": "echo ok"})) == "ok\n[exit code 0]"


async def test_cwd_is_relative_to_the_server_cwd(tmp_path: Path) -> None:
    (tmp_path / "sub" / "deeper").mkdir(parents=True)
    async with asyncio.timeout(LIMIT_S), Client(build_server(tmp_path)) as c:
        default = await c.call_tool("run", {"command": "pwd -P; echo $PWD"})
        sub = await c.call_tool("run", {"command": "pwd -P", "cwd": "sub/deeper"})
        up = await c.call_tool("run", {"command": "pwd -P", "cwd": "sub/deeper/.."})
        absolute = await c.call_tool("run", {"command": "pwd -P", "cwd": str(tmp_path / "sub")})
    base = tmp_path.resolve()
    assert text(default) == f"{base}\n{base}\n[exit code 0]"
    assert text(sub) == f"{base / 'sub' / 'deeper'}\n[exit code 0]"
    assert meta(sub)["crow/cwd"] == str(base / "sub" / "deeper")
    assert text(up) == f"{base / 'sub'}\n[exit code 0]"
    assert text(absolute) == f"{base / 'sub'}\n[exit code 0]"


async def test_bad_cwd_or_timeout_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    async with asyncio.timeout(LIMIT_S), Client(build_server(tmp_path)) as c:
        missing = await c.call_tool("run", {"command": "true", "cwd": "nope"})
        not_dir = await c.call_tool("start", {"command": "true", "cwd": "file"})
        bad_timeout = await c.call_tool("run", {"command": "true", "timeout_s": 0})
    assert missing.is_error
    assert text(missing) == f"The working directory {tmp_path.resolve() / 'nope'} does not exist."
    assert not_dir.is_error
    assert "is not a directory" in text(not_dir)
    assert bad_timeout.is_error
    assert "timeout_s must be positive" in text(bad_timeout)


async def test_failure_to_start_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(terminal, "SHELL", str(tmp_path / "no-such-shell"))
    result = await run(tmp_path, "true")
    assert result.is_error
    assert text(result).startswith("The command could not start: ")


async def test_nul_bytes_are_refused_with_a_sentence(tmp_path: Path) -> None:
    async with asyncio.timeout(LIMIT_S), Client(build_server(tmp_path)) as c:
        command = await c.call_tool("run", {"command": "echo a\0b"})
        cwd = await c.call_tool("run", {"command": "true", "cwd": "a\0b"})
    assert command.is_error
    assert text(command).startswith("The command could not start: ")
    assert cwd.is_error
    assert text(cwd).startswith("The working directory 'a\\x00b' is not usable: ")


async def test_a_flood_of_output_streams_without_harm(tmp_path: Path) -> None:
    streamed: list[str] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        assert message is not None
        streamed.append(message)

    async with asyncio.timeout(LIMIT_S), Client(build_server(tmp_path)) as c:
        result = await c.call_tool(
            "run", {"command": "yes | head -c 5000000"}, progress_callback=on_progress
        )
    assert text(result).endswith("y\n[exit code 0]")
    assert meta(result)["crow/truncated"] is True
    joined = "".join(streamed)
    # A burst beyond 1 MiB between two notifications is cut, and says so.
    assert len(joined) == 5_000_000 or "bytes not streamed ...]" in joined


async def test_default_timeout_comes_from_the_server(tmp_path: Path) -> None:
    async with asyncio.timeout(LIMIT_S), Client(build_server(tmp_path, default_timeout_s=0.3)) as c:
        result = await c.call_tool("run", {"command": "sleep 30"})
    assert text(result) == "[killed after timeout of 0.3 s]"


# -- background processes -----------------------------------------------------------------


async def poll_output(c: Client, id: str, until: str, since: int = 0) -> CallToolResult:
    while True:
        result = await c.call_tool("output", {"id": id, "since": since})
        if until in text(result):
            return result
        await asyncio.sleep(0.02)


async def test_background_output_with_a_cursor_then_stop(tmp_path: Path) -> None:
    async with asyncio.timeout(LIMIT_S), Client(build_server(tmp_path)) as c:
        started = await c.call_tool("start", {"command": "echo one; sleep 0.2; echo two; sleep 30"})
        assert not started.is_error
        m = meta(started)
        assert m["crow/id"] == "bg_1"
        assert m["crow/cwd"] == str(tmp_path.resolve())
        pid = m["crow/pid"]
        assert text(started) == f"Started bg_1 (pid {pid}): echo one; sleep 0.2; echo two; sleep 30"

        first = await poll_output(c, "bg_1", "one")
        assert text(first).startswith("one\n")
        assert meta(first)["crow/status"] == "running"
        cursor = meta(first)["crow/next"]
        assert cursor == len(text(first).partition("[running]")[0].encode())

        second = await poll_output(c, "bg_1", "two", since=cursor)
        assert text(second) == "two\n[running]"
        cursor = meta(second)["crow/next"]
        assert cursor == len(b"one\ntwo\n")

        nothing_new = await c.call_tool("output", {"id": "bg_1", "since": cursor})
        assert text(nothing_new) == "[running]"
        assert meta(nothing_new)["crow/next"] == cursor
        everything = await c.call_tool("output", {"id": "bg_1"})
        assert text(everything) == "one\ntwo\n[running]"

        listed = await c.call_tool("list_processes", {})
        assert text(listed) == f"bg_1  pid {pid}  running  echo one; sleep 0.2; echo two; sleep 30"
        [row] = meta(listed)["crow/processes"]
        assert row["crow/id"] == "bg_1"
        assert row["crow/status"] == "running"
        assert row["crow/command"] == "echo one; sleep 0.2; echo two; sleep 30"

        stopped = await c.call_tool("stop", {"id": "bg_1"})
        assert text(stopped) == f"[terminated by signal {int(signal.SIGTERM)}]"  # all was read
        assert meta(stopped)["crow/status"] == "exited"
        assert meta(stopped)["crow/signal"] == "SIGTERM"
        assert pid_gone(pid)

        [row] = meta(await c.call_tool("list_processes", {}))["crow/processes"]
        assert row["crow/status"] == "exited"
        after = await c.call_tool("output", {"id": "bg_1"})
        assert text(after) == f"one\ntwo\n[terminated by signal {int(signal.SIGTERM)}]"


async def test_stop_returns_the_unread_output(tmp_path: Path) -> None:
    async with asyncio.timeout(LIMIT_S), Client(build_server(tmp_path)) as c:
        await c.call_tool("start", {"command": "echo unread; sleep 30 & echo $! > child.pid; wait"})
        child = await read_pid(tmp_path / "child.pid")
        await poll_output(c, "bg_1", "unread")  # read: stop does not repeat it ...
        await c.call_tool("start", {"command": "echo also unread; echo 1 > ready; sleep 30"})
        await read_pid(tmp_path / "ready")  # ... but this one nobody read
        stopped_1 = await c.call_tool("stop", {"id": "bg_1"})
        stopped_2 = await c.call_tool("stop", {"id": "bg_2"})
        await wait_gone(child)
        signalled = f"[terminated by signal {int(signal.SIGTERM)}]"
        assert text(stopped_1) == signalled
        assert text(stopped_2) == "also unread\n" + signalled
        again = await c.call_tool("stop", {"id": "bg_2"})  # stopping twice is harmless
        assert text(again) == signalled


async def test_background_exit_code(tmp_path: Path) -> None:
    async with asyncio.timeout(LIMIT_S), Client(build_server(tmp_path)) as c:
        await c.call_tool("start", {"command": "echo bye; exit 4"})
        done = await poll_output(c, "bg_1", "[exit code 4]")
        assert text(done) == "bye\n[exit code 4]"
        assert meta(done)["crow/status"] == "exited"
        assert meta(done)["crow/exitCode"] == 4
        listed = await c.call_tool("list_processes", {})
        assert text(listed).startswith("bg_1  pid ")
        assert "  exit code 4  echo bye; exit 4" in text(listed)
        stopped = await c.call_tool("stop", {"id": "bg_1"})
        assert text(stopped) == "[exit code 4]"


async def test_background_output_pages_and_ring_buffer_drops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(terminal, "RING_BYTES", 100)
    full = "".join(f"{i}\n" for i in range(1, 101)).encode()  # 292 bytes
    async with asyncio.timeout(LIMIT_S), Client(build_server(tmp_path, max_output_bytes=60)) as c:
        await c.call_tool("start", {"command": "seq 1 100"})
        while (
            meta(await c.call_tool("output", {"id": "bg_1", "since": 10**6})).get("crow/exitCode")
            is None
        ):
            await asyncio.sleep(0.02)
        first = await c.call_tool("output", {"id": "bg_1"})
        m = meta(first)
        assert m["crow/dropped"] == len(full) - 100
        assert m["crow/next"] == len(full) - 40
        assert m["crow/more"] == 40
        assert text(first) == (
            f"[... {len(full) - 100} earlier bytes are no longer kept ...]\n"
            + full[-100:-40].decode()
            + f"[... 40 more bytes: call output with since={len(full) - 40}]\n[exit code 0]"
        )
        rest = await c.call_tool("output", {"id": "bg_1", "since": m["crow/next"]})
        assert text(rest) == full[-40:].decode() + "[exit code 0]"
        assert meta(rest)["crow/next"] == len(full)
        assert meta(rest)["crow/more"] == 0


async def test_unknown_id_is_an_error(tmp_path: Path) -> None:
    async with asyncio.timeout(LIMIT_S), Client(build_server(tmp_path)) as c:
        for tool in ("output", "stop"):
            result = await c.call_tool(tool, {"id": "bg_9"})
            assert result.is_error
            assert text(result) == "There is no background process with id 'bg_9' (known: none)."
        listed = await c.call_tool("list_processes", {})
        assert text(listed) == "No background processes."
        assert meta(listed)["crow/processes"] == []


async def test_lifespan_end_kills_background_processes(tmp_path: Path) -> None:
    async with asyncio.timeout(LIMIT_S):
        async with Client(build_server(tmp_path)) as c:
            cmd = "sleep 30 & echo $! > child.pid; trap '' TERM; sleep 30"
            pid = meta(await c.call_tool("start", {"command": cmd}))["crow/pid"]
            child = await read_pid(tmp_path / "child.pid")
            second = meta(await c.call_tool("start", {"command": "sleep 30"}))["crow/pid"]
        for p in (pid, child, second):
            assert pid_gone(p)


async def test_groups_are_registered_with_the_reaper_until_they_are_gone(
    tmp_path: Path,
) -> None:
    # Whether they really die with this process: tests/integration/test_children.py.
    async with asyncio.timeout(LIMIT_S), Client(build_server(tmp_path)) as c:
        started = await c.call_tool("start", {"command": "echo $$ > shell.pid; exec sleep 30"})
        pid = meta(started)["crow/pid"]
        await read_pid(tmp_path / "shell.pid")
        reaper = children._reaper
        assert reaper is not None and pid in reaper.groups
        # The environment carries the tag that finds what a command starts outside its group.
        env = text(await c.call_tool("run", {"command": f"env | grep ^{reaper.tag}="}))
        assert env == f"{reaper.tag}=1\n[exit code 0]"
        await c.call_tool("stop", {"id": "bg_1"})
        assert pid not in reaper.groups
        ran = meta(await c.call_tool("run", {"command": "echo $$ > fg.pid"}))
        assert ran["crow/exitCode"] == 0
        assert int((tmp_path / "fg.pid").read_text()) not in reaper.groups
        assert children._reaper is reaper  # one reaper for the whole process


# -- over stdio ---------------------------------------------------------------------------


async def test_over_stdio(tmp_path: Path) -> None:
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "crow.servers.terminal", "--cwd", str(tmp_path)]
    )
    messages: list[tuple[float, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        messages.append((time.monotonic(), message))

    async with asyncio.timeout(LIMIT_S):
        async with Client(params) as c:
            result = await c.call_tool(
                "run",
                {"command": "echo a; sleep 0.3; echo b >&2; exit 2"},
                progress_callback=on_progress,
            )
            finished = time.monotonic()
            assert text(result) == "a\nb\n[exit code 2]"
            assert meta(result)["crow/cwd"] == str(tmp_path.resolve())
            assert [m for _, m in messages] == ["a\n", "b\n"]
            assert finished - messages[0][0] > 0.2

            # Cancelling the awaiting task sends notifications/cancelled; the server kills.
            command = "sleep 30 & echo $! > child.pid; wait"
            call = asyncio.create_task(c.call_tool("run", {"command": command}))
            child = await read_pid(tmp_path / "child.pid")
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
            await wait_gone(child)

            background = meta(await c.call_tool("start", {"command": "sleep 30"}))["crow/pid"]
        # Closing stdin ends the server, whose lifespan ends its background processes.
        await wait_gone(background)


def test_main_rejects_a_missing_cwd(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        terminal.main(["--cwd", str(tmp_path / "nope")])
    assert exc.value.code == 2
    assert "not a directory" in capsys.readouterr().err
