"""``crow sessions``: the list (from the store itself, or through an agent), the
transcript of one, prefixes, judge sessions and the one exit code for "no such"."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from datetime import datetime

import pytest
from crow_testing.fakemodel import Error, Hang, Text
from crow_testing.serve_support import write_config

from crow.store.db import SqliteStore

CROW = [sys.executable, "-m", "crow"]
THROUGH_AN_AGENT = ["--command", f"{sys.executable} -m crow serve"]


def crow(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CROW, *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd="/tmp",
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture
def stored(crow_home, scripted_model):
    """A store with 40 sessions (newest last made), every tenth a judge session."""
    write_config(crow_home, scripted_model.base_url)
    store = SqliteStore(crow_home / "crow.db")
    for n in range(40):
        config = {"judgeOf": f"sess_{n - 1:04d}aaaa"} if n % 10 == 9 else {}
        store.create_session(
            session_id=f"sess_{n:04d}aaaa",
            cwd="/tmp",
            now=f"2026-12-01T10:00:{n:02d}.123Z",
            config=config,
        )
        store.update_session(f"sess_{n:04d}aaaa", title=f"topic {n}")
    store.close()
    return [f"sess_{n:04d}aaaa" for n in reversed(range(40))]  # newest first


@pytest.mark.parametrize("through", [[], THROUGH_AN_AGENT], ids=["store", "agent"])
def test_the_list_hides_judge_sessions_and_shows_the_newest_in_local_time(stored, through):
    listed = crow("sessions", *through)
    assert listed.returncode == 0, listed.stderr
    header, *rows = listed.stdout.splitlines()
    assert header.split() == ["ID", "UPDATED", "CWD", "TITLE"]
    people = [s for s in stored if int(s[5:9]) % 10 != 9]
    assert [row.split()[0] for row in rows] == people[:30]  # 30 by default, newest first
    when = datetime.fromisoformat("2026-12-01T10:00:38+00:00").astimezone()
    assert rows[0].split()[1:3] == when.strftime("%Y-%m-%d %H:%M").split()  # no seconds
    assert rows[0].endswith("topic 38")
    assert "crow: 6 older not shown" in listed.stderr
    assert "crow: 4 judge sessions not shown (--all shows them)" in listed.stderr
    everything = crow("sessions", "--all", "--limit", "0", "--json", *through)
    lines = [json.loads(line) for line in everything.stdout.splitlines()]
    assert [line["sessionId"] for line in lines] == stored
    assert lines[0] == {
        "sessionId": "sess_0039aaaa",
        "updatedAt": "2026-12-01T10:00:39.123Z",
        "cwd": "/tmp",
        "title": "topic 39",
        "judgeOf": "sess_0038aaaa",
    }
    assert len(crow("sessions", "--limit", "3", *through).stdout.splitlines()) == 4


def test_a_fresh_home_has_no_sessions_and_no_store_is_made(crow_home, scripted_model):
    write_config(crow_home, scripted_model.base_url)
    listed = crow("sessions")
    assert listed.returncode == 0 and listed.stdout == ""
    assert listed.stderr == "no sessions\n"
    assert not (crow_home / "crow.db").exists()


def test_ids_by_prefix_and_one_code_for_no_such_session(stored):
    shown = crow("sessions", "show", "0012")  # sess_0012aaaa
    assert shown.returncode == 0, shown.stderr
    ambiguous = crow("sessions", "show", "sess_001")
    assert ambiguous.returncode == 2
    assert ambiguous.stderr.startswith("crow: 10 sessions start with sess_001 (")
    assert ambiguous.stderr.count("\n") == 1
    for args in (["sessions", "show", "nope"], ["sessions", "delete", "nope"]):
        missing = crow(*args)
        assert (missing.returncode, missing.stderr) == (
            10,
            "crow: no session nope (crow sessions lists them)\n",
        )
    run = crow("run", "--session", "nope", "hi")
    assert run.returncode == 10 and "crow: no session nope" in run.stderr
    assert crow("run", "--session", "sess_00", "hi").returncode == 2
    chat = crow("chat", "--session", "nope")
    assert chat.returncode == 10 and "crow: no session nope" in chat.stderr
    assert crow("chat", "--session", "sess_00").returncode == 2
    resumed = crow("chat", "--session", "0017aa")  # stdin is empty: it resumes, then leaves
    assert resumed.returncode == 0 and "crow: session sess_0017aaaa" in resumed.stderr
    assert crow("sessions", "delete", "0012aa").returncode == 0
    assert "sess_0012aaaa" not in crow("sessions", "--limit", "0").stdout


def test_show_says_how_turns_ended(crow_home, scripted_model):
    write_config(crow_home, scripted_model.base_url, retry_attempts=1)
    scripted_model.script(Error(status=400, message="bad request body"))
    failed = crow("run", "--json", "first")
    session = json.loads(failed.stdout.splitlines()[-1])["sessionId"]
    scripted_model.script(Hang())
    cancelled = subprocess.Popen(
        [*CROW, "run", "--session", session[:12], "second"],
        cwd="/tmp",
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
    )
    with cancelled:
        scripted_model.wait_for_requests(2)
        cancelled.send_signal(signal.SIGINT)  # crow run's Ctrl-C: cancel the turn
        assert cancelled.wait(timeout=20) == 5
    scripted_model.script(Text(text="third answer"))
    assert crow("run", "--session", session, "third").returncode == 0
    shown = crow("sessions", "show", session)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines() == [
        "you> first",
        "crow: The model failed: main: 400 bad request body",  # the agent's note
        "[error]",
        "you> second",
        "[cancelled]",
        "you> third",
        "third answer",
    ]


def test_a_long_store_lists_its_newest_without_reading_the_rest(crow_home, scripted_model):
    """Over a page of sessions: the newest 30 are read and shown, the older ones said
    to exist (not counted: that would read them all); --limit 0 still lists every one."""
    write_config(crow_home, scripted_model.base_url)
    store = SqliteStore(crow_home / "crow.db")
    for n in range(200):
        stamp = f"2026-12-01T10:{n // 60:02d}:{n % 60:02d}.000Z"
        store.create_session(session_id=f"sess_{n:04d}bbbb", cwd="/tmp", now=stamp)
    store.close()
    listed = crow("sessions")
    assert listed.returncode == 0, listed.stderr
    rows = listed.stdout.splitlines()[1:]
    assert [row.split()[0] for row in rows] == [f"sess_{n:04d}bbbb" for n in range(199, 169, -1)]
    assert "crow: older not shown (--limit N shows N, --limit 0 all)" in listed.stderr
    everything = crow("sessions", "--limit", "0", "--json")
    assert len(everything.stdout.splitlines()) == 200
