"""crow serve runs on uvloop, and on asyncio's own loop when told to
(``CROW_EVENT_LOOP=asyncio``, crow.runtime.event_loop): a tool turn and a cancel on each.

The rest of the suite runs on uvloop, the default."""

from __future__ import annotations

from pathlib import Path

import pytest
from crow_testing.fakemodel import Text, ToolCalls
from crow_testing.serve_support import kinds, text_of


def runs_uvloop(pid: int) -> bool:
    return "uvloop" in Path(f"/proc/{pid}/maps").read_text()


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_a_turn_with_a_tool_call_and_a_cancel_on_either_loop(
    crow, crow_home, scripted_model, monkeypatch, tmp_path, loop
):
    monkeypatch.setenv("CROW_EVENT_LOOP", loop)
    (tmp_path / "note.txt").write_text("hello from the file")
    scripted_model.script(
        ToolCalls(calls=[("fs__read", {"path": "note.txt"})]),
        Text(text="It says hello"),
        Text(text="a b c d e f g h", chunks=8, delay_s=0.5),
    )
    agent = crow()
    assert runs_uvloop(agent.proc.pid) == (loop == "uvloop")
    sid = agent.new_session(str(tmp_path))
    seen = agent.run_turn(sid, "read note.txt")
    assert "tool_call_content_chunk" in kinds(seen), " ".join(kinds(seen))
    assert text_of(seen) == "It says hello"
    assert seen[-1]["stopReason"] == "end_turn"

    response, _ = agent.prompt(sid, "count slowly")
    assert "result" in response
    agent.send({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}})
    ended = agent.until_update(lambda u: u.get("stopReason"))
    assert ended[-1]["params"]["update"]["stopReason"] == "cancelled"
    if loop == "uvloop":
        assert "serving on uvloop" in (crow_home / "logs" / "crow.log").read_text()
