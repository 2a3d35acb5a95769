"""``crow chat`` in a real terminal (pexpect) against ``crow serve`` and the scripted model.

prompt_toolkit draws with escape sequences, so the tests match text loosely:
escapes, carriage returns and backspaces may sit between any two characters.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pexpect
import pytest
from crow_testing.fakemodel import Error, Hang, Text, ToolCalls
from crow_testing.serve_support import Terminals, write_config
from test_serve_tools import probe_config

TIMEOUT = 15
NOISE = r"(?:\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][A-Z0-9]|[\r\x08])*"


def loose(text: str) -> re.Pattern[str]:
    """``text``, letting terminal drawing sit between its characters."""
    return re.compile(NOISE.join(re.escape(c) for c in text))


PROMPT = loose("you>")


def see(child: pexpect.spawn, *texts: str) -> None:
    """Each text, in this order."""
    for text in texts:
        child.expect(loose(text), timeout=TIMEOUT)


def prompt(child: pexpect.spawn) -> None:
    child.expect(PROMPT, timeout=TIMEOUT)


def new_session(chat: Any) -> tuple[pexpect.spawn, str]:
    """A chat at its first prompt, and its session's id."""
    child = chat()
    child.expect(r"session (sess_[0-9a-z]+) ", timeout=TIMEOUT)
    session_id = child.match.group(1)
    prompt(child)
    return child, session_id


def leave(child: pexpect.spawn) -> None:
    child.send("\x04")
    child.expect(pexpect.EOF, timeout=TIMEOUT)


@pytest.fixture
def chat(crow_home: Path, scripted_model: Any, tmp_path: Path) -> Iterator[Any]:
    """Start ``crow chat`` in a 40x120 terminal; every child is killed after the test."""
    env = dict(
        os.environ,
        TERM="xterm",
        NO_COLOR="1",
        PROMPT_TOOLKIT_NO_CPR="1",
        CROW_HOME=str(crow_home),
    )

    terminals = Terminals(env, tmp_path, TIMEOUT)

    def start(*args: str, configure: bool = True, **config: Any) -> pexpect.spawn:
        if configure:
            write_config(crow_home, scripted_model.base_url, **config)
        return terminals.start("chat", *args, dimensions=(40, 120))

    yield start
    terminals.close()


def user_text(request: dict[str, Any]) -> str:
    content = request["messages"][-1]["content"]
    return content if isinstance(content, str) else "".join(b["text"] for b in content)


def test_a_turn_streams_the_reply_and_the_prompt_comes_back(chat, scripted_model, crow_home):
    scripted_model.script(
        Text(text="Hello from the model", chunks=4, delay_s=0.1),
        Text(text="two lines seen"),
        Text(text="continued too"),
    )
    child = chat()
    prompt(child)
    child.send("hi\r")
    see(child, "Hello from the model")
    prompt(child)
    assert user_text(scripted_model.requests[0]) == "hi"

    child.send("line one\x1b\rline two\r")  # Esc Enter (Alt-Enter) inserts a newline
    see(child, "two lines seen")
    prompt(child)
    assert user_text(scripted_model.requests[1]) == "line one\nline two"

    child.send("first\\\rsecond\r")  # a trailing backslash continues the prompt
    see(child, "continued too")
    prompt(child)
    assert user_text(scripted_model.requests[2]) == "first\nsecond"
    assert "hi" in (crow_home / "history").read_text()


def test_ctrl_c_cancels_the_turn_and_the_next_turn_works(chat, scripted_model):
    scripted_model.script(Hang(), Text(text="back again"))
    child = chat()
    prompt(child)
    child.send("go\r")
    scripted_model.wait_for_requests(1, timeout=TIMEOUT)
    child.send("\x03")
    see(child, "cancelling", "[cancelled]")
    prompt(child)
    child.send("again\r")
    see(child, "back again")
    prompt(child)
    assert child.isalive()


def asked_to_write(chat, scripted_model):
    """A chat whose turn waits on a permission question (the probe's touch)."""
    scripted_model.script(
        ToolCalls(calls=[("probe__touch", {"path": "a.txt"})]), Text(text="file written")
    )
    child = chat(extra=probe_config())
    prompt(child)
    child.send("write it\r")
    see(child, "Allow", "1) Allow once", "choose 1-")
    return child


