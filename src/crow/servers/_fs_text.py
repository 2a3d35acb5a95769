"""Text files for the fs server: the model-fixable error, binary sniffing, lines.

Owns `FsError` (re-exported by ``fs``), decoding a whole file as UTF-8 text (refusing
binary files, as git and grep decide: a NUL byte in the head), splitting text into lines
that keep their endings, and cutting over-long lines.  It opens nothing: files are opened
inside the roots by ``_fs_safe``.
"""

from __future__ import annotations

from pathlib import Path

#: A NUL byte in this much of the head marks a file binary (as git and grep decide).
SNIFF_BYTES = 8192


class FsError(Exception):
    """A failure the model can fix; its message is the error result's one sentence."""


def is_binary(head: bytes) -> bool:
    return b"\0" in head[:SNIFF_BYTES]


def decode_text(path: Path, data: bytes) -> str:
    """A whole file's bytes as text, or `FsError` if it is binary or not UTF-8."""
    if is_binary(data):
        raise FsError(f"{path} is a binary file; only UTF-8 text files can be read or edited.")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise FsError(
            f"{path} is not valid UTF-8 (binary?); only UTF-8 text files can be read or edited."
        ) from None


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
