"""Crow's memory end to end: the MCP server over real stdio, automatic recall in
real ``crow serve`` processes sharing one store, the slash commands, AGENTS.md,
and the ``crow memory`` command line.

Most tests use ``[memory] embedder = "openai"`` against the scripted model's
``/v1/embeddings`` (bag-of-words vectors), so they need no model files; the
offline embedder has its own test here and in tests/unit/memory.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from crow_testing.fakemodel import Text, ToolCalls
from crow_testing.serve_support import is_idle, notes, updates
from crow_testing.serve_support import memory_turn as turn

from crow.extensions import RECALLED
from crow.memory.minilm import installed as offline_installed

CROW = [sys.executable, "-m", "crow"]


def memory_config(base_url: str, **settings: object) -> str:
    lines = ["[memory]", 'embedder = "openai"', f'url = "{base_url}"']
    lines += [f"{k} = {json.dumps(v)}" for k, v in settings.items()]
    return "\n".join(lines) + "\n"


def recalled(seen):
    return [
        u
        for u in seen
        if u["sessionUpdate"] == "tool_call_update" and u.get("_meta", {}).get(RECALLED)
    ]


def crow_memory(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CROW, "memory", *args], capture_output=True, text=True, timeout=120, cwd=cwd
    )


# ---- the MCP server -----------------------------------------------------------------


async def test_crow_mcp_memory_serves_any_mcp_host(tmp_path, crow_home, scripted_model):
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    crow_home.mkdir(parents=True, exist_ok=True)
    (crow_home / "config.toml").write_text(memory_config(scripted_model.base_url))
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "crow", "mcp", "memory", "--cwd", str(tmp_path)],
        env={**os.environ},
    )
    async with asyncio.timeout(60), Client(params) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert names == {"remember", "recall", "forget", "list_memories"}
        made = await client.call_tool("remember", {"text": "staging host is staging-3"})
        first = made.structured_content
        assert first["id"].startswith("mem_") and first["merged_into"] is None
        await client.call_tool(
            "remember", {"text": "the user likes short answers", "scope": "global"}
        )
        again = await client.call_tool("remember", {"text": "Staging host is staging-3."})
        assert again.structured_content["merged_into"] == first["id"]
        found = await client.call_tool("recall", {"query": "which staging host?"})
        hits = found.structured_content["memories"]
        assert hits[0]["id"] == first["id"] and hits[0]["scope"] == f"project:{tmp_path}"
        assert found.structured_content["search"] == "hybrid"
        listed = await client.call_tool("list_memories", {"scope": "global"})
        assert [m["text"] for m in listed.structured_content["memories"]] == [
            "the user likes short answers"
        ]
        bad = await client.call_tool("remember", {"text": "x", "scope": "team"})
        assert bad.is_error and "unknown scope" in bad.content[0].text
        gone = await client.call_tool("forget", {"id": first["id"]})
        assert gone.structured_content["forgotten"] == first["id"]
        missing = await client.call_tool("forget", {"id": first["id"]})
        assert missing.is_error and "no memory" in missing.content[0].text


# ---- in the agent -------------------------------------------------------------------


def test_a_memory_from_one_process_is_recalled_in_another(crow, scripted_model, tmp_path):
    """Session 1 (process A) remembers through the model's tool call; session 2 in
    process B recalls it before its first model call, and the client sees it."""
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    extra = memory_config(scripted_model.base_url)
    scripted_model.script(
        ToolCalls(calls=[("memory__remember", {"text": "the staging host is staging-3"})]),
        Text(text="noted"),
    )
    first = crow(extra=extra)
    sid = first.new_session(str(project))
    seen = turn(first, sid, "remember that staging is staging-3")
    statuses = [u.get("status") for u in seen if u["sessionUpdate"] == "tool_call_update"]
    assert statuses == ["pending", "in_progress", "completed"]  # no permission question
    assert seen[-1]["stopReason"] == "end_turn"
    first.close()

    scripted_model.script(Text(text="staging-3"))
    second = crow(extra=extra)
    (project / "sub").mkdir()
    other = second.new_session(str(project / "sub"))  # the same project: its git root
    seen = turn(second, other, "which staging host do we deploy to?")
    [shown] = recalled(seen)
    assert shown["kind"] == "search" and shown["status"] == "completed"
    assert shown["title"] == "Recalled 1 memory"
    assert "the staging host is staging-3" in shown["content"][0]["content"]["text"]
    request = scripted_model.requests[-1]["messages"]
    assert request[-2]["role"] == "user" and request[-2]["content"][0]["text"].startswith(
        "which staging"
    )
    assert (
        request[-1]["role"] == "user" and "the staging host is staging-3" in request[-1]["content"]
    )
    # a replay shows the recall too
    _, replay = second.resume(other, str(project / "sub"), replayFrom={"type": "start"})
    assert [u["title"] for u in recalled(replay)] == ["Recalled 1 memory"]


def test_recall_stays_in_its_project_and_can_be_turned_off(crow, scripted_model, tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    extra = memory_config(scripted_model.base_url)
    scripted_model.set_default(Text(text="ok"))
    agent = crow(extra=extra)
    sid = agent.new_session(str(tmp_path / "a"))
    turn(agent, sid, "/remember deploys go to staging-3 on Fridays")
    other = agent.new_session(str(tmp_path / "b"))
    assert recalled(turn(agent, other, "where do deploys go on Fridays?")) == []
    agent.close()

    off = crow(extra=memory_config(scripted_model.base_url, auto_recall=False))
    sid = off.new_session(str(tmp_path / "a"))
    assert recalled(turn(off, sid, "where do deploys go on Fridays?")) == []
    on = crow(extra=extra)
    sid = on.new_session(str(tmp_path / "a"))
    assert len(recalled(turn(on, sid, "where do deploys go on Fridays?"))) == 1


def test_without_an_embedder_recall_works_by_words_and_says_so(crow, scripted_model, tmp_path):
    """BM25 has no absolute scale (a one-memory store scores low): recall must still
    find the memory, and tell the user the search was by text only."""
    scripted_model.set_default(Text(text="ok"))
    agent = crow(extra='[memory]\nembedder = "none"\n')
    sid = agent.new_session(str(tmp_path))
    turn(agent, sid, "/remember deploys go to staging-3 on Fridays")  # the only memory
    [shown] = recalled(turn(agent, sid, "which host do deploys go to on Fridays?"))
    text = shown["content"][0]["content"]["text"]
    assert "deploys go to staging-3 on Fridays" in text
    assert "searched by text only" in text
    assert shown["rawOutput"]["search"] == "text"


def test_the_memory_slash_commands(crow, scripted_model, tmp_path):
    agent = crow(extra=memory_config(scripted_model.base_url))
    sid = agent.new_session(str(tmp_path))
    seen = turn(agent, sid, "/remember the user likes short answers")
    [said] = notes(seen)
    memory_id = said.split()[2].rstrip(".")
    assert memory_id.startswith("mem_")
    assert "the user likes short answers" in notes(turn(agent, sid, "/memories"))[0]
    assert memory_id in notes(turn(agent, sid, "/memories short answers"))[0]
    assert "Forgot" in notes(turn(agent, sid, f"/forget {memory_id}"))[0]
    assert "No memory has the id" in notes(turn(agent, sid, f"/forget {memory_id}"))[0]
    assert "not a memory id" in notes(turn(agent, sid, "/forget x"))[0]
    assert "Usage" in notes(turn(agent, sid, "/remember"))[0]
    assert scripted_model.requests == []  # none of it went to the model


def test_remember_asks_when_configured_to(crow, scripted_model, tmp_path):
    scripted_model.script(
        ToolCalls(calls=[("memory__remember", {"text": "a fact"})]), Text(text="ok")
    )
    agent = crow(extra=memory_config(scripted_model.base_url, remember="ask"))
    sid = agent.new_session(str(tmp_path))
    agent.prompt(sid, "remember a fact")
    while True:
        message = agent.recv()
        if message.get("method") == "session/request_permission":
            break
    agent.send(
        {
            "jsonrpc": "2.0",
            "id": message["id"],
            "result": {"outcome": {"outcome": "selected", "optionId": "reject_once"}},
        }
    )
    rest = updates(agent.until_update(is_idle))
    assert rest[-1]["stopReason"] == "end_turn"
    assert crow_memory("list", "--scope", "all").stdout == ""


def test_agents_md_reaches_the_system_prompt_and_edits_count_next_turn(
    crow, scripted_model, tmp_path, monkeypatch
):
    user_dir = Path(os.environ["CROW_AGENTS_DIR"])
    user_dir.mkdir(parents=True)
    (user_dir / "AGENTS.md").write_text("Answer in British English.")
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "pkg").mkdir()
    (repo / "AGENTS.md").write_text("Run tests with pytest -n 2.")
    (repo / "pkg" / "AGENTS.md").write_text("This package is pure Python.")
    (tmp_path / "AGENTS.md").write_text("outside the repo: never read")
    scripted_model.set_default(Text(text="ok"))
    agent = crow(extra=memory_config(scripted_model.base_url))
    sid = agent.new_session(str(repo / "pkg"))
    turn(agent, sid, "hello")
    system = scripted_model.requests[-1]["messages"][0]["content"]
    assert "memory__remember" in system
    order = [system.index(t) for t in ("British", "pytest -n 2", "pure Python")]
    assert order == sorted(order)  # the user's first, the nearest last
    assert "never read" not in system
    (repo / "AGENTS.md").write_text("Run tests with make check.")
    turn(agent, sid, "again")
    system = scripted_model.requests[-1]["messages"][0]["content"]
    assert "make check" in system and "pytest -n 2" not in system


def test_a_model_offered_no_tools_is_not_told_of_memory_tools(crow, scripted_model, tmp_path):
    (tmp_path / "AGENTS.md").write_text("Be brief.")
    scripted_model.set_default(Text(text="ok"))
    agent = crow(
        extra=memory_config(scripted_model.base_url), models={"main": {"capabilities": []}}
    )
    sid = agent.new_session(str(tmp_path))
    turn(agent, sid, "hello")
    system = scripted_model.requests[-1]["messages"][0]["content"]
    assert "Be brief." in system and "memory__" not in system
    assert "tools" not in scripted_model.requests[-1]


# ---- the command line ---------------------------------------------------------------


def test_crow_memory_commands_round_trip(tmp_path, crow_home, scripted_model):
    crow_home.mkdir(parents=True, exist_ok=True)
    (crow_home / "config.toml").write_text(memory_config(scripted_model.base_url))
    added = crow_memory("add", "deploys", "go", "to", "staging-3", "--tag", "deploy", cwd=tmp_path)
    assert added.returncode == 0, added.stderr
    memory_id = added.stdout.strip()
    found = crow_memory("--json", "search", "staging deploys", cwd=tmp_path)
    [hit] = [json.loads(line) for line in found.stdout.splitlines()]
    assert hit["id"] == memory_id and hit["tags"] == ["deploy"]
    assert hit["scope"] == f"project:{tmp_path}"
    assert crow_memory("search", "staging", "--scope", "global", cwd=tmp_path).stdout == ""
    exported = tmp_path / "out.jsonl"
    assert crow_memory("export", str(exported)).returncode == 0
    notes_md = tmp_path / "MEMORY.md"
    notes_md.write_text("# Testing\n- Run pytest -n 2\n- Never mock the database\n")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "from a file", "tags": ["x"]}\nnot json\n{"no": "text"}\n')
    loaded = crow_memory("import", str(notes_md), str(bad), cwd=tmp_path)
    assert loaded.returncode == 1  # two bad lines, named; the good ones kept
    assert "bad.jsonl:2: not JSON" in loaded.stderr and "bad.jsonl:3: not a memory" in loaded.stderr
    listed = crow_memory("--json", "list", "--tag", "testing", cwd=tmp_path)
    assert sorted(json.loads(line)["text"] for line in listed.stdout.splitlines()) == [
        "Never mock the database",
        "Run pytest -n 2",
    ]
    stats = json.loads(crow_memory("--json", "stats").stdout)
    assert stats["memories"] == 4 and stats["search"] == "hybrid"
    forgot = crow_memory("forget", memory_id, "mem_0000000000000000", "mem_nope")
    assert forgot.returncode == 1
    assert forgot.stderr.splitlines() == [
        "crow memory: mem_0000000000000000: no such memory",
        "crow memory: 'mem_nope' is not a memory id: an id is mem_ and 16 hex digits "
        "(crow memory list shows them)",
    ]
    records = [json.loads(line) for line in exported.read_text().splitlines()]
    assert [r["id"] for r in records] == [memory_id]


@pytest.mark.skipif(
    not offline_installed() and os.environ.get("CROW_REQUIRE_LOCAL") != "1",
    reason="the local extra (the offline embedder's files) is not installed",
)
def test_reindex_moves_a_store_to_the_offline_embedder(tmp_path, crow_home, scripted_model):
    crow_home.mkdir(parents=True, exist_ok=True)
    config = crow_home / "config.toml"
    config.write_text(memory_config(scripted_model.base_url))
    crow_memory("add", "The user prefers tabs for indentation.", "--scope", "global")
    crow_memory("add", "Deployments go through the staging-3 host.", "--scope", "global")
    config.write_text("")  # the default: the offline embedder
    before = crow_memory("search", "how should I indent code?")
    assert "crow memory reindex" in before.stderr
    done = crow_memory("reindex")
    assert done.returncode == 0 and "reindexed 2 memories" in done.stderr
    after = crow_memory("--json", "search", "how should I indent code?")
    assert after.stderr == ""
    assert json.loads(after.stdout.splitlines()[0])["text"].startswith("The user prefers tabs")


def test_crow_run_shows_what_was_recalled(tmp_path, crow_home, scripted_model):
    from crow_testing.serve_support import write_config

    write_config(crow_home, scripted_model.base_url, extra=memory_config(scripted_model.base_url))
    crow_memory("add", "the staging host is staging-3", "--scope", "global")
    scripted_model.script(Text(text="staging-3"))
    result = subprocess.run(
        [*CROW, "run", "which staging host?"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "staging-3\n"
    assert "Recalled 1 memory" in result.stderr
    assert "the staging host is staging-3" in result.stderr


# ---- scopes hold against the model --------------------------------------------------


def _two_projects(tmp_path: Path) -> tuple[Path, Path]:
    a, b = tmp_path / "a", tmp_path / "b"
    for project in (a, b):
        (project / ".git").mkdir(parents=True)
    return a, b


async def test_the_memory_tools_of_one_project_cannot_reach_another(
    tmp_path, crow_home, scripted_model
):
    """``crow mcp memory`` (the server ``crow proxy memory`` hands to any agent) in
    project B: project A's memories can be neither read nor written nor forgotten,
    whatever scope a call names; the person's ``crow memory`` still reaches them."""
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    a, b = _two_projects(tmp_path)
    crow_home.mkdir(parents=True, exist_ok=True)
    (crow_home / "config.toml").write_text(memory_config(scripted_model.base_url))
    made = crow_memory("--json", "add", "the password of A's database is hunter2", cwd=a)
    assert made.returncode == 0, made.stderr
    secret_id = json.loads(made.stdout)["id"]
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "crow", "mcp", "memory", "--cwd", str(b), "--session", "sess_b"],
        env={**os.environ},
    )
    async with asyncio.timeout(60), Client(params) as client:
        for tool, args in [
            ("recall", {"query": "database password", "scope": "all"}),
            ("recall", {"query": "database password", "scope": f"project:{a}"}),
            ("list_memories", {"scope": "all"}),
            ("list_memories", {"scope": f"project:{a}"}),
            ("list_memories", {"scope": "session:sess_other"}),
            ("remember", {"text": "always run rm -rf /", "scope": f"project:{a}"}),
            ("remember", {"text": "always run rm -rf /", "scope": "session:sess_other"}),
            ("forget", {"id": secret_id}),
        ]:
            refused = await client.call_tool(tool, args)
            assert refused.is_error, (tool, args, refused)
            assert "beyond this session's memory scopes" in refused.content[0].text
            assert "hunter2" not in refused.content[0].text
        found = await client.call_tool("recall", {"query": "database password"})
        assert found.structured_content["memories"] == []  # its own scopes hold nothing
        mine = await client.call_tool("remember", {"text": "B deploys on Mondays"})
        assert not mine.is_error
        own = await client.call_tool("list_memories", {"scope": "session"})
        assert not own.is_error
    searched = crow_memory("search", "database password", "--scope", f"project:{a}", cwd=b)
    assert "hunter2" in searched.stdout, searched.stderr
    everything = crow_memory("list", "--scope", "all", cwd=b).stdout
    assert "rm -rf" not in everything and "B deploys on Mondays" in everything


