"""Crow's v2 updates as ACP v1 updates, update by update (ACP-V2.md §8, §12).

Every v1 update produced here must also be valid for the official v1 models
(the ``acp`` package's ``SessionNotification``): v1 unions are closed.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest
from acp import schema as v1

from crow.acp import schema
from crow.agent.v1.content import diff_content, parse_git_patch, terminal_text
from crow.agent.v1.translate import SessionTranslator, config_options, permission_params

SID = "sess_1"


def run(translator: SessionTranslator, *updates: dict[str, Any], live: bool = True) -> list[Any]:
    out = []
    for update in updates:
        for item in translator.translate(update, live=live):
            v1.SessionNotification.model_validate({"sessionId": SID, "update": item})
            out.append(item)
    return out


def chunk(kind: str, mid: str, text: str) -> dict[str, Any]:
    return {"sessionUpdate": kind, "messageId": mid, "content": {"type": "text", "text": text}}


def snapshot(kind: str, mid: str, text: str, **extra: Any) -> dict[str, Any]:
    return {
        "sessionUpdate": kind,
        "messageId": mid,
        "content": [{"type": "text", "text": text}],
        **extra,
    }


# ---- messages -------------------------------------------------------------------
def test_chunks_pass_and_their_snapshot_adds_nothing():
    out = run(
        SessionTranslator(SID),
        chunk("agent_message_chunk", "m1", "Hel"),
        chunk("agent_message_chunk", "m1", "lo"),
        snapshot("agent_message", "m1", "Hello", _meta={"crow/model": "main"}),
    )
    assert [u["content"]["text"] for u in out] == ["Hel", "lo"]
    assert {u["messageId"] for u in out} == {"m1"}


def test_a_snapshot_without_chunks_becomes_one_chunk_with_its_meta():
    note = snapshot("agent_message", "note_1", "The model failed", _meta={"crow/notice": "error"})
    [out] = run(SessionTranslator(SID), note)
    assert out["sessionUpdate"] == "agent_message_chunk"
    assert out["content"]["text"] == "The model failed"
    assert out["_meta"] == {"crow/notice": "error"}


def test_empty_snapshots_and_v1_unknown_blocks_are_left_out():
    translator = SessionTranslator(SID)
    assert run(translator, snapshot("agent_message", "m2", "")) == []
    odd = {"sessionUpdate": "agent_message_chunk", "messageId": "m3", "content": {"type": "_x"}}
    assert run(translator, odd) == []


def test_the_own_prompt_is_not_echoed_live_but_is_replayed():
    live = SessionTranslator(SID)
    live.own_prompts.add("u1")
    user = snapshot("user_message", "u1", "hi")
    assert run(live, user) == []
    other = snapshot("user_message", "u2", "from another client")
    assert run(live, other)[0]["sessionUpdate"] == "user_message_chunk"
    replay = SessionTranslator(SID)
    replay.own_prompts.add("u1")
    assert run(replay, user, live=False)[0]["content"]["text"] == "hi"


def test_state_updates_say_nothing():
    idle = {"sessionUpdate": "state_update", "state": "idle", "stopReason": "end_turn"}
    assert run(SessionTranslator(SID), idle) == []


# ---- tool calls ------------------------------------------------------------------
def created(call_id: str = "tc1", **fields: Any) -> dict[str, Any]:
    return {
        "sessionUpdate": "tool_call_update",
        "toolCallId": call_id,
        "title": "Read a.py",
        "kind": "read",
        "status": "pending",
        "rawInput": {"path": "a.py"},
        **fields,
    }


def test_first_sight_is_a_tool_call_then_updates_carry_what_changed():
    out = run(
        SessionTranslator(SID),
        created(),
        {"sessionUpdate": "tool_call_update", "toolCallId": "tc1", "status": "in_progress"},
        {"sessionUpdate": "tool_call_update", "toolCallId": "tc1", "status": "cancelled"},
    )
    assert out[0] == {
        "sessionUpdate": "tool_call",
        "toolCallId": "tc1",
        "title": "Read a.py",
        "kind": "read",
        "status": "pending",
        "rawInput": {"path": "a.py"},
    }
    assert out[1] == {
        "sessionUpdate": "tool_call_update",
        "toolCallId": "tc1",
        "status": "in_progress",
    }
    assert out[2]["status"] == "failed"  # v1 has no "cancelled" tool status


def test_unknown_kinds_become_other_and_content_chunks_resend_the_whole_content():
    translator = SessionTranslator(SID)
    text = {"type": "content", "content": {"type": "text", "text": "line"}}
    out = run(
        translator,
        created(kind="_acme_magic"),
        {"sessionUpdate": "tool_call_content_chunk", "toolCallId": "tc1", "content": text},
        {"sessionUpdate": "tool_call_content_chunk", "toolCallId": "tc1", "content": text},
    )
    assert out[0]["kind"] == "other"
    assert [len(u["content"]) for u in out[1:]] == [1, 2]


def test_content_before_any_tool_call_update_creates_the_call():
    text = {"type": "content", "content": {"type": "text", "text": "early"}}
    [out] = run(
        SessionTranslator(SID),
        {"sessionUpdate": "tool_call_content_chunk", "toolCallId": "tc9", "content": text},
    )
    assert out["sessionUpdate"] == "tool_call" and out["title"] == "Tool call"
    assert out["content"] == [text]


def test_a_display_terminal_is_text_that_follows_its_output():
    translator = SessionTranslator(SID)
    out = run(
        translator,
        created(kind="execute", title="Run `make`"),
        {"sessionUpdate": "terminal_update", "terminalId": "t1", "command": "make", "cwd": "/p"},
        {
            "sessionUpdate": "tool_call_content_chunk",
            "toolCallId": "tc1",
            "content": {"type": "terminal", "terminalId": "t1"},
        },
        {
            "sessionUpdate": "terminal_output_chunk",
            "terminalId": "t1",
            "data": base64.b64encode(b"building\n").decode(),
        },
        {"sessionUpdate": "terminal_update", "terminalId": "t1", "exitStatus": {"exitCode": 2}},
    )
    texts = [u["content"][0]["content"]["text"] for u in out[1:]]
    assert texts[0].endswith("running") and "$ make" in texts[0]
    assert "building" in texts[1]
    assert texts[2].endswith("exit code 2")


def test_terminal_text_cuts_long_output_and_fences_backticks():
    translator = SessionTranslator(SID)
    long = ("x" * 100 + "\n") * 500 + "```\n"
    run(
        translator,
        {
            "sessionUpdate": "terminal_update",
            "terminalId": "t",
            "command": "cat",
            "output": {"data": base64.b64encode(long.encode()).decode()},
            "exitStatus": {"signal": "SIGTERM"},
        },
    )
    text = terminal_text(translator.projection.terminals["t"])
    assert text.startswith("````\n") and "earlier output cut" in text
    assert text.endswith("killed by SIGTERM") and len(text) < 21_000
    assert terminal_text(None).startswith("(a terminal")


# ---- diffs -------------------------------------------------------------------------
MODIFY_PATCH = (
    "diff --git /p/a.py /p/a.py\n--- /p/a.py\n+++ /p/a.py\n"
    "@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n@@ -11,2 +11,2 @@\n k\n-l\n+L\n\\ No newline at end of file\n"
)


def test_a_modify_patch_gives_the_hunks_before_and_after():
    assert parse_git_patch(MODIFY_PATCH) == {"/p/a.py": ("a\nb\nc\nk\nl\n", "a\nB\nc\nk\nL")}


def test_an_added_file_has_no_old_text_and_prefixed_paths_are_absolute():
    patch = (
        "diff --git a/tmp/n.txt b/tmp/n.txt\nnew file mode 100644\n--- /dev/null\n"
        "+++ b/tmp/n.txt\n@@ -0,0 +1,2 @@\n+one\n+two\n"
    )
    assert parse_git_patch(patch) == {"/tmp/n.txt": (None, "one\ntwo\n")}


def test_diff_content_maps_covered_files_and_describes_the_rest():
    item = {
        "type": "diff",
        "changes": [
            {"operation": "modify", "path": "/p/a.py", "fileType": "text"},
            {"operation": "move", "oldPath": "/p/old", "path": "/p/new"},
        ],
        "patch": {"format": "git_patch", "text": MODIFY_PATCH},
    }
    diff, rest = diff_content(item)
    assert diff == {
        "type": "diff",
        "path": "/p/a.py",
        "oldText": "a\nb\nc\nk\nl\n",
        "newText": "a\nB\nc\nk\nL",
    }
    text = rest["content"]["text"]
    assert "move: /p/old → /p/new" in text and "```diff\n" in text


def test_a_diff_without_a_patch_is_a_text_block():
    [out] = diff_content({"type": "diff", "changes": [{"operation": "delete", "path": "/p/x.bin"}]})
    assert out["content"]["text"] == "delete: /p/x.bin"


# ---- plans, commands, config, info --------------------------------------------------
def test_items_plans_become_one_v1_plan():
    def plan(pid: str, *entries: tuple[str, str]) -> dict[str, Any]:
        return {
            "sessionUpdate": "plan_update",
            "plan": {
                "type": "items",
                "planId": pid,
                "entries": [{"content": c, "priority": "high", "status": s} for c, s in entries],
            },
        }

    translator = SessionTranslator(SID)
    run(translator, plan("main", ("read", "completed")))
    [out] = run(translator, plan("side", ("test", "cancelled"), ("ship", "_later")))
    assert [(e["content"], e["status"]) for e in out["entries"]] == [
        ("read", "completed"),
        ("test", "completed"),
        ("ship", "completed"),
    ]
    assert out["entries"][1]["_meta"] == {"crow/status": "cancelled"}
    markdown = {
        "sessionUpdate": "plan_update",
        "plan": {"type": "markdown", "planId": "m", "content": "x"},
    }
    assert run(translator, markdown) == []


def test_commands_config_info_and_usage():
    translator = SessionTranslator(SID)
    commands, config, info, usage = run(
        translator,
        {
            "sessionUpdate": "available_commands_update",
            "availableCommands": [
                {
                    "name": "model",
                    "description": "Switch",
                    "input": {"type": "text", "hint": "name"},
                },
                {"name": "odd", "description": "?", "input": {"type": "_form"}},
            ],
        },
        {
            "sessionUpdate": "config_option_update",
            "configOptions": [
                {
                    "type": "select",
                    "configId": "model",
                    "name": "Model",
                    "category": "model",
                    "currentValue": "a",
                    "options": [{"value": "a", "name": "A"}],
                }
            ],
        },
        {
            "sessionUpdate": "session_info_update",
            "title": "Hi",
            "updatedAt": "2026-01-01T00:00:00Z",
        },
        {"sessionUpdate": "usage_update", "used": 10, "size": 100},
    )
    assert commands["availableCommands"][0]["input"] == {"hint": "name"}
    assert "input" not in commands["availableCommands"][1]
    assert config["configOptions"][0]["id"] == "model"
    assert info["title"] == "Hi" and usage["used"] == 10


def test_config_options_map_ids_groups_and_drop_unknown_categories():
    options = [
        {
            "type": "select",
            "configId": "effort",
            "name": "Effort",
            "category": "_custom",
            "currentValue": "hi",
            "options": [
                {"groupId": "g", "name": "G", "options": [{"value": "hi", "name": "High"}]}
            ],
        },
        {"type": "_slider", "configId": "x", "name": "X"},
    ]
    [out] = config_options(options)
    assert out["id"] == "effort" and "category" not in out
    assert out["options"] == [
        {"group": "g", "name": "G", "options": [{"value": "hi", "name": "High"}]}
    ]


# ---- permission requests -------------------------------------------------------------
OPTIONS = [
    {"optionId": "yes", "name": "Yes", "kind": "allow_once"},
    {"optionId": "maybe", "name": "Maybe", "kind": "_acme_maybe"},
    {"optionId": "no", "name": "No", "kind": "reject_once"},
]


def request(**fields: Any) -> schema.RequestPermissionRequest:
    return schema.RequestPermissionRequest.model_validate(
        {"sessionId": SID, "title": "Allow it?", "options": OPTIONS, **fields}
    )


def test_a_tool_call_subject_is_the_v1_tool_call():
    params = permission_params(
        request(
            description="probe wants to run touch",
            subject={
                "type": "tool_call",
                "toolCall": {"toolCallId": "tc1", "title": "Touch", "kind": "edit"},
            },
        ),
        None,
    )
    assert params is not None
    assert params["toolCall"] == {"toolCallId": "tc1", "title": "Touch", "kind": "edit"}
    assert [o["optionId"] for o in params["options"]] == ["yes", "no"]
    assert params["_meta"] == {
        "crow/title": "Allow it?",
        "crow/description": "probe wants to run touch",
    }
    v1.RequestPermissionRequest.model_validate(params)


def test_a_command_subject_is_an_execute_call_titled_like_its_tool_call():
    translator = SessionTranslator(SID)
    run(translator, created("tc7", title="Run `make`", kind="execute"))
    params = permission_params(
        request(subject={"type": "command", "command": "make", "cwd": "/p", "toolCallId": "tc7"}),
        translator,
    )
    assert params is not None
    assert params["toolCall"]["title"] == "Run `make`"
    assert params["toolCall"]["rawInput"] == {"command": "make", "cwd": "/p"}
    v1.RequestPermissionRequest.model_validate(params)


@pytest.mark.parametrize("subject", [None, {"type": "_acme_thing", "x": 1}])
def test_without_a_usable_subject_the_title_names_the_call(subject):
    fields = {} if subject is None else {"subject": subject}
    params = permission_params(request(**fields), None)
    assert params is not None and params["toolCall"]["title"] == "Allow it?"
    assert params["toolCall"]["toolCallId"].startswith("permission_")


def test_nothing_is_asked_when_no_option_has_a_v1_kind():
    only_odd = [{"optionId": "maybe", "name": "Maybe", "kind": "_acme_maybe"}]
    assert permission_params(request(options=only_odd), None) is None
