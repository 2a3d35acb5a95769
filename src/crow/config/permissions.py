"""The permission answers a person saved with "always": ``permissions.toml`` in the home.

Crow's own file, beside config.toml (which the person writes): read into
``ToolSettings.remembered`` when the config loads, rewritten whole (atomically,
0600) when an answer is saved or forgotten (``crow permissions``).
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

from ..private import private_dir, tighten_file, write_private
from .paths import Paths
from .validate import ConfigError, as_table

__all__ = ["forget_permissions", "remembered_permissions", "save_permission"]


def remembered_permissions(paths: Paths) -> dict[str, str]:
    """The saved "always" answers: tool -> allow|deny.  Raises ConfigError for a
    permissions.toml that does not load."""
    file = paths.home / "permissions.toml"
    if not file.exists():
        return {}
    tighten_file(file)
    source = str(file)
    try:
        data = tomllib.loads(file.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(source, "(file)", "valid TOML", str(exc)) from None
    tools = as_table(source, "tools", data.get("tools", {}))
    for tool, decision in tools.items():
        if decision not in ("allow", "deny"):
            raise ConfigError(source, f"tools.{tool}", "allow or deny", decision)
    return dict(tools)


def save_permission(paths: Paths, tool: str, decision: str) -> Path:
    """Remember an "always" answer in permissions.toml (rewritten whole, atomically, 0600)."""
    return _write_remembered(paths, {**remembered_permissions(paths), tool: decision})


def forget_permissions(paths: Paths, tools: list[str] | None) -> list[str]:
    """Forget the saved answers for ``tools`` (None: all of them); returns those
    forgotten (the file is rewritten only when one was)."""
    remembered = remembered_permissions(paths)
    gone = [tool for tool in remembered if tools is None or tool in tools]
    if gone:
        _write_remembered(paths, {t: d for t, d in remembered.items() if t not in gone})
    return gone


def _write_remembered(paths: Paths, remembered: dict[str, str]) -> Path:
    lines = ['# Permission answers saved by Crow ("always"). Edit or delete freely.', "[tools]"]
    lines += [
        f"{json.dumps(name)} = {json.dumps(value)}" for name, value in sorted(remembered.items())
    ]
    return write_private(private_dir(paths.home) / "permissions.toml", "\n".join(lines) + "\n")
