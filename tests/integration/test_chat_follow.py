"""``crow chat`` as one of several clients of a session, in real terminals (pexpect):
it follows turns other clients drive, queues and steers prompts on a busy session
(the agent holds them, ACP-V2.md §6.1), withdraws them, gives them back after a
cancel, and rides out a server that is killed and started again.

One ``crow serve --http`` and the scripted model; each chat attaches with ``--url``.
"""

from __future__ import annotations

import os
import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from crow_testing.fakemodel import Hang, Slow, Text, ToolCalls
from crow_testing.serve_support import HttpServer, Terminals, write_config
from test_chat import TIMEOUT, user_text
from test_serve_tools import probe_config
from vt import Terminal

from crow.client.screen import SPINNER


@pytest.fixture
def served(crow_home: Path, scripted_model: Any) -> Iterator[HttpServer]:
    # A model request may hang for the whole test (Hang): no timeout and retry meanwhile.
    write_config(crow_home, scripted_model.base_url, extra=probe_config(), timeout_s=120)
    server = HttpServer()
    yield server
    server.stop()


ROWS, COLS = 40, 120


@pytest.fixture
def terminals(crow_home: Path, tmp_path: Path) -> Iterator[Any]:
    """``crow ARGS`` in a 40x120 terminal, read through ``vt.Terminal``."""
    env = dict(os.environ, TERM="xterm", NO_COLOR="1", PROMPT_TOOLKIT_NO_CPR="1")
    opened = Terminals(env, tmp_path, TIMEOUT)

    def start(*args: str, cols: int = COLS) -> Terminal:
        return Terminal(opened.start(*args, dimensions=(ROWS, cols)), ROWS, cols)

    yield start
    opened.close()


@pytest.fixture
def attach(terminals: Any) -> Any:
    """``crow chat --url URL [args]``."""
    return lambda url, *args: terminals("chat", "--url", url, *args)


def session_of(chat: Terminal) -> str:
    found = re.search(r"session (sess_[0-9a-z]+) ", chat.wait_for("you>", screen_only=False))
    assert found, chat.everything()
    return found.group(1)


def see(chat: Terminal, *texts: str) -> None:
    """Each text, anywhere (the scrollback too), in this order."""
    end = time.monotonic() + TIMEOUT
    while not _in_order(chat.everything(), texts):
        assert time.monotonic() < end, f"not seen in order: {texts}\n{chat.everything()}"
        chat.read()


def _in_order(shown: str, texts: tuple[str, ...]) -> bool:
    at = 0
    for text in texts:
        found = shown.find(text, at)
        if found < 0:
            return False
        at = found + len(text)
    return True


def on_screen(chat: Terminal, *texts: str) -> None:
    """Each text on the screen now (the live area and the input line included)."""
    for text in texts:
        chat.wait_for(text)


def prompt(chat: Terminal) -> None:
    """The input line is back, empty, and nothing runs."""
    end = time.monotonic() + TIMEOUT
    while not chat.screen().rstrip().endswith("you>") or any(c in chat.screen() for c in SPINNER):
        assert time.monotonic() < end, chat.everything()
        chat.read()


def test_a_chat_shows_another_clients_turn_as_theirs(served, attach, scripted_model):
    scripted_model.script(
        ToolCalls(calls=[("probe__echo", {"text": "looked"})]),
        Text(text="the answer for A", chunks=3, delay_s=0.05),
        Text(text="the answer for B"),
    )
    first = attach(served.url)
    session_id = session_of(first)
    second = attach(served.url, "--session", session_id)
    prompt(second)

    first.send("a question from A\r")
    see(first, "you> a question from A", "✓ probe: echo", "the answer for A")
    see(second, "them> a question from A", "✓ probe: echo", "the answer for A")
    prompt(second)
    second.send("and one from B\r")
    see(second, "you> and one from B", "the answer for B")
    see(first, "them> and one from B", "the answer for B")
    assert [user_text(r) for r in scripted_model.requests[::2]] == [
        "a question from A",
        "and one from B",
    ]


