"""Crow's long-term memory: LanceDB on disk, embedders, hybrid search.

A layer below ``crow.servers`` (the memory MCP server) and ``crow.agent``
(automatic recall); it knows nothing of ACP.  The modules: ``scopes`` (light:
the agent imports it early), ``store`` (LanceDB; with ``records``, ``rows``,
``ranking`` and ``upkeep``: the indexes as the table grows; ``journal``: new
memories kept safe until committed; ``twins``: remember's search for a memory
that says the same, with ``fresh``: the rows the index misses; ``stamps``: when
memories were last recalled),
``embedders`` and ``minilm`` (onnxruntime, with ``wordpiece``), ``shared`` (one
store per process and folder).
"""

from pathlib import Path

__all__ = ["TABLE", "has_memories"]

TABLE = "memories"  # the one LanceDB table, ``<folder>/memories.lance``


def has_memories(folder: Path) -> bool:
    """Whether any memory was ever written under ``folder``: a stat, so callers on
    the event loop skip LanceDB (~2 s to import) and numpy when there is nothing."""
    return (folder / f"{TABLE}.lance").is_dir()
