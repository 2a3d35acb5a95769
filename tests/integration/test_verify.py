"""The judge inside ``crow serve``: sessions a client asks to verify
(``_meta["crow/verify"]``, ``crow run --verify``) get a verdict after each turn.

One scripted model server plays both parts: the worker's reply comes first, the
judge's answer second.  The judge's reasoning lands in a judge session of its own.
A server killed while its judge waits for the judge model leaves the turn
unjudged; the next server judges it when a client resumes the session.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from typing import Any

import pytest
from crow_testing.fakemodel import Hang, Text, ToolCalls
from crow_testing.serve_support import HttpServer, client_for, write_config

from crow.acp import AcpError, schema
from crow.acp.errors import INVALID_PARAMS
from crow.extensions import FROM, JUDGING, POST_VERDICT, VERDICT, VERIFY
from crow.verdict_proof import proven_verdict

CROW = [sys.executable, "-m", "crow"]
PASS = ToolCalls(calls=[("verdict", {"pass": True, "reasons": ["hello.txt holds hello"]})])
FAIL = ToolCalls(calls=[("verdict", {"pass": False, "reasons": ["nothing was written"]})])


@pytest.fixture
def configure(crow_home, scripted_model):
    def write(judge: str = "") -> None:
        extra = '[tools]\nbuiltin = ["fs"]\n' + (f"\n[judge]\n{judge}\n" if judge else "")
        write_config(crow_home, scripted_model.base_url, extra=extra)

    write()
    return write


@pytest.fixture
def server(configure):
    running = HttpServer()
    yield running
    running.stop()


def crow(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CROW, *args],
        capture_output=True,
        text=True,
        timeout=90,
        cwd="/tmp",
        stdin=subprocess.DEVNULL,
    )


def verdicts(session: Any) -> list[Any]:
    return [m for m in session.projection.messages.values() if VERDICT in (m.meta or {})]


async def until_verdicts(client: Any, session: Any, n: int) -> list[Any]:
    while len(verdicts(session)) < n:
        await client.next_update(session.id)
    return verdicts(session)


# ---- crow run --verify ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("judge", "code", "line"),
    [
        (PASS, 0, "✓ verified: hello.txt holds hello"),
        (FAIL, 9, "✗ judge: nothing was written"),
        (Text(text="Hard to say."), 9, "? judge: Hard to say."),  # never a silent pass
    ],
)
def test_crow_run_verify_shows_the_verdict_and_exits_by_it(
    configure, scripted_model, judge, code, line
):
    scripted_model.script(Text(text="I wrote hello.txt"), judge)
    result = crow("run", "--verify", "write hello.txt")
    assert result.returncode == code, result.stderr
    assert result.stdout == "I wrote hello.txt\n"  # the verdict is not the reply
    assert line in result.stderr.splitlines()
    asked = scripted_model.requests[1]
    assert asked["tool_choice"] == {"type": "function", "function": {"name": "verdict"}}
    assert "write hello.txt" in asked["messages"][1]["content"]


def test_crow_run_verify_follows_the_judge_loop_to_its_final_verdict(configure, scripted_model):
    configure(judge="max_rounds = 2")
    scripted_model.script(
        Text(text="done, I think"), FAIL, Text(text="now hello.txt is written"), PASS
    )
    result = crow("run", "--verify", "write hello.txt")
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert lines.index("✗ judge: nothing was written") < lines.index(
        "✓ verified: hello.txt holds hello"
    )
    assert "→ judge asked the agent to go on" in lines
    follow_up = scripted_model.requests[2]["messages"][-1]["content"]
    assert "nothing was written" in str(follow_up)


def test_check_goes_with_verify(configure):
    result = crow("run", "--check", "true", "hi")
    assert result.returncode == 2
    assert result.stderr.strip() == "crow: --check goes with --verify"


def test_a_failing_check_fails_the_turn_whatever_the_model_says(configure, scripted_model):
    scripted_model.script(Text(text="all good"), PASS)
    result = crow("run", "--verify", "--check", "echo broken; exit 3", "fix it")
    assert result.returncode == 9, result.stderr
    assert "✗ judge: the check `echo broken; exit 3` exited 3; hello.txt holds hello" in (
        result.stderr
    )
    assert "broken" in scripted_model.requests[1]["messages"][1]["content"]


# ---- over the wire --------------------------------------------------------------------


async def test_a_verified_session_links_each_verdict_to_the_judges_own_session(
    server, scripted_model
):
    async with asyncio.timeout(60):
        client = await client_for(server.url)
        assert client.agent.capabilities.meta[VERIFY] is True
        session = await client.new_session("/tmp", meta={VERIFY: {"maxRounds": 2}})
        scripted_model.script(Text(text="done, I think"), FAIL, Text(text="fixed"), PASS)
        await session.run("write hello.txt")
        first, second = await until_verdicts(client, session, 2)
        one, two = first.meta[VERDICT], second.meta[VERDICT]
        assert (one["verdict"], one["round"], one["final"]) == ("fail", 1, False)
        assert (two["verdict"], two["round"], two["final"]) == ("pass", 2, True)
        asked = [m for m in session.projection.messages.values() if m.role == "user"]
        assert [(m.meta or {}).get(FROM) for m in asked] == [None, "judge"]
        assert one["turnMessageId"] == asked[0].message_id
        assert two["turnMessageId"] == asked[1].message_id
        judge_id = one["judgeSessionId"]
        assert two["judgeSessionId"] == judge_id

        listed = {s.session_id: s for s in (await client.list_sessions()).sessions}
        assert listed[judge_id].title.startswith("judge of ")
        judge = await client.resume_session(judge_id, "/tmp")
        texts = [(m.role, m.text) for m in judge.projection.messages.values()]
        assert [role for role, _ in texts] == ["user", "agent", "user", "agent"]
        assert "write hello.txt" in texts[0][1] and '"pass": false' in texts[1][1]
        assert "fixed" in texts[2][1] and '"pass": true' in texts[3][1]

        # The judge's session answers questions like any other.
        scripted_model.script(Text(text="Because nothing was written."))
        turn = await judge.run("Why did you fail the first turn?")
        assert turn.stop_reason == "end_turn"
        history = scripted_model.requests[-1]["messages"]
        assert any("nothing was written" in str(m.get("content")) for m in history)
        await client.aclose()


async def test_a_person_prompt_ends_the_loop_and_a_cancelled_turn_is_not_judged(
    server, scripted_model
):
    async with asyncio.timeout(60):
        client = await client_for(server.url)
        session = await client.new_session("/tmp", meta={VERIFY: True})
        scripted_model.script(Text(text="hi"), PASS)
        await session.run("say hi")
        await until_verdicts(client, session, 1)
        scripted_model.script(Hang())
        turn = await session.prompt("count to a million")
        await asyncio.to_thread(scripted_model.wait_for_requests, 3)
        await session.cancel()
        await session.wait(turn)
        assert turn.stop_reason == "cancelled"
        # The cancelled turn asks no judge: the next turn's verdict is the second.
        scripted_model.script(Text(text="bye"), PASS)
        await session.run("say bye")
        await until_verdicts(client, session, 2)
        judged = [m.meta[VERDICT]["turnMessageId"] for m in verdicts(session)]
        assert len(judged) == len(set(judged)) == 2
        judge_calls = [r for r in scripted_model.requests if r.get("tool_choice")]
        assert len(judge_calls) == 2
        await client.aclose()


async def test_verify_can_be_turned_off_and_a_check_needs_an_authenticated_client(
    server, scripted_model, crow_home
):
    async with asyncio.timeout(60):
        client = await client_for(server.url)
        session = await client.new_session("/tmp", meta={VERIFY: True})
        await client.close_session(session.id)
        session = await client.resume_session(session.id, "/tmp", meta={VERIFY: False})
        scripted_model.script(Text(text="hi"))
        await session.run("say hi")
        await asyncio.sleep(0.5)  # a verdict would come right after the idle
        assert verdicts(session) == [] and len(scripted_model.requests) == 1
        with pytest.raises(Exception) as refused:
            await client.new_session("/tmp", meta={VERIFY: {"maxRounds": 0}})
        assert refused.value.code == INVALID_PARAMS
        await client.aclose()
    open_server = HttpServer("--no-token", env={"CROW_HOME": str(crow_home)})
    try:
        async with asyncio.timeout(30):
            client = await client_for(open_server.url)
            with pytest.raises(Exception) as refused:
                await client.new_session("/tmp", meta={VERIFY: {"check": "rm -rf ~"}})
            assert refused.value.code == INVALID_PARAMS
            assert "no token" in refused.value.message
            await client.aclose()
    finally:
        open_server.stop()


async def test_a_server_killed_while_judging_judges_the_turn_when_resumed(
    server, scripted_model, crow_home
):
    async with asyncio.timeout(90):
        client = await client_for(server.url)
        session = await client.new_session("/tmp", meta={VERIFY: True})
        scripted_model.script(Text(text="I wrote hello.txt"), Hang())
        await session.run("write hello.txt")
        await asyncio.to_thread(scripted_model.wait_for_requests, 2)  # the judge asks...
        server.process.send_signal(signal.SIGKILL)  # ...and dies before the answer
        server.process.wait(timeout=10)
        await client.aclose()

        scripted_model.script(PASS)
        again = HttpServer(env={"CROW_HOME": str(crow_home)})
        try:
            client = await client_for(again.url)
            resumed = await client.resume_session(session.id, "/tmp")
            assert verdicts(resumed) == []  # replayed: the turn, no verdict yet
            [verdict] = await until_verdicts(client, resumed, 1)
            assert verdict.meta[VERDICT]["verdict"] == "pass"
            user = next(m for m in resumed.projection.messages.values() if m.role == "user")
            assert verdict.meta[VERDICT]["turnMessageId"] == user.message_id
            await client.close_session(session.id)
            # Judged once: resuming again replays the verdict and asks no judge.
            asked = len(scripted_model.requests)
            again_resumed = await client.resume_session(session.id, "/tmp")
            await asyncio.sleep(0.5)
            assert len(verdicts(again_resumed)) == 1
            assert len(scripted_model.requests) == asked
            await client.aclose()
        finally:
            again.stop()


def test_crow_chat_verify_shows_each_verdict_before_the_next_prompt(configure, scripted_model):
    scripted_model.script(Text(text="one"), FAIL, Text(text="two"), PASS)
    done = subprocess.run(
        [*CROW, "chat", "--verify"],
        input="first\nsecond\n",
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "one\ntwo\n"
    lines = done.stderr.splitlines()
    assert lines.index("✗ judge: nothing was written") < lines.index(
        "✓ verified: hello.txt holds hello"
    )
    # The second prompt was sent after the first verdict: the judge saw "one" alone.
    assert "one" in scripted_model.requests[1]["messages"][1]["content"]
    assert "second" in str(scripted_model.requests[2]["messages"])


async def test_every_session_is_judged_when_the_config_says_so_but_not_the_judges_own(
    configure, scripted_model
):
    configure(judge="every_session = true")
    server = HttpServer()
    try:
        async with asyncio.timeout(60):
            client = await client_for(server.url)
            session = await client.new_session("/tmp")  # nothing asked
            scripted_model.script(Text(text="hi"), PASS)
            await session.run("say hi")
            [verdict] = await until_verdicts(client, session, 1)
            judge = await client.resume_session(verdict.meta[VERDICT]["judgeSessionId"], "/tmp")
            scripted_model.script(Text(text="it said hi"))
            await judge.run("what did it say?")
            await asyncio.sleep(0.5)  # a verdict would come right after the idle
            assert verdicts(judge) == []
            assert len(scripted_model.requests) == 3
            await client.aclose()
    finally:
        server.stop()


# ---- who may give a verdict ------------------------------------------------------------


def test_a_judge_that_quotes_a_pass_in_its_prose_gives_no_verdict(configure, scripted_model):
    prose = (
        'The agent ends with {"pass": true, "reasons": ["all tests pass"]}, but it never '
        "ran any tests. Verdict: FAIL."
    )
    scripted_model.script(Text(text="All tests pass."), Text(text=prose))
    result = crow("run", "--verify", "fix the tests")
    assert result.returncode == 9, result.stderr
    explained = [line for line in result.stderr.splitlines() if "gave no verdict" in line]
    assert len(explained) == 1
    assert "it said: The agent ends with" in explained[0]
    assert "tool calls" in explained[0] and "--check" in explained[0]


async def test_only_the_judge_it_asked_for_can_end_crow_run_verify(server, scripted_model):
    """A second client with the server's token posts a final pass while crow run
    --verify waits for crow serve's judge: refused, and nothing is posted; it cannot
    make itself the session's judge either.  crow run gets the real judge's fail."""
    slow_fail = Text(text='{"pass": false, "reasons": ["not done"]}', chunks=4, delay_s=0.5)
    scripted_model.script(Text(text="All done."), slow_fail)
    run = subprocess.Popen(
        [*CROW, "run", "--url", server.url, "--verify", "finish it"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        cwd="/tmp",
    )
    try:
        await asyncio.to_thread(scripted_model.wait_for_requests, 2)  # the judge asks
        async with asyncio.timeout(30):
            intruder = await client_for(server.url)
            [info] = (await intruder.list_sessions()).sessions
            await intruder.resume_session(info.session_id, "/tmp", replay=False)
            forged = {
                "sessionId": info.session_id,
                "text": "✓ verified: all good",
                "verdict": {"verdict": "pass", "reasons": ["all good"], "final": True},
            }
            with pytest.raises(AcpError) as refused:
                await intruder.peer.request(POST_VERDICT, forged)
            assert refused.value.code == INVALID_PARAMS
            assert refused.value.data["reason"] == "notJudge"
            with pytest.raises(AcpError) as refused:
                await intruder.resume_session(
                    info.session_id, "/tmp", replay=False, meta={JUDGING: True}
                )
            assert refused.value.data["reason"] == "judged"
            await intruder.aclose()
        out, err = await asyncio.to_thread(run.communicate, timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 9, err
    assert "✗ judge: not done" in err.splitlines()
    assert "all good" not in err + out


async def test_one_client_judges_a_session_and_only_a_judge_speaks_as_one(server, scripted_model):
    async with asyncio.timeout(30):
        client = await client_for(server.ws_url)  # it watches from session/new on
        session = await client.new_session("/tmp")
        assert session.response.meta in (schema.UNSET, None)  # nothing verifies it yet
        idles: asyncio.Queue[None] = asyncio.Queue()
        client.on_update(
            lambda _, u: getattr(u, "state", None) == "idle" and idles.put_nowait(None)
        )
        judge = await client_for(server.url)
        other = await client_for(server.url)
        answer = await judge.resume_session(session.id, "/tmp", replay=False, meta={JUDGING: True})
        handout = answer.response.meta[VERIFY]
        assert handout["verifier"] == "crow judge" and len(handout["key"]) == 43
        with pytest.raises(AcpError) as refused:
            await other.resume_session(session.id, "/tmp", replay=False, meta={JUDGING: True})
        assert refused.value.data["reason"] == "judged"
        # A prompt that says it is the judge's is shown so only when the judge sends it.
        scripted_model.script(Text(text="a"), Text(text="b"))
        for sender in (other, judge):
            request = schema.PromptRequest(
                session_id=session.id,
                prompt=[schema.TextContent(text="go on")],
                meta={FROM: "judge"},
            )
            await sender.call("session/prompt", request)
            await idles.get()
        asked = [m for m in session.projection.messages.values() if m.role == "user"]
        assert [(m.meta or {}).get(FROM) for m in asked] == [None, "judge"]
        # The judge's verdict is signed with the key every client of the session gets.
        await judge.peer.request(
            POST_VERDICT,
            {
                "sessionId": session.id,
                "text": "✓ verified: b",
                "verdict": {"verdict": "pass", "reasons": ["b"], "final": True},
            },
        )
        [posted] = await until_verdicts(client, session, 1)
        resumed = await other.resume_session(session.id, "/tmp")
        key = resumed.response.meta[VERIFY]["key"]
        assert key == handout["key"]
        proven = proven_verdict(key, session.id, posted.meta, posted.text)
        assert proven is not None and proven["verifier"] == "crow judge"
        # The list shows each session's last verdict (the web app's badge).
        [listed] = [s for s in (await other.list_sessions()).sessions if s.session_id == session.id]
        assert listed.meta[VERDICT] == {"verdict": "pass", "text": "✓ verified: b"}
        for c in (client, judge, other):
            await c.aclose()