def test_enter_on_a_busy_session_queues_and_the_prompt_runs_after(served, attach, scripted_model):
    scripted_model.script(
        Slow("a slow first answer", chunks=8, delay_s=0.4), Text(text="the queued answer")
    )
    chat = attach(served.url)
    session_of(chat)
    chat.send("first\r")
    on_screen(chat, "Enter queues")
    chat.send("second\r")  # the session is busy: held by the agent
    on_screen(chat, "queued (1)", "queued: second")
    see(chat, "you> first", "a slow first answer", "you> second", "the queued answer")
    prompt(chat)
    assert [user_text(r) for r in scripted_model.requests] == ["first", "second"]


def test_alt_enter_steers_a_prompt_into_the_running_turn(served, attach, scripted_model):
    scripted_model.script(
        ToolCalls(calls=[("probe__slow", {"seconds": 2.0})]), Text(text="done, in Rust")
    )
    chat = attach(served.url)
    session_of(chat)
    chat.send("write it\r")
    on_screen(chat, "probe: slow")  # the tool call in flight, on its live row
    chat.send("use Rust instead\x1b\r")  # Alt-Enter while busy: steer
    see(chat, "you> write it", "you> use Rust instead", "✓ probe: slow", "done, in Rust")
    prompt(chat)
    assert len(scripted_model.requests) == 2
    assert user_text(scripted_model.requests[1]) == "use Rust instead"


def busy_chat(served: HttpServer, attach: Any, scripted_model: Any) -> Terminal:
    """A chat whose first prompt's model call hangs (until cancelled)."""
    scripted_model.script(Hang(), Text(text="asked again"))
    chat = attach(served.url)
    session_of(chat)
    chat.send("never answered\r")
    scripted_model.wait_for_requests(1, timeout=TIMEOUT)
    return chat


def test_slash_steer_steers_and_queue_lists_and_withdraws(served, attach, scripted_model):
    chat = busy_chat(served, attach, scripted_model)
    chat.send("keep this one\r")
    chat.send("drop this one\r")
    on_screen(chat, "queued (2)")
    chat.send("/queue\r")
    see(chat, "1) keep this one (yours)", "2) drop this one (yours)")
    chat.send("/queue drop 2\r")
    see(chat, "withdrawn; it is back in the input line")
    on_screen(chat, "queued (1)", "you> drop this one")  # to edit and send again
    chat.send("\x15")  # Ctrl-U: clear it
    chat.send("/queue\r")
    see(chat, "withdrawn", "1) keep this one (yours)")
    assert chat.everything().count("drop this one (yours)") == 1  # only the first list
    chat.send("/steer also this\r")
    see(chat, "you> also this")
    assert len(scripted_model.requests) == 1  # the model still hangs on the first call
    chat.send("\x03")
    see(chat, "[cancelled]")