def test_a_permission_question_is_answered_inline(chat, scripted_model):
    child = asked_to_write(chat, scripted_model)
    child.send("1\r")
    see(child, "✓", "file written")
    prompt(child)
    assert "rejected" not in str(scripted_model.requests[1]["messages"][-1]["content"])


def test_enter_alone_at_a_permission_question_allows_nothing(chat, scripted_model):
    child = asked_to_write(chat, scripted_model)
    child.send("\r")  # a stray Enter
    see(child, "answer a number from 1 to", "choose 1-")
    assert len(scripted_model.requests) == 1  # still waiting on the question
    child.send("1\r")
    see(child, "✓", "file written")


def test_slash_commands_are_answered_by_crow_and_complete_with_tab(chat, scripted_model):
    child = chat()
    prompt(child)
    child.send("/help\r")
    see(child, "Commands:", "/model", "/compact", "Rename this session")
    prompt(child)
    child.send("/mo")
    see(child, "Show the model")  # the completion menu, with the description as meta
    child.send("\t")
    see(child, "/model")
    child.send("\r")
    see(child, "Model: main")
    prompt(child)
    assert scripted_model.requests == []


def test_resuming_a_session_replays_its_history_first(chat, scripted_model):
    scripted_model.script(Text(text="the first answer"), Text(text="the second answer"))
    first, session_id = new_session(chat)
    first.send("the first question\r")
    see(first, "the first answer")
    prompt(first)
    leave(first)

    again = chat("--session", session_id, configure=False)
    see(again, "you> the first question", "the first answer", f"session {session_id}")
    prompt(again)
    again.send("the second question\r")
    see(again, "the second answer")
    prompt(again)
    history = [m.get("content") for m in scripted_model.requests[1]["messages"]]
    assert "the first answer" in history


def test_a_replayed_turn_that_was_cancelled_says_so(chat, scripted_model):
    scripted_model.script(Hang(), Text(text="the reply"))
    first, session_id = new_session(chat)
    first.send("never answered\r")
    scripted_model.wait_for_requests(1, timeout=TIMEOUT)
    first.send("\x03")
    see(first, "[cancelled]")
    prompt(first)
    first.send("ask again\r")  # the reply is not in the echo of what was typed
    see(first, "the reply")
    prompt(first)
    leave(first)

    again = chat("--session", session_id, configure=False)
    see(again, "you> never answered", "[cancelled]", "you> ask again", "the reply")
    see(again, f"session {session_id}")
    assert "[cancelled]" not in again.before  # once, after its own turn


def test_ctrl_d_leaves_with_status_0_and_the_agent_ends(chat):
    child = chat()
    prompt(child)
    agents = _children(child.pid)
    assert agents, "the agent subprocess is running"
    child.send("\x04")
    child.expect(pexpect.EOF, timeout=TIMEOUT)
    child.close()
    assert child.exitstatus == 0
    assert not [pid for pid in agents if _alive(pid)]


@pytest.mark.parametrize("command", ["/exit", "/quit"])
def test_exit_and_quit_leave_without_asking_the_agent(chat, scripted_model, command):
    child = chat()
    prompt(child)
    child.sendline(command)
    child.expect(pexpect.EOF, timeout=TIMEOUT)
    child.close()
    assert child.exitstatus == 0
    assert scripted_model.requests == []  # not sent as a prompt