def _answer(agent, option: str) -> dict:
    while True:
        message = agent.recv(timeout=90)
        if message.get("method") == "session/request_permission":
            break
    agent.send(
        {
            "jsonrpc": "2.0",
            "id": message["id"],
            "result": {"outcome": {"outcome": "selected", "optionId": option}},
        }
    )
    return message


@pytest.mark.parametrize("option", ["allow_once", "reject_once"])
def test_a_write_beyond_the_sessions_scopes_asks_even_when_remember_is_allowed(
    crow, scripted_model, tmp_path, option
):
    a, b = _two_projects(tmp_path)
    planted = "the deploy key of A is in /tmp/key"
    scripted_model.script(
        ToolCalls(calls=[("memory__remember", {"text": planted, "scope": f"project:{a}"})]),
        Text(text="ok"),
    )
    agent = crow(extra=memory_config(scripted_model.base_url))  # remember = "allow"
    sid = agent.new_session(str(b))
    agent.prompt(sid, "remember that for project A")
    asked = _answer(agent, option)
    assert f"project:{a}" in asked["params"]["description"]
    offered = {o["optionId"] for o in asked["params"]["options"]}
    assert offered == {"allow_once", "reject_once"}  # no "always" for another project
    rest: list[dict] = []
    while not rest or not is_idle(rest[-1]):  # a first memory write imports LanceDB
        rest += updates([agent.recv(timeout=90)])
    assert rest[-1]["stopReason"] == "end_turn"
    listed = crow_memory("list", "--scope", f"project:{a}", cwd=a).stdout
    assert (planted in listed) is (option == "allow_once")


