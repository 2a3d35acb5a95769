"""The system prompt: who Crow is, what its memory is for, and the project's AGENTS.md.

``AGENTS.md`` files are read as each turn starts (``Turn.system_prompt``), so an
edit counts from the next turn: ``~/.agents/AGENTS.md`` (the user's, everywhere; ``CROW_AGENTS_DIR``
moves it), then each directory's from the git root down to the session's cwd,
the nearest last (it has the final word).  Each file gives at most 32 KiB.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from crow.config import Config
from crow.memory.scopes import project_root

__all__ = ["DEFAULT_SYSTEM_PROMPT", "agents_files", "system_prompt"]

DEFAULT_SYSTEM_PROMPT = (
    "You are Crow, a careful and capable coding agent. Answer concisely and accurately."
)
MEMORY_GUIDE = (
    "You have a long-term memory (the memory tools) that outlives this conversation and is "
    "shared with your other sessions. Remember durable facts with memory__remember: the "
    "user's preferences, project conventions, decisions and why they were made, pitfalls "
    "found the hard way. Do not remember transient chatter, secrets or what the code itself "
    "says. Memories relevant to a prompt are recalled for you at the start of a turn; use "
    "memory__recall to look for more, and memory__forget for a memory that is wrong."
)
AGENTS_FILE = "AGENTS.md"
MAX_FILE_BYTES = 32 * 1024


def agents_files(config: Config, cwd: str | Path) -> list[Path]:
    """The AGENTS.md files that apply to ``cwd``, in the order they are given."""
    files = [config.paths.agents / AGENTS_FILE]
    here = Path(cwd).resolve()
    root = project_root(here)
    chain = [here, *here.parents]
    folders = chain[: chain.index(root) + 1] if root in chain else [here]
    files.extend(folder / AGENTS_FILE for folder in reversed(folders))
    return [f for f in dict.fromkeys(files) if f.is_file()]


def _read(path: Path) -> str:
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except OSError:
        return ""
    text = data[:MAX_FILE_BYTES].decode("utf-8", errors="replace").strip()
    return text + ("\n[… cut at 32 KiB]" if len(data) > MAX_FILE_BYTES else "")


def _compose(config: Config, cwd: str, tools: set[str]) -> str:
    parts = [config.system_prompt or DEFAULT_SYSTEM_PROMPT]
    if "memory__remember" in tools:  # a model offered no tools is not told of them
        parts.append(MEMORY_GUIDE)
    for path in agents_files(config, cwd):
        text = _read(path)
        if text:
            parts.append(f"Instructions from {path}:\n{text}")
    return "\n\n".join(parts)


async def system_prompt(config: Config, cwd: str, tools: set[str]) -> str:
    """The system message for a model call that offers ``tools`` (qualified names)."""
    return await asyncio.to_thread(_compose, config, cwd, tools)
