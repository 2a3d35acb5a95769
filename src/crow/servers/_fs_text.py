"""Text files for the fs server: the model-fixable error, binary sniffing, lines.

Owns `FsError` (re-exported by ``fs``), the checks that a path is an existing file or
directory, reading a whole file as UTF-8 text (refusing binary files, as git and grep
decide: a NUL byte in the head), splitting text into lines that keep their endings, and
cutting over-long lines.  It does not touch the roots: callers pass resolved paths.
"""

from __future__ import annotations

from pathlib import Path

#: A NUL byte in this much of the head marks a file binary (as git and grep decide).
SNIFF_BYTES = 8192


class FsError(Exception):
    """A failure the model can fix; its message is the error result's one sentence."""


def is_binary(head: bytes) -> bool:
    return b"\0" in head[:SNIFF_BYTES]


def read_text(path: Path) -> str:
    """The whole file as text, or `FsError` if it is missing, a directory or not UTF-8."""
    require_file(path)
    data = path.read_bytes()
    if is_binary(data):
        raise FsError(f"{path} is a binary file; only UTF-8 text files can be read or edited.")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise FsError(
            f"{path} is not valid UTF-8 (binary?); only UTF-8 text files can be read or edited."
        ) from None


def require_file(path: Path) -> None:
    if path.is_dir():
        raise FsError(f"{path} is a directory; use list to see what it contains.")
    if not path.exists():
        raise FsError(f"File not found: {path}.")


def require_dir(path: Path) -> None:
    if not path.exists():
        raise FsError(f"Directory not found: {path}.")
    if not path.is_dir():
        raise FsError(f"{path} is not a directory.")


def split_lines(text: str) -> list[str]:
    """Split on newlines, keeping them ("".join gives the text back; \\r stays in the line)."""
    parts = text.split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def count_lines(text: str) -> int:
    return len(split_lines(text))


def cut(line: str, limit: int) -> str:
    return line if len(line) <= limit else f"{line[:limit]}… [{len(line) - limit} more chars]"
