"""The session projection (ACP-V2.md §8.1) and completion detection (§7.2)."""

from __future__ import annotations

import base64

from pydantic import TypeAdapter

from crow.acp import SessionProjection, schema

UPDATE = TypeAdapter(schema.SessionUpdate)


def apply(proj: SessionProjection, *updates: dict) -> SessionProjection:
    for update in updates:
        proj.apply(UPDATE.validate_python(update))
    return proj


def chunk(mid: str, text: str, kind: str = "agent_message_chunk") -> dict:
    return {"sessionUpdate": kind, "messageId": mid, "content": {"type": "text", "text": text}}


def snapshot(mid: str, content, kind: str = "agent_message", **extra) -> dict:
    update = {"sessionUpdate": kind, "messageId": mid, **extra}
    if content != "omit":
        update["content"] = (
            None if content is None else [{"type": "text", "text": t} for t in content]
        )
    return update


def texts(proj: SessionProjection, mid: str) -> list[str]:
    return [b.text for b in proj.messages[mid].content]


def test_the_worked_example_of_section_8_1():
    proj = SessionProjection("s")
    steps = [
        (snapshot("m", ["A"]), ["A"]),
        (chunk("m", "B"), ["A", "B"]),
        (snapshot("m", "omit", _meta={"k": 1}), ["A", "B"]),
        (snapshot("m", ["C"]), ["C"]),
        (chunk("m", "D"), ["C", "D"]),
        (snapshot("m", None), []),
        (chunk("m", "E"), ["E"]),
        (snapshot("m", []), []),
    ]
    for update, expected in steps:
        apply(proj, update)
        assert texts(proj, "m") == expected


def test_interleaved_message_ids_accumulate_separately():
    proj = apply(
        SessionProjection("s"),
        chunk("a", "1"),
        chunk("b", "x"),
        chunk("a", "2"),
        chunk("b", "y"),
        chunk("a", "3"),
    )
    assert proj.messages["a"].text == "123" and proj.messages["b"].text == "xy"
    assert proj.text() == "123xy"


def test_identical_chunks_append_again():
    proj = apply(SessionProjection("s"), chunk("m", "ha"), chunk("m", "ha"))
    assert proj.messages["m"].text == "haha"


def test_snapshot_replaces_chunks_instead_of_duplicating():
    proj = apply(
        SessionProjection("s"), chunk("m", "Echo: "), chunk("m", "hi"), snapshot("m", ["Echo: hi"])
    )
    assert proj.text() == "Echo: hi"


def test_first_seen_order_even_for_a_metadata_only_first_update():
    proj = apply(
        SessionProjection("s"),
        snapshot("late", "omit", _meta={"model": "m1"}),
        chunk("early", "first text"),
        chunk("late", "second text"),
    )
    assert [e.message_id for e in proj.entries] == ["late", "early"]
    assert proj.text() == "second textfirst text"
    assert proj.messages["late"].meta == {"model": "m1"}


def test_roles_are_kept_apart():
    proj = apply(
        SessionProjection("s"),
        snapshot("u", ["hi"], kind="user_message"),
        chunk("t", "hmm", kind="agent_thought_chunk"),
        chunk("a", "hello"),
    )
    assert proj.text("user") == "hi" and proj.text("thought") == "hmm" and proj.text() == "hello"


def test_meta_is_merged_per_key():
    proj = apply(
        SessionProjection("s"),
        snapshot("m", "omit", _meta={"a": 1, "b": 2}),
        snapshot("m", "omit", _meta={"b": None, "c": 3}),
        snapshot("m", "omit", _meta={}),
    )
    assert proj.messages["m"].meta == {"a": 1, "c": 3}
    apply(proj, snapshot("m", "omit", _meta=None))
    assert proj.messages["m"].meta is None


def test_tool_call_patch_fields():
    proj = apply(
        SessionProjection("s"),
        {
            "sessionUpdate": "tool_call_update",
            "toolCallId": "t",
            "title": "Read a.py",
            "kind": "read",
            "status": "pending",
        },
        {
            "sessionUpdate": "tool_call_content_chunk",
            "toolCallId": "t",
            "content": {"type": "content", "content": {"type": "text", "text": "line"}},
        },
        {
            "sessionUpdate": "tool_call_update",
            "toolCallId": "t",
            "status": "completed",
            "title": None,
        },
    )
    call = proj.tool_calls["t"]
    assert call.status == "completed" and call.kind == "read" and call.title is None
    assert len(call.content) == 1
    apply(proj, {"sessionUpdate": "tool_call_update", "toolCallId": "t", "content": []})
    assert call.content == [] and call.status == "completed"


