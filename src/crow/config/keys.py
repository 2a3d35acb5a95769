"""The tables and keys ``config.toml`` may hold, and warnings for the others.

``crow.config`` checks the value of every key it reads; a key it does not read
(``[modle]``, ``model.defualt``) would otherwise be ignored without a word.
``unknown_keys`` names each one with the closest known name (difflib), so a typo
is a warning the person sees, not a setting silently lost.  It only warns: a
config written for a newer Crow still loads.
"""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any

from .settings import (
    TOOL_KINDS,
    AcpSettings,
    JudgeSettings,
    Limits,
    MemorySettings,
    RetryPolicy,
    ServerSettings,
    SessionSettings,
)

__all__ = ["KNOWN", "unknown_keys"]


def _fields(settings: type) -> frozenset[str]:
    """A settings dataclass's fields: the keys of its table."""
    return frozenset(f.name for f in dataclasses.fields(settings))


#: Per table, its keys; ``"*"`` is a table of named tables (``[models.NAME]``), whose
#: keys are listed under the same name with ``.*`` (``models.*``).  The tables read
#: into a settings dataclass take its fields.
KNOWN: dict[str, frozenset[str]] = {
    "": frozenset(
        {"model", "providers", "models", "tools", "web", "permissions", "mcp", "store"}
        | {"memory", "judge", "limits", "acp", "server", "retry", "session"}
    ),
    "model": frozenset({"default", "fallback", "system_prompt", "max_steps"}),
    "providers": frozenset({"*"}),
    "providers.*": frozenset({"base_url", "api_key_env", "kind"}),
    "models": frozenset({"*"}),
    "models.*": frozenset(
        {"provider", "id", "capabilities", "context_window", "max_output_tokens"}
    ),
    "tools": frozenset({"builtin", "timeout_s", "max_result_kib"}),
    "web": frozenset({"search_url", "allow_hosts"}),
    "permissions": frozenset({*TOOL_KINDS, "yolo"}),
    "mcp": frozenset({"servers", "ask_client_servers", "acp_servers"}),
    "mcp.servers": frozenset({"*"}),
    "mcp.servers.*": frozenset(
        {"command", "args", "env", "url", "headers", "timeout_s", "trusted"}
    ),
    "store": frozenset({"url"}),
    "memory": _fields(MemorySettings),
    "judge": _fields(JudgeSettings),
    "limits": _fields(Limits),
    "acp": _fields(AcpSettings),
    "server": _fields(ServerSettings),
    "retry": _fields(RetryPolicy),
    "session": _fields(SessionSettings),
}

#: Tables whose values are free-form (an MCP server's environment and headers).
_FREE = ("mcp.servers.*.env", "mcp.servers.*.headers")


def unknown_keys(data: dict[str, Any]) -> list[str]:
    """One sentence per table or key of ``data`` (parsed config.toml) that Crow does
    not read, with the closest known one where there is one."""
    found: list[str] = []
    _walk(data, "", "", found)
    return found


def _walk(table: dict[str, Any], pattern: str, path: str, found: list[str]) -> None:
    known = KNOWN.get(pattern)
    if known is None or pattern in _FREE:
        return
    for key, value in table.items():
        name = f"{path}.{key}" if path else key
        if "*" in known:
            child = f"{pattern}.*"
        elif key in known:
            child = f"{pattern}.{key}" if pattern else key
        else:
            found.append(_unknown(name, key, known, path, is_table=isinstance(value, dict)))
            continue
        if isinstance(value, dict):
            _walk(value, child, name, found)


def _unknown(name: str, key: str, known: frozenset[str], path: str, *, is_table: bool) -> str:
    what = f"table [{name}]" if is_table else f"key {name}"
    close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.6)
    if not close:
        return f"unknown {what}: Crow ignores it"
    better = f"{path}.{close[0]}" if path else close[0]
    hint = f"[{better}]" if is_table else better
    return f"unknown {what} (did you mean {hint}?): Crow ignores it"
