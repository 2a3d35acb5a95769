"""The permission policy: which tool calls run, ask or are refused, in what order."""

from __future__ import annotations

import pytest

from crow.config import load_config
from crow.tools.hub import ToolInfo
from crow.tools.permissions import Permissions


def tool(qualified: str, kind: str, *, trusted: bool = True) -> ToolInfo:
    server, name = qualified.split("__")
    return ToolInfo(
        qualified=qualified,
        server=server,
        name=name,
        description="",
        input_schema={},
        kind=kind,
        trusted=trusted,
    )


@pytest.mark.parametrize(
    ("config", "call", "decision"),
    [
        ("", tool("memory__remember", "edit"), "allow"),  # Crow's own store
        ("", tool("memory__forget", "delete"), "allow"),
        ("", tool("fs__write", "edit"), "ask"),
        ("", tool("memory__recall", "search"), "allow"),
        ('[memory]\nremember = "ask"\n', tool("memory__remember", "edit"), "ask"),
        ('[memory]\nforget = "deny"\n', tool("memory__forget", "delete"), "deny"),
        ("[permissions]\nyolo = true\n", tool("fs__write", "edit"), "allow"),
        # an untrusted server of the same name gets no policy of memory's
        ("", tool("memory__remember", "edit", trusted=False), "ask"),
    ],
)
def test_decisions(crow_home, config, call, decision):
    crow_home.mkdir(parents=True, exist_ok=True)
    (crow_home / "config.toml").write_text(config)
    settings = load_config()
    assert Permissions(settings.tools, settings.paths).decide(call) == decision


def test_an_always_answer_beats_the_tool_policy(crow_home):
    settings = load_config()
    permissions = Permissions(settings.tools, settings.paths)
    remember = tool("memory__remember", "edit")
    permissions.answer(remember, "reject_session")
    assert permissions.decide(remember) == "deny"