def test_ctrl_c_cancels_and_the_held_prompts_come_back_to_the_history(
    served, attach, scripted_model
):
    chat = busy_chat(served, attach, scripted_model)
    chat.send("held back\r")
    on_screen(chat, "queued (1)")
    chat.send("\x03")
    see(chat, "cancelling", "not sent", "held back", "[cancelled]")
    prompt(chat)
    chat.send("\x1b[A")  # Up: the held prompt first
    on_screen(chat, "you> held back")
    chat.send("\r")
    see(chat, "[cancelled]", "you> held back", "asked again")
    assert [user_text(r) for r in scripted_model.requests[1:]] == ["held back"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_killed_server_is_reconnected_and_the_typed_prompt_kept(
    crow_home, attach, scripted_model
):
    """kill -9 of crow serve --http mid-turn, a prompt typed while it is gone, the same
    port and home again: the chat reconnects with backoff, catches up after its cursor
    (the killed turn's closing, logged by the new server, shows; nothing seen before
    shows twice), and sends what was typed."""
    extra = "[tools]\nbuiltin = []\n"
    write_config(crow_home, scripted_model.base_url, extra=extra, timeout_s=120)
    scripted_model.script(Text(text="before the restart"), Hang(), Text(text="kept and answered"))
    port = free_port()
    server = HttpServer(bind=f"127.0.0.1:{port}")
    chat = attach(server.bare_url)  # the token from the runtime file, read again later
    session_of(chat)
    chat.send("first\r")
    see(chat, "before the restart")
    prompt(chat)
    chat.send("cut short\r")
    scripted_model.wait_for_requests(2, timeout=TIMEOUT)
    server.process.kill()
    server.stop()
    on_screen(chat, "reconnecting")
    chat.send("typed while it was down\r")
    on_screen(chat, "typed while it was down (sent once connected)")
    server = HttpServer(bind=f"127.0.0.1:{port}")
    try:
        see(chat, "you> cut short", "interrupted", "reconnected after", "caught up")
        see(chat, "caught up", "you> typed while it was down", "kept and answered")
        prompt(chat)
    finally:
        server.stop()
    assert [user_text(r) for r in scripted_model.requests] == [
        "first",
        "cut short",
        "typed while it was down",
    ]
    assert chat.everything().count("before the restart") == 1
    assert chat.everything().count("you> cut short") == 1


def test_the_judge_follow_up_prompts_show_as_the_judges(terminals, crow_home, scripted_model):
    from test_verify import FAIL, PASS

    extra = '[tools]\nbuiltin = ["fs"]\n\n[judge]\nmax_rounds = 2\n'
    write_config(crow_home, scripted_model.base_url, extra=extra)
    scripted_model.script(Text(text="done, I think"), FAIL, Text(text="now it is written"), PASS)
    chat = terminals("chat", "--verify")
    prompt(chat)
    chat.send("write hello.txt\r")
    see(chat, "you> write hello.txt", "done, I think", "✗ judge: nothing was written")
    see(chat, "✗ judge", "judge> ", "now it is written", "✓ verified: hello.txt holds hello")
    assert chat.everything().count("you> ") == 1  # the follow-up is not shown as yours


def test_an_unknown_verdict_is_explained_in_one_line(terminals, crow_home, scripted_model):
    write_config(crow_home, scripted_model.base_url, extra='[tools]\nbuiltin = ["fs"]\n')
    scripted_model.script(Text(text="all done"), Text(text="Hard to say."))
    chat = terminals("chat", "--verify", cols=240)  # the line unwrapped
    prompt(chat)
    chat.send("fix it\r")
    see(chat, "? judge: Hard to say.", "the judge gave no verdict")
    [line] = [row for row in chat.everything().splitlines() if "gave no verdict" in row]
    assert "--check" in line


def test_crow_run_url_waits_in_the_queue_or_refuses_with_no_wait(
    served, attach, scripted_model, crow_home
):
    import subprocess
    import sys

    scripted_model.script(Slow("the long turn", chunks=10, delay_s=0.3), Text(text="my turn"))
    chat = attach(served.url)
    session_id = session_of(chat)
    chat.send("a long one\r")
    scripted_model.wait_for_requests(1, timeout=TIMEOUT)
    run = [sys.executable, "-m", "crow", "run", "--url", served.url, "--session", session_id]
    run += ["--cwd", str(crow_home.parent)]  # the session's (the chat's) directory
    refused = subprocess.run(
        [*run, "--no-wait", "not now"], capture_output=True, text=True, timeout=60
    )
    assert refused.returncode == 11, refused.stderr
    assert "busy" in refused.stderr and "--no-wait" in refused.stderr
    waited = subprocess.run([*run, "after it"], capture_output=True, text=True, timeout=60)
    assert waited.returncode == 0, waited.stderr
    assert waited.stdout == "my turn\n"
    assert [user_text(r) for r in scripted_model.requests] == ["a long one", "after it"]
    see(chat, "you> a long one", "the long turn", "them> after it", "my turn")


def test_crow_run_url_says_how_to_resume_when_the_server_goes(crow_home, scripted_model):
    import subprocess
    import sys

    write_config(crow_home, scripted_model.base_url, extra="[tools]\nbuiltin = []\n", timeout_s=60)
    scripted_model.script(Hang())
    server = HttpServer()
    run = subprocess.Popen(
        [sys.executable, "-m", "crow", "run", "--url", server.url, "wait for it"],
        stderr=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        scripted_model.wait_for_requests(1, timeout=TIMEOUT)
        server.process.kill()
        _, err = run.communicate(timeout=60)
    finally:
        run.kill()
        run.communicate()
        server.stop()
    assert run.returncode == 7, err
    [line] = [line for line in err.splitlines() if "crow chat" in line]
    found = re.search(r"crow chat --url (\S+) --session (sess_\w+)", line)
    assert found and found.group(1) == server.bare_url, line
    assert "token" not in line
