"""AGENTS.md in the system prompt: an edit, a new file or a replaced one counts at
the next turn, though what was found is remembered (crow.agent.instructions)."""

from __future__ import annotations

import os
from pathlib import Path

from crow.agent.instructions import system_prompt
from crow.config import Config, Paths


def config(tmp_path: Path) -> Config:
    # ~/.agents is CROW_AGENTS_DIR (conftest); no model is called
    return Config(paths=Paths(home=tmp_path / "home"), providers={}, models={}, chain=())


async def test_agents_md_files_count_as_they_are_now_each_turn(tmp_path):
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "pkg").mkdir()
    (repo / "AGENTS.md").write_text("Use tabs.")
    settings, cwd = config(tmp_path), str(repo / "pkg")
    assert "Use tabs." in await system_prompt(settings, cwd, set())
    (repo / "pkg" / "AGENTS.md").write_text("Pure Python.")  # new, below the root
    assert "Pure Python." in await system_prompt(settings, cwd, set())
    replacement = repo / "AGENTS.new"
    replacement.write_text("Use spcs.")  # same size, put in place as editors save
    os.replace(replacement, repo / "AGENTS.md")
    prompt = await system_prompt(settings, cwd, set())
    assert "Use spcs." in prompt and "Use tabs." not in prompt
    (repo / "AGENTS.md").unlink()
    assert "Use spcs." not in await system_prompt(settings, cwd, set())
