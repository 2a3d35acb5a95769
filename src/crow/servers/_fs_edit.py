"""Replacing text for the fs server's edit tool: exact first, then a tolerant match.

Owns the choice between an exact match and one that ignores indentation and trailing
whitespace (whole lines only, unique unless every match is wanted), re-indenting the new
text to fit the region it replaces, and the `FsError` sentences for a missing or ambiguous
match.  It neither reads nor writes files.
"""

from __future__ import annotations

import os
from pathlib import Path

from ._fs_text import FsError, split_lines


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def _normalise(lines: list[str]) -> tuple[list[str], str]:
    """Lines with trailing whitespace stripped and their common indentation removed.

    Returns the normalised lines and the indentation that was removed (the longest
    whitespace prefix all non-blank lines share).  Blank lines normalise to "".
    """
    stripped = [line.rstrip() for line in lines]
    common = _common_indent(stripped)
    return [line[len(common) :] if line else "" for line in stripped], common


def _common_indent(lines: list[str]) -> str:
    # Character-wise on purpose: these are whitespace strings, not paths.
    return os.path.commonprefix([_indent(line) for line in lines if line.strip()])  # noqa: RUF071


def _trim_blank(lines: list[str]) -> list[str]:
    start, end = 0, len(lines)
    while start < end and not lines[start].strip():
        start += 1
    while end > start and not lines[end - 1].strip():
        end -= 1
    return lines[start:end]


def _tolerant_regions(lines: list[str], old_text: str) -> tuple[list[int], int, str]:
    """Where ``old_text`` matches whole lines, ignoring indentation and trailing blanks.

    Returns non-overlapping start indices, the region length in lines, and the
    indentation ``old_text`` itself was written with.
    """
    wanted, old_indent = _normalise(_trim_blank(old_text.split("\n")))
    size = len(wanted)
    starts: list[int] = []
    if not size:
        return starts, 0, ""
    i = 0
    while i + size <= len(lines):
        if lines[i].strip() and _normalise(lines[i : i + size])[0] == wanted:
            starts.append(i)
            i += size
        else:
            i += 1
    return starts, size, old_indent


def _reindent(new_text: str, old_indent: str, region: list[str]) -> str:
    """``new_text`` moved from ``old_text``'s indentation to the region's, with its line ends."""
    _, file_indent = _normalise(region)
    eol = "\r\n" if region[0].endswith("\r\n") else "\n"
    if new_text.endswith("\n"):
        new_text = new_text[:-1]
    if not new_text:
        return ""
    new_lines = [line.removesuffix("\r") for line in new_text.split("\n")]
    filled = [line for line in new_lines if line.strip()]
    base = old_indent
    if not all(line.startswith(old_indent) for line in filled):
        base = _common_indent(filled)
    out = [file_indent + line[len(base) :] if line.strip() else "" for line in new_lines]
    ends_with_eol = region[-1].endswith("\n")
    return eol.join(out) + (eol if ends_with_eol else "")


def replace_text(
    file: Path, content: str, old_text: str, new_text: str, replace_all: bool
) -> tuple[str, str]:
    """The new content and a sentence saying what was done."""
    count = content.count(old_text)
    if count > 1 and not replace_all:
        raise FsError(
            f"old_text matches {count} places in {file}; include more surrounding lines "
            "to make it unique, or set replace_all to change every one."
        )
    if count:
        new = content.replace(old_text, new_text)
        return new, f"replaced {count} occurrence{'' if count == 1 else 's'}."
    lines = split_lines(content)
    starts, size, old_indent = _tolerant_regions(lines, old_text)
    if not starts:
        raise FsError(
            f"old_text was not found in {file}, not even ignoring indentation and "
            "trailing whitespace; read the file and copy the text exactly."
        )
    if len(starts) > 1 and not replace_all:
        raise FsError(
            f"old_text matches {len(starts)} places in {file} when indentation is ignored "
            "(and none exactly); include more surrounding lines to make it unique."
        )
    for start in reversed(starts):
        region = lines[start : start + size]
        lines[start : start + size] = [_reindent(new_text, old_indent, region)]
    where = ", ".join(f"line {s + 1}" for s in starts)
    note = (
        f"no exact match, so a tolerant match (indentation and trailing whitespace "
        f"ignored) was used at {where}; new_text was re-indented to fit."
    )
    return "".join(lines), note
