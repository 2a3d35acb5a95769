"""The system prompt: who Crow is, what its memory is for, and the project's AGENTS.md.

``AGENTS.md`` files are looked at as each turn starts (``Turn.system_prompt``),
so an edit counts from the next turn: ``~/.agents/AGENTS.md`` (the user's,
everywhere; ``CROW_AGENTS_DIR`` moves it), then each directory's from the git
root down to the session's cwd, the nearest last (it has the final word).  Each
file gives at most 32 KiB.

A busy server starts hundreds of turns a second, so the work is kept small: the
folders that apply to a cwd (resolving it, walking up to the git root) are
remembered for ``FOLDERS_TTL_S``, and a file is read again only once its stat
says it changed.
"""

from __future__ import annotations

import asyncio
import stat
import time
from pathlib import Path
from typing import TypeVar

from crow.config import Config
from crow.memory.scopes import project_root

__all__ = ["DEFAULT_SYSTEM_PROMPT", "system_prompt"]

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
K = TypeVar("K")
V = TypeVar("V")


#: How long the folders whose AGENTS.md apply to a cwd are remembered (a git root
#: made or removed meanwhile counts after that); the files are looked at each turn.
FOLDERS_TTL_S = 5.0
#: Entries kept in each cache below before it starts afresh.
CACHE_ENTRIES = 256

_folders: dict[str, tuple[float, list[Path]]] = {}  # cwd -> (when found, folders)
_texts: dict[Path, tuple[tuple[int, int, int], str]] = {}  # file -> (its stat, its text)


def _candidates(config: Config, cwd: str | Path) -> list[Path]:
    """Where AGENTS.md files may be for ``cwd``: the user's, then the git root's
    down to ``cwd``'s."""
    key = str(cwd)
    found = _folders.get(key)
    if found is None or time.monotonic() - found[0] > FOLDERS_TTL_S:
        here = Path(cwd).resolve()
        root = project_root(here)
        chain = [here, *here.parents]
        folders = chain[: chain.index(root) + 1] if root in chain else [here]
        found = (time.monotonic(), folders[::-1])
        _remember(_folders, key, found)
    files = [config.paths.agents / AGENTS_FILE, *(f / AGENTS_FILE for f in found[1])]
    return list(dict.fromkeys(files))


def _text_of(path: Path) -> str:
    """The file's text ("" if there is none), read again only when its stat changed."""
    try:
        found = path.stat()
    except OSError:
        return ""
    if not stat.S_ISREG(found.st_mode):
        return ""
    version = (found.st_mtime_ns, found.st_size, found.st_ino)
    known = _texts.get(path)
    if known is not None and known[0] == version:
        return known[1]
    text = _read(path)
    _remember(_texts, path, (version, text))
    return text


def _read(path: Path) -> str:
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except OSError:
        return ""
    text = data[:MAX_FILE_BYTES].decode("utf-8", errors="replace").strip()
    return text + ("\n[… cut at 32 KiB]" if len(data) > MAX_FILE_BYTES else "")


def _remember(cache: dict[K, V], key: K, value: V) -> None:
    if len(cache) >= CACHE_ENTRIES:
        cache.clear()
    cache[key] = value


def _compose(config: Config, cwd: str, tools: set[str]) -> str:
    parts = [config.system_prompt or DEFAULT_SYSTEM_PROMPT]
    if "memory__remember" in tools:  # a model offered no tools is not told of them
        parts.append(MEMORY_GUIDE)
    for path in _candidates(config, cwd):
        text = _text_of(path)
        if text:
            parts.append(f"Instructions from {path}:\n{text}")
    return "\n\n".join(parts)


async def system_prompt(config: Config, cwd: str, tools: set[str]) -> str:
    """The system message for a model call that offers ``tools`` (qualified names)."""
    return await asyncio.to_thread(_compose, config, cwd, tools)