def test_an_agent_that_cannot_start_exits_7_with_one_line(chat):
    child = chat("--command", "/nonexistent/agent")
    child.expect(pexpect.EOF, timeout=TIMEOUT)
    child.close()
    assert child.exitstatus == 7
    lines = [line for line in child.before.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("crow: ")


def test_prompts_from_a_pipe_are_answered_line_by_line(crow_home, scripted_model):
    write_config(crow_home, scripted_model.base_url, extra=probe_config())
    scripted_model.script(
        Text(text="first reply"),
        ToolCalls(calls=[("probe__touch", {"path": "a.txt"})]),
        Text(text="not written"),
    )
    done = subprocess.run(
        [sys.executable, "-m", "crow", "chat"],
        input="hello\nwrite \\\nit\n/exit\nnever sent\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "first reply\nnot written\n"
    assert "Warning" not in done.stderr and "nobody at a terminal to ask" in done.stderr
    assert "them>" not in done.stderr  # its own prompts: in the pipe's input, not another's
    assert [user_text(r) for r in scripted_model.requests[:2]] == ["hello", "write \nit"]
    assert len(scripted_model.requests) == 3


def _children(pid: int) -> list[int]:
    out = subprocess.run(
        ["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True, check=False
    ).stdout
    return [int(p) for p in out.split()]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_chat_attaches_to_a_running_server_with_url(crow_home, scripted_model):
    from crow_testing.serve_support import HttpServer

    write_config(crow_home, scripted_model.base_url, extra="[tools]\nbuiltin = []\n")
    scripted_model.set_default(Text(text="served over http"))
    server = HttpServer()
    child = pexpect.spawn(
        sys.executable,
        ["-m", "crow", "chat", "--url", server.url],
        env={**os.environ, "TERM": "xterm", "NO_COLOR": "1"},
        dimensions=(40, 120),
        encoding="utf-8",
        timeout=15,
    )
    try:
        prompt(child)
        child.send("hello\r")
        see(child, "served over http")
        prompt(child)
        child.sendeof()
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
        server.stop()


# ---- what a question shows, colours, and the chat's own commands ------------------------


def test_a_write_question_shows_the_diff_cut_after_a_few_lines(chat, scripted_model, tmp_path):
    body = "".join(f"line {n}\n" for n in range(20))
    scripted_model.script(
        ToolCalls(calls=[("fs__write", {"path": "notes.txt", "content": body})]),
        Text(text="written"),
    )
    child = chat(extra='[tools]\nbuiltin = ["fs"]\n')
    prompt(child)
    child.send("write notes\r")
    see(child, "? Allow Write notes.txt?", str(tmp_path / "notes.txt"), "(a new file)")
    see(child, "+line 0", "+line 5", "… 14 more lines", "1) Allow once", "choose 1-")
    assert not (tmp_path / "notes.txt").exists()  # asked before, not after
    child.send("1\r")
    see(child, "✓ Write notes.txt", "written")
    assert (tmp_path / "notes.txt").read_text() == body


def test_ctrl_c_at_a_question_cancels_the_turn_and_asks_no_more(chat, scripted_model):
    child = asked_to_write(chat, scripted_model)
    child.send("\x03")
    see(child, "cancelling", "[cancelled]")
    prompt(child)
    assert "choose 1-" not in child.before  # the question is gone, not asked again
    assert len(scripted_model.requests) == 1


def test_colours_on_a_terminal_unless_no_color(crow_home, scripted_model, tmp_path):
    write_config(crow_home, scripted_model.base_url, extra="[tools]\nbuiltin = []\n")
    scripted_model.set_default(Text(text="plain reply"))
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    env.update(TERM="xterm", PROMPT_TOOLKIT_NO_CPR="1")
    terminals = Terminals(env, tmp_path, TIMEOUT)
    try:
        coloured = terminals.start("chat", dimensions=(40, 120))
        prompt(coloured)
        coloured.send("/title a new name\r")
        coloured.expect(re.escape("\x1b[2mcrow: Renamed this session: a new name"), TIMEOUT)
        plain = terminals.start("chat", "--no-color", dimensions=(40, 120))
        prompt(plain)
        plain.send("/title another name\r")
        see(plain, "Renamed this session: another name")
        assert "\x1b[2m" not in plain.before and "\x1b[1;" not in plain.before
    finally:
        terminals.close()


def test_help_lists_every_command_and_title_confirms(chat, scripted_model):
    child = chat()
    prompt(child)
    child.send("/help\r")
    see(child, "Commands:", "/model", "/title", "/steer <text>", "/queue [drop [N]]")
    see(child, "/exit", "/quit")
    prompt(child)
    child.send("/title my work\r")
    see(child, "Renamed this session: my work")
    assert scripted_model.requests == []


def test_model_names_the_model_that_actually_answers(chat, scripted_model):

    scripted_model.script(Error(status=400, message="no such model"), Text(text="from backup"))
    child = chat(
        models={"main": {"id": "big-1"}, "backup": {"id": "small-2"}},
        fallback=["backup"],
        retry_attempts=1,
    )
    prompt(child)
    child.send("hello\r")
    see(child, "from backup")
    prompt(child)
    child.send("/model\r")
    see(child, "Model: main (big-1 at ", "If it fails: backup (small-2 at ")
    see(child, "The latest reply came from backup (small-2 at ", "main did not answer")