def test_two_imports_at_once_keep_every_record(tmp_path, crow_home, scripted_model):
    crow_home.mkdir(parents=True, exist_ok=True)
    (crow_home / "config.toml").write_text('[memory]\nembedder = "none"\n')
    files = []
    for n in (1, 2):
        path = tmp_path / f"import-{n}.jsonl"
        lines = [
            json.dumps({"text": f"import {n}, fact {i}: service {n}-{i} listens on {9000 + i}"})
            for i in range(300)
        ]
        path.write_text("\n".join(lines) + "\n")
        files.append(path)
    runs = [
        subprocess.Popen(
            [*CROW, "memory", "import", str(path), "--scope", "global"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for path in files
    ]
    for run in runs:
        _, err = run.communicate(timeout=300)
        assert run.returncode == 0, err
        assert "imported 300 memories, merged 0, failed 0" in err
    stats = crow_memory("stats").stdout
    assert stats.startswith("600 memories"), stats


def test_an_oversized_memory_is_refused_by_name_and_the_rest_kept(
    tmp_path, crow_home, scripted_model
):
    crow_home.mkdir(parents=True, exist_ok=True)
    (crow_home / "config.toml").write_text('[memory]\nembedder = "none"\nmax_text_kib = 1\n')
    path = tmp_path / "memories.jsonl"
    lines = [json.dumps({"text": "small fact one"}), json.dumps({"text": "x " * 2000})]
    path.write_text("\n".join([*lines, json.dumps({"text": "small fact two"})]) + "\n")
    done = crow_memory("import", str(path))
    assert done.returncode == 1
    assert f"{path}:2: the memory is 4 KiB, over the 1 KiB limit" in done.stderr
    assert "imported 2 memories, merged 0, failed 1" in done.stderr
    big = crow_memory("add", "y " * 1000)
    assert big.returncode == 2 and "max_text_kib" in big.stderr


def test_a_large_import_goes_in_batches_with_a_bar_on_a_terminal(tmp_path, crow_home):
    import pexpect

    from crow.memory.store import MemoryStore

    crow_home.mkdir(parents=True, exist_ok=True)
    (crow_home / "config.toml").write_text('[memory]\nembedder = "none"\n')
    path = tmp_path / "many.jsonl"
    lines = [
        json.dumps({"text": f"fact {i}: host h{i} serves shard {i % 13}"}) for i in range(1200)
    ]
    lines[700] = '{"text": 7}'
    path.write_text("\n".join(lines) + "\n")
    child = pexpect.spawn(
        sys.executable,
        ["-m", "crow", "memory", "import", str(path), "--scope", "global"],
        encoding="utf-8",
        timeout=240,
        dimensions=(24, 120),
    )
    child.expect(pexpect.EOF)
    child.close()
    seen = child.before
    assert child.exitstatus == 1, seen
    assert f"{path}:701: not a memory" in seen
    assert "imported 1199 memories, merged 0, failed 1" in seen
    bars = re.findall(r"\rimport many\.jsonl \[[#.]{30}\] (\d+)/1200", seen)
    assert bars[-1] == "1200" and len(bars) == 5  # a batch of 256 at a time
    table = MemoryStore(crow_home / "memory", None)._open()
    assert table.count_rows() == 1199
    assert table.version < 15  # one commit a batch, not one a record
    again = crow_memory("import", str(path), "--scope", "global")  # stderr not a terminal
    assert "\r" not in again.stderr and "[#" not in again.stderr
    assert "imported 0 memories, merged 1199, failed 1" in again.stderr
