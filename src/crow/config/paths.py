"""Crow's home (``CROW_HOME``, default ``~/.agents/crow``) and where each thing lives in it."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Paths"]


@dataclass(frozen=True, kw_only=True)
class Paths:
    home: Path

    @classmethod
    def from_env(cls) -> Paths:
        raw = os.environ.get("CROW_HOME")
        return cls(home=Path(raw).expanduser() if raw else Path.home() / ".agents" / "crow")

    @property
    def config_file(self) -> Path:
        return self.home / "config.toml"

    @property
    def store(self) -> Path:
        return self.home / "crow.db"

    @property
    def logs(self) -> Path:
        return self.home / "logs"

    @property
    def run(self) -> Path:
        return self.home / "run"  # runtime files of running servers (crow.runtime.runtime_file)

    @property
    def memory(self) -> Path:
        return self.home / "memory"  # the LanceDB memory store (crow.memory)

    def tool_output(self, session_id: str) -> Path:
        """Where a session's cut tool results are kept whole (crow.tools.caps)."""
        return self.home / "tool-output" / session_id

    @property
    def agents(self) -> Path:
        """``~/.agents``: the user's AGENTS.md (skills and notes live there too)."""
        raw = os.environ.get("CROW_AGENTS_DIR")
        return Path(raw).expanduser() if raw else Path.home() / ".agents"