def test_terminal_snapshot_replaces_and_chunks_append_bytes():
    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    proj = apply(
        SessionProjection("s"),
        {"sessionUpdate": "terminal_output_chunk", "terminalId": "x", "data": b64(b"\xe2\x82")},
        {"sessionUpdate": "terminal_output_chunk", "terminalId": "x", "data": b64(b"\xac!")},
    )
    assert proj.terminals["x"].output.decode() == "€!"
    apply(
        proj,
        {
            "sessionUpdate": "terminal_update",
            "terminalId": "x",
            "output": {"data": b64(b"fresh")},
            "exitStatus": {"exitCode": 0},
        },
    )
    assert bytes(proj.terminals["x"].output) == b"fresh" and proj.terminals["x"].exited


def test_session_info_and_unknown_updates():
    proj = apply(
        SessionProjection("s"),
        {"sessionUpdate": "session_info_update", "title": "T"},
        {"sessionUpdate": "session_info_update", "updatedAt": "2026-01-01T00:00:00Z"},
        {"sessionUpdate": "_acme", "x": 1},
    )
    assert proj.info == {"title": "T", "updated_at": "2026-01-01T00:00:00Z"}
    apply(proj, {"sessionUpdate": "session_info_update", "title": None})
    assert proj.info == {"updated_at": "2026-01-01T00:00:00Z"}
    assert len(proj.unknown) == 1


def state(name: str, stop: str | None = None) -> dict:
    update = {"sessionUpdate": "state_update", "state": name}
    if stop:
        update["stopReason"] = stop
    return update


def test_an_idle_before_running_is_the_previous_state_not_completion():
    proj = SessionProjection("s")
    turn = proj.begin_turn()
    proj.acknowledge(turn, None)  # [H]: {} names no message
    apply(proj, state("idle"))
    assert not turn.done
    apply(proj, state("running"), chunk("m", "x"))
    assert not turn.done
    apply(proj, state("idle", "end_turn"))
    assert turn.done and turn.stop_reason == "end_turn"
    apply(proj, state("idle", "end_turn"))  # a repeated snapshot is not a second completion
    assert proj.turns == []


def test_requires_action_starts_the_turn_and_unknown_states_are_busy():
    proj = SessionProjection("s")
    turn = proj.begin_turn()
    proj.acknowledge(turn, None)
    apply(proj, state("requires_action"), state("idle", "cancelled"))
    assert turn.done and turn.stop_reason == "cancelled"
    other = proj.begin_turn()
    proj.acknowledge(other, None)
    apply(proj, state("_acme_waiting"))
    assert not other.done and proj.state == "_acme_waiting"
    apply(proj, state("idle", "end_turn"))
    assert other.done


def user(message_id: str, text: str = "hi") -> dict:
    return {
        "sessionUpdate": "user_message",
        "messageId": message_id,
        "content": [{"type": "text", "text": text}],
    }


def test_an_answer_without_a_message_id_takes_the_end_seen_before_it():
    """[H]: the turn may run to its end before the {} answer is read (§7.1)."""
    proj = SessionProjection("s")
    turn = proj.begin_turn()
    apply(proj, state("running"), state("idle", "end_turn"))
    assert not turn.done  # a held prompt's answer would name its message: wait for it
    proj.acknowledge(turn, None)
    assert turn.done and turn.stop_reason == "end_turn" and proj.turns == []


def test_a_held_prompt_ends_with_its_own_turn_not_the_one_running_when_sent():
    """[T] §6.1: held while another turn runs, answered when inserted."""
    proj = SessionProjection("s")
    apply(proj, user("m_other"), state("running"))
    turn = proj.begin_turn()
    apply(proj, chunk("a1", "theirs"), state("idle", "end_turn"))
    assert not turn.done
    proj.acknowledge(turn, "m_mine")  # inserted: the answer comes first here
    apply(proj, user("m_mine"), state("running"))
    assert not turn.done
    apply(proj, state("idle", "cancelled"))
    assert turn.done and turn.stop_reason == "cancelled"


def test_an_answer_read_after_its_turn_ended_still_ends_it():
    """The agent may send the user_message, running and idle before the answer."""
    proj = SessionProjection("s")
    apply(proj, state("running"))
    turn = proj.begin_turn()
    apply(proj, state("idle", "end_turn"))  # the other turn's end
    apply(proj, user("m_mine"), state("running"), state("idle", "max_tokens"))
    proj.acknowledge(turn, "m_mine")
    assert turn.done and turn.stop_reason == "max_tokens"
    assert proj._unclaimed == {}


def test_a_steered_prompt_ends_with_the_turn_it_joined():
    proj = SessionProjection("s")
    apply(proj, user("m1"), state("running"))
    turn = proj.begin_turn()
    proj.acknowledge(turn, "m2")
    apply(proj, user("m2", "use Rust"), chunk("a", "ok"))
    assert not turn.done
    apply(proj, state("idle", "end_turn"))
    assert turn.done and turn.stop_reason == "end_turn"
