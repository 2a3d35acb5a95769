"""``crow judge`` attached over HTTP to a ``crow serve --http`` session that another
client drives: it wakes on the worker's idle, asks the judge model (the same
scripted server: the worker's reply comes first, the judge's answer second) and
posts the verdict, which the driving client sees live and in a replay.
"""

from __future__ import annotations

import asyncio
import select
import subprocess
import sys
from typing import Any

import pytest
from crow_testing.fakemodel import ScriptedModel, Slow, Text, ToolCalls
from crow_testing.serve_support import HttpServer, client_for, write_config

from crow.acp.errors import INVALID_PARAMS, RESOURCE_NOT_FOUND
from crow.extensions import POST_VERDICT, VERDICT
from crow.orchestra.judge import parse_verdict


@pytest.fixture
def server(crow_home, scripted_model):
    write_config(crow_home, scripted_model.base_url, extra='[tools]\nbuiltin = ["fs"]\n')
    running = HttpServer()
    yield running
    running.stop()


def start_judge(url: str, session_id: str, *options: str) -> subprocess.Popen[str]:
    command = ["judge", "--url", url, "--session", session_id, "--once", *options]
    judge = subprocess.Popen(
        [sys.executable, "-m", "crow", *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    assert judge.stderr is not None
    # The judge watches before the prompt is sent; one that never says so fails the
    # test (with what it printed) instead of hanging it.
    ready, _, _ = select.select([judge.stderr], [], [], 30)
    line = judge.stderr.readline() if ready else ""
    if "watching session" not in line:
        judge.kill()
        pytest.fail(f"the judge did not start watching: {line}{judge.stderr.read()}")
    return judge


def verdicts(session) -> list[Any]:
    return [m for m in session.projection.messages.values() if VERDICT in (m.meta or {})]


async def judged_turn(server, scripted_model, judge_reply, prompt="write hello.txt"):
    """A worker turn with the judge attached; returns (client, session, judge, output)."""
    client = await client_for(server.url)
    session = await client.new_session("/tmp")
    judge = await asyncio.to_thread(start_judge, server.url, session.id)
    scripted_model.script(Text(text="I wrote hello.txt"), judge_reply)
    turn = await session.run(prompt)
    assert turn.stop_reason == "end_turn"
    out, err = await asyncio.to_thread(judge.communicate, timeout=60)
    while not verdicts(session):  # the verdict comes after the worker's idle
        await client.next_update(session.id)
    return client, session, judge, out, err


@pytest.mark.parametrize(
    ("reply", "verdict", "code", "line"),
    [
        (
            ToolCalls(calls=[("verdict", {"pass": True, "reasons": ["the file was written"]})]),
            "pass",
            0,
            "✓ verified: the file was written",
        ),
        (  # a model without tool calls: JSON in its text is read too
            Text(text='Verdict: {"pass": false, "reasons": ["no tool wrote a file"]}'),
            "fail",
            1,
            "✗ judge: no tool wrote a file",
        ),
        (  # never a silent pass
            Text(text="Looks plausible to me."),
            "unknown",
            3,
            "? judge: Looks plausible to me.",
        ),
    ],
)
async def test_the_judge_posts_its_verdict_into_the_worker_session(
    server, scripted_model, reply, verdict, code, line
):
    async with asyncio.timeout(90):
        client, session, judge, out, err = await judged_turn(server, scripted_model, reply)
        assert judge.returncode == code, err
        assert out.strip() == line
        [posted] = verdicts(session)
        assert posted.text == line and posted.role == "agent"
        meta = posted.meta[VERDICT]
        assert meta["verdict"] == verdict and meta["judgeModel"] == "main"
        user = next(m for m in session.projection.messages.values() if m.role == "user")
        assert meta["turnMessageId"] == user.message_id
        asked = scripted_model.requests[-1]
        assert asked["tool_choice"] == {"type": "function", "function": {"name": "verdict"}}
        assert [t["function"]["name"] for t in asked["tools"]] == ["verdict"]
        shown = asked["messages"][1]["content"]
        assert "write hello.txt" in shown and "I wrote hello.txt" in shown
        replayed = await client.resume_session(session.id, "/tmp")
        assert [m.text for m in verdicts(replayed)] == [line]
        await client.aclose()


async def test_a_verdict_for_a_session_that_is_not_there_or_malformed_is_refused(server):
    async with asyncio.timeout(30):
        client = await client_for(server.url)
        session = await client.new_session("/tmp")
        good = {"verdict": "pass", "reasons": []}
        cases = [
            ({"sessionId": "sess_nope", "text": "x", "verdict": good}, RESOURCE_NOT_FOUND),
            ({"sessionId": session.id, "text": "", "verdict": good}, INVALID_PARAMS),
            (
                {"sessionId": session.id, "text": "x", "verdict": {"verdict": "great"}},
                INVALID_PARAMS,
            ),
            ({"sessionId": session.id, "text": "x" * 2001, "verdict": good}, INVALID_PARAMS),
        ]
        for params, code in cases:
            with pytest.raises(Exception) as info:
                await client.peer.request(POST_VERDICT, params)
            assert getattr(info.value, "code", None) == code, (params, info.value)
        assert verdicts(session) == []
        await client.aclose()


@pytest.mark.parametrize(
    ("calls", "text", "expected"),
    [
        (
            [{"name": "verdict", "arguments": '{"pass": true, "reasons": "ok"}'}],
            "",
            ("pass", ("ok",)),
        ),
        ([{"name": "verdict", "arguments": '{"pass": "yes"}'}], "", ("unknown", ())),
        ([{"name": "other", "arguments": '{"pass": true}'}], "", ("unknown", ())),
        ([], '```json\n{"pass": false, "reasons": ["a", "b"]}\n```', ("fail", ("a", "b"))),
        ([], "", ("unknown", ())),
    ],
)
def test_parse_verdict(calls, text, expected):
    found = parse_verdict(calls, text)
    assert (found.verdict, found.reasons) == expected
    if found.verdict == "unknown":
        assert found.raw  # what the judge said is kept, never dropped


# ---- the loop: a judge model of its own, so the two scripts cannot interleave ----------


@pytest.fixture
def judge_model():
    with ScriptedModel() as model:
        yield model


@pytest.fixture
def loop_server(crow_home, scripted_model, judge_model):
    judge = f'[providers.judging]\nbase_url = "{judge_model.base_url}"\n\n'
    judge += '[models.judge]\nprovider = "judging"\nid = "judge-model"\n'
    write_config(crow_home, scripted_model.base_url, extra=f"[tools]\nbuiltin = []\n\n{judge}")
    running = HttpServer()
    yield running
    running.stop()


def fail(*reasons):
    return ToolCalls(calls=[("verdict", {"pass": False, "reasons": list(reasons)})])


def passes(*reasons):
    return ToolCalls(calls=[("verdict", {"pass": True, "reasons": list(reasons)})])


async def loop(server, cwd, *options, worker=(), judge=(), models=()):
    """One person's prompt with the judge in the loop; returns (session, judge, out)."""
    worker_model, judge_model = models
    worker_model.script(*worker)
    judge_model.script(*judge)
    client = await client_for(server.url)
    session = await client.new_session(cwd)
    process = await asyncio.to_thread(
        start_judge, server.url, session.id, "--model", "judge", *options
    )
    await session.run("write hello.txt")
    out, err = await asyncio.to_thread(process.communicate, timeout=60)
    expected = out.count("\n")
    while len(verdicts(session)) < expected:
        await client.next_update(session.id)
    return client, session, process, out, err


def judge_prompts(session):
    return [
        m.text
        for m in session.projection.messages.values()
        if m.role == "user" and (m.meta or {}).get("crow/from") == "judge"
    ]


async def test_fail_then_pass_after_the_follow_up(
    loop_server, scripted_model, judge_model, tmp_path
):
    async with asyncio.timeout(90):
        client, session, judge, out, err = await loop(
            loop_server,
            str(tmp_path),
            "--max-rounds",
            "3",
            worker=[Text(text="done"), Text(text="now with tests")],
            judge=[fail("no tests were added"), passes("tests added")],
            models=(scripted_model, judge_model),
        )
        assert judge.returncode == 0, err
        assert out.splitlines() == ["✗ judge: no tests were added", "✓ verified: tests added"]
        [follow_up] = judge_prompts(session)
        assert "no tests were added" in follow_up
        assert [v.meta[VERDICT]["verdict"] for v in verdicts(session)] == ["fail", "pass"]
        assert len(scripted_model.requests) == 2 and len(judge_model.requests) == 2
        await client.aclose()


async def test_fail_until_max_rounds(loop_server, scripted_model, judge_model, tmp_path):
    async with asyncio.timeout(90):
        client, session, judge, out, err = await loop(
            loop_server,
            str(tmp_path),
            "--max-rounds",
            "2",
            worker=[Text(text="done"), Text(text="still broken")],
            judge=[fail("broken"), fail("still broken")],
            models=(scripted_model, judge_model),
        )
        assert judge.returncode == 1, err
        assert len(out.splitlines()) == 2 and len(judge_prompts(session)) == 1
        assert len(scripted_model.requests) == 2  # no third round
        await client.aclose()


async def test_a_failing_check_fails_the_turn_whatever_the_model_says(
    loop_server, scripted_model, judge_model, tmp_path
):
    async with asyncio.timeout(90):
        client, session, judge, out, err = await loop(
            loop_server,
            str(tmp_path),
            "--check",
            "test -f hello.txt",
            worker=[Text(text="I wrote hello.txt")],
            judge=[passes("the agent says it wrote the file")],
            models=(scripted_model, judge_model),
        )
        assert judge.returncode == 1, err
        assert out.startswith("✗ judge: the check `test -f hello.txt` exited 1")
        # Libraries' chatter never reaches the person: no request log, no warnings.
        assert "HTTP Request" not in err and "Warning" not in err, err
        [verdict] = verdicts(session)
        meta = verdict.meta[VERDICT]
        assert meta["verdict"] == "fail" and meta["checkExitCode"] == 1
        assert meta["reasons"][0] == "the check `test -f hello.txt` exited 1"
        shown = judge_model.requests[0]["messages"][1]["content"]
        assert "The check `test -f hello.txt` exited 1" in shown
        await client.aclose()


async def test_a_person_who_prompts_first_ends_the_loop(
    loop_server, scripted_model, judge_model, tmp_path
):
    """The judge's answer is slow; meanwhile a person prompts: the judge must not
    prompt the busy session, and the loop ends with the verdict it has."""
    async with asyncio.timeout(90):
        scripted_model.script(Text(text="done"), Slow("working on it", chunks=10, delay_s=0.3))
        judge_model.script(
            Text(text='{"pass": false, "reasons": ["broken"]}', chunks=5, delay_s=0.3)
        )
        client = await client_for(loop_server.url)
        session = await client.new_session(str(tmp_path))
        process = await asyncio.to_thread(
            start_judge, loop_server.url, session.id, "--model", "judge", "--max-rounds", "3"
        )
        await session.run("write hello.txt")
        person = await session.prompt("also write bye.txt")
        out, err = await asyncio.to_thread(process.communicate, timeout=60)
        await session.wait(person)
        assert process.returncode == 1, err
        assert out == "✗ judge: broken\n"
        assert judge_prompts(session) == []
        assert len(scripted_model.requests) == 2
        await client.aclose()


async def test_a_judge_started_again_with_pending_judges_the_turn_it_missed(
    loop_server, scripted_model, judge_model
):
    async with asyncio.timeout(90):
        client = await client_for(loop_server.url)
        session = await client.new_session("/tmp")
        scripted_model.script(Text(text="missed"))
        await session.run("write hello.txt")  # no judge watched this turn
        judge_model.script(passes("caught up"))
        judge = await asyncio.to_thread(
            start_judge, loop_server.url, session.id, "--model", "judge", "--pending"
        )
        out, err = await asyncio.to_thread(judge.communicate, timeout=60)
        assert judge.returncode == 0, err
        assert out.splitlines() == ["✓ verified: caught up"]
        [first] = await until_verdict_count(client, session, 1)
        user_ids = [m.message_id for m in session.projection.messages.values() if m.role == "user"]
        assert first.meta[VERDICT]["turnMessageId"] == user_ids[0]
        assert "missed" in judge_model.requests[0]["messages"][1]["content"]

        # Judged now: the next --pending judge leaves that turn alone and waits.
        judge_model.script(fail("not this time"))
        judge = await asyncio.to_thread(
            start_judge, loop_server.url, session.id, "--model", "judge", "--pending"
        )
        scripted_model.script(Text(text="second"))
        await session.run("and again")
        out, err = await asyncio.to_thread(judge.communicate, timeout=60)
        assert judge.returncode == 1, err
        _, second = await until_verdict_count(client, session, 2)
        user_ids = [m.message_id for m in session.projection.messages.values() if m.role == "user"]
        assert second.meta[VERDICT]["turnMessageId"] == user_ids[1]
        assert len(judge_model.requests) == 2
        await client.aclose()


async def until_verdict_count(client, session, n):
    while len(verdicts(session)) < n:
        await client.next_update(session.id)
    return verdicts(session)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"pass": true, "reasons": ["ok"]}', "pass"),  # the whole answer
        ('```\n{"pass": true, "reasons": ["ok"]}\n```', "pass"),
        # The worker's words quoted by the judge are never a pass.
        ('The agent says {"pass": true}, but it ran nothing. FAIL.', "unknown"),
        ('Verdict: {"pass": true, "reasons": ["ok"]}', "unknown"),
        ('It claimed {"pass": true}; my verdict: {"pass": false}', "unknown"),  # which one?
        ('Verdict: {"pass": false, "reasons": ["no file"]}', "fail"),  # a fail costs nothing
        ('{"pass": true}\n{"pass": true}', "unknown"),
    ],
)
def test_a_pass_is_read_only_from_the_judges_own_answer(text, expected):
    assert parse_verdict([], text).verdict == expected
