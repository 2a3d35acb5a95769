"""The built-in filesystem MCP server: read, write, edit, list, glob, grep inside the roots.

Every path goes through `Roots.resolve` (symlinks followed, then checked), so ``..``,
absolute paths elsewhere and symlinks pointing out are refused alike.  Failures the
model can fix (outside the roots, not found, binary, an ambiguous edit, a bad regex)
come back as tool results with ``isError`` and one sentence; they never reach the
server's crash path.

Results carry ``_meta`` for the agent (``crow.tools.surface``):

- ``crow/locations``: ``[{"path": <abs>, "line"?: n}]``, the files touched;
- ``crow/diff`` (write, edit): ``{"changes": [{"operation": "add" | "modify", "path":
  <abs>, "fileType": "text"}], "patch": <git patch>}``, ACP v2 diff content.  The patch
  is one ``diff --git`` section with absolute paths and no commit headers
  (ACP-V2.md §8.2).

Run alone: ``python -m crow.servers.fs --root DIR [--root DIR ...]`` (stdio).
"""

from __future__ import annotations

import argparse
import difflib
import fnmatch
import os
import re
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any

from mcp.server.mcpserver import MCPServer
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field

from ._stdio import run_stdio
from .roots import OutsideRoots, Roots

__all__ = ["FsError", "FsTools", "build_server", "main"]

#: read's default window: whole file up to this many lines ...
READ_MAX_LINES = 2000
#: ... or this many bytes of output, whichever comes first (the model's context is the budget).
READ_MAX_BYTES = 256 * 1024
#: A longer line is cut in read and grep output (minified files would eat the budget).
MAX_LINE_CHARS = 2000
GREP_LINE_CHARS = 500
LIST_MAX_ENTRIES = 1000
GLOB_MAX_FILES = 500
#: grep skips bigger files: they are data or generated, and scanning them is slow.
GREP_MAX_FILE_BYTES = 2 * 1024 * 1024
#: A NUL byte in this much of the head marks a file binary (as git and grep decide).
SNIFF_BYTES = 8192
SKIP_DIRS = frozenset({".git"})


class FsError(Exception):
    """A failure the model can fix; its message is the error result's one sentence."""


Meta = dict[str, Any]


def _result(text: str, meta: Meta | None = None, *, error: bool = False) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=error, _meta=meta)


def _guard(op: Callable[[], CallToolResult]) -> CallToolResult:
    """Run one tool body, turning anticipated failures into error results."""
    try:
        return op()
    except (FsError, OutsideRoots) as exc:
        return _result(str(exc), error=True)
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename else ""
        return _result(f"The filesystem refused: {exc.strerror or exc}{where}.", error=True)
    except (ValueError, RuntimeError) as exc:  # NUL in a path, a symlink loop, bad encoding
        return _result(f"Invalid request: {exc}.", error=True)


# --- text files ---------------------------------------------------------------------------


def _is_binary(head: bytes) -> bool:
    return b"\0" in head[:SNIFF_BYTES]


def _read_text(path: Path) -> str:
    """The whole file as text, or `FsError` if it is missing, a directory or not UTF-8."""
    _require_file(path)
    data = path.read_bytes()
    if _is_binary(data):
        raise FsError(f"{path} is a binary file; only UTF-8 text files can be read or edited.")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise FsError(
            f"{path} is not valid UTF-8 (binary?); only UTF-8 text files can be read or edited."
        ) from None


def _require_file(path: Path) -> None:
    if path.is_dir():
        raise FsError(f"{path} is a directory; use list to see what it contains.")
    if not path.exists():
        raise FsError(f"File not found: {path}.")


def _require_dir(path: Path) -> None:
    if not path.exists():
        raise FsError(f"Directory not found: {path}.")
    if not path.is_dir():
        raise FsError(f"{path} is not a directory.")


def _lines(text: str) -> list[str]:
    """Split on newlines, keeping them ("".join gives the text back; \\r stays in the line)."""
    parts = text.split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def _count_lines(text: str) -> int:
    return len(_lines(text))


def _cut(line: str, limit: int) -> str:
    return line if len(line) <= limit else f"{line[:limit]}… [{len(line) - limit} more chars]"


# --- the git patch ------------------------------------------------------------------------


def git_patch(path: Path, old: str | None, new: str) -> str:
    """One ``diff --git`` section with absolute paths; ``old=None`` means a new file."""
    name = str(path)
    body = list(
        difflib.unified_diff(
            _lines(old or ""), _lines(new), "/dev/null" if old is None else name, name, n=3
        )
    )
    if old is not None and not body:
        return ""  # nothing changed
    header = [f"diff --git {name} {name}\n"]
    if old is None:
        header.append("new file mode 100644\n")
        if not body:  # an empty new file has no hunks; git still names both sides
            body = ["--- /dev/null\n", f"+++ {name}\n"]
    out = header
    for line in body:
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


def _diff_meta(path: Path, old: str | None, new: str, line: int) -> Meta:
    operation = "add" if old is None else "modify"
    change = {"operation": operation, "path": str(path), "fileType": "text"}
    return {
        "crow/diff": {"changes": [change], "patch": git_patch(path, old, new)},
        "crow/locations": [{"path": str(path), "line": line}],
    }


def _first_changed_line(old: str, new: str) -> int:
    for n, (a, b) in enumerate(zip(_lines(old), _lines(new), strict=False), start=1):
        if a != b:
            return n
    return min(_count_lines(old), _count_lines(new)) + 1


# --- tolerant matching --------------------------------------------------------------------


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


# --- the tools ----------------------------------------------------------------------------


class FsTools:
    """The tool bodies, each returning a `CallToolResult` (errors included)."""

    def __init__(self, roots: Roots) -> None:
        self.roots = roots
        self._write_lock = threading.Lock()  # sync tools run on worker threads

    def read(self, path: str, offset: int = 1, limit: int | None = None) -> CallToolResult:
        if offset < 1:
            raise FsError("offset is the 1-based first line to read; it must be at least 1.")
        if limit is not None and limit < 1:
            raise FsError("limit must be at least 1 (or omitted for the whole file).")
        file = self.roots.resolve(path)
        _require_file(file)
        max_lines = limit if limit is not None else READ_MAX_LINES
        out: list[str] = []
        size = 0
        seen = 0  # lines read so far
        more = False
        with file.open("rb") as fh:
            if _is_binary(fh.read(SNIFF_BYTES)):
                raise FsError(f"{file} is a binary file; read only shows UTF-8 text.")
            fh.seek(0)
            for raw in fh:
                seen += 1
                if seen < offset:
                    continue
                if len(out) >= max_lines:
                    more = True
                    break
                try:
                    text = raw.decode("utf-8").rstrip("\r\n")
                except UnicodeDecodeError:
                    raise FsError(
                        f"{file} is not valid UTF-8 (line {seen}); read only shows text."
                    ) from None
                entry = f"{seen:>6}\t{_cut(text, MAX_LINE_CHARS)}\n"
                size += len(entry.encode())
                if out and size > READ_MAX_BYTES:
                    more = True
                    break
                out.append(entry)
        last = offset + len(out) - 1
        meta: Meta = {"crow/locations": [{"path": str(file), "line": offset}]}
        if not out:
            if offset == 1:
                return _result(f"{file} is empty.", meta)
            raise FsError(f"offset {offset} is past the end of {file}, which has {seen} lines.")
        if more:
            cap = "limit" if limit is not None and len(out) >= limit else "output cap"
            out.append(
                f"[Showing lines {offset}-{last} ({cap}); "
                f"call read with offset={last + 1} to read more.]\n"
            )
        return _result("".join(out).rstrip("\n"), meta)

    def write(self, path: str, content: str) -> CallToolResult:
        file = self.roots.resolve(path)
        if file.is_dir():
            raise FsError(f"{file} is a directory; write needs a file path.")
        with self._write_lock:
            old: str | None = None
            if file.exists():
                old = file.read_bytes().decode("utf-8", errors="replace")
            file.parent.mkdir(parents=True, exist_ok=True)
            file.write_bytes(content.encode("utf-8"))
        lines = _count_lines(content)
        verb = "Created" if old is None else "Overwrote"
        plural = "" if lines == 1 else "s"
        line = 1 if old is None else _first_changed_line(old, content)
        meta = _diff_meta(file, old, content, line)
        return _result(f"{verb} {file} ({lines} line{plural}).", meta)

    def edit(
        self, path: str, old_text: str, new_text: str, replace_all: bool = False
    ) -> CallToolResult:
        if not old_text:
            raise FsError("old_text is empty; use write to create or replace a whole file.")
        if old_text == new_text:
            raise FsError("old_text and new_text are identical; there is nothing to change.")
        file = self.roots.resolve(path)
        with self._write_lock:
            content = _read_text(file)
            new, note = self._replace(file, content, old_text, new_text, replace_all)
            file.write_bytes(new.encode("utf-8"))
        line = _first_changed_line(content, new)
        return _result(f"Edited {file}: {note}", _diff_meta(file, content, new, line))

    @staticmethod
    def _replace(
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
        lines = _lines(content)
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

    def list(self, path: str = ".", depth: int = 1) -> CallToolResult:
        if depth < 1:
            raise FsError("depth must be at least 1 (1 lists the directory's own entries).")
        base = self.roots.resolve(path)
        _require_dir(base)
        entries: list[str] = []
        full = False

        def walk(directory: Path, prefix: str, level: int) -> None:
            nonlocal full
            try:
                with os.scandir(directory) as it:
                    children = sorted(it, key=lambda e: e.name)
            except OSError:
                return  # unreadable: listed, not entered
            for child in children:
                if child.name in SKIP_DIRS:
                    continue
                if len(entries) >= LIST_MAX_ENTRIES:
                    full = True
                    return
                is_dir = child.is_dir()
                entries.append(f"{prefix}{child.name}{'/' if is_dir else ''}")
                if level < depth and child.is_dir(follow_symlinks=False):
                    walk(Path(child.path), f"{prefix}{child.name}/", level + 1)
                    if full:
                        return

        walk(base, "", 1)
        meta: Meta = {"crow/locations": [{"path": str(base)}]}
        if not entries:
            return _result(f"{base}/ is empty.", meta)
        out = [f"{base}/", *entries]
        if full:
            out.append(
                f"[Stopped at {LIST_MAX_ENTRIES} entries; list a subdirectory or a lower depth.]"
            )
        return _result("\n".join(out), meta)

    def glob(self, pattern: str, path: str = ".") -> CallToolResult:
        if not pattern or Path(pattern).is_absolute() or ".." in Path(pattern).parts:
            raise FsError(
                "pattern must be relative to path and stay below it (no leading / and no '..')."
            )
        base = self.roots.resolve(path)
        _require_dir(base)
        found: list[tuple[float, str]] = []
        for match in base.glob(pattern):
            rel = match.relative_to(base)
            if SKIP_DIRS.intersection(rel.parts) or not self._inside(match):
                continue
            try:
                if not match.is_file():
                    continue
                found.append((match.stat().st_mtime, rel.as_posix()))
            except OSError:
                continue
        meta: Meta = {"crow/locations": [{"path": str(base)}]}
        if not found:
            return _result(f"No files match {pattern!r} under {base}.", meta)
        found.sort(key=lambda item: (-item[0], item[1]))
        out = [rel for _, rel in found[:GLOB_MAX_FILES]]
        if len(found) > GLOB_MAX_FILES:
            out.append(
                f"[Showing the {GLOB_MAX_FILES} newest of {len(found)} files; "
                "use a narrower pattern or path.]"
            )
        return _result("\n".join(out), meta)

    def grep(
        self,
        pattern: str,
        path: str = ".",
        glob: str | None = None,
        ignore_case: bool = False,
        max_results: int = 200,
    ) -> CallToolResult:
        if max_results < 1:
            raise FsError("max_results must be at least 1.")
        try:
            regex = re.compile(pattern, re.IGNORECASE if ignore_case else 0)
        except re.error as exc:
            raise FsError(f"Invalid regular expression {pattern!r}: {exc}.") from None
        base = self.roots.resolve(path)
        if not base.exists():
            raise FsError(f"Path not found: {base}.")
        out: list[str] = []
        capped = False
        for file, rel in self._files(base, glob):
            for n, line in self._text_lines(file):
                if regex.search(line):
                    if len(out) >= max_results:
                        capped = True
                        break
                    out.append(f"{rel}:{n}:{_cut(line, GREP_LINE_CHARS)}")
            if capped:
                break
        meta: Meta = {"crow/locations": [{"path": str(base)}]}
        if not out:
            return _result(f"No matches for {pattern!r} under {base}.", meta)
        if capped:
            out.append(
                f"[Stopped at {max_results} matches; narrow the pattern, path or glob, "
                "or raise max_results.]"
            )
        return _result("\n".join(out), meta)

    def _inside(self, path: Path) -> bool:
        try:
            self.roots.resolve(str(path))
        except (OutsideRoots, OSError, RuntimeError):
            return False
        return True

    def _files(self, base: Path, glob: str | None) -> Iterator[tuple[Path, str]]:
        """Files under ``base`` (or ``base`` itself), sorted, with paths relative to it."""
        if base.is_file():
            if glob is None or fnmatch.fnmatch(base.name, glob):
                yield base, base.name
            return
        for directory, dirs, files in os.walk(base):
            dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
            for name in sorted(files):
                file = Path(directory, name)
                rel = file.relative_to(base).as_posix()
                if glob is not None and not (
                    fnmatch.fnmatch(name, glob) or fnmatch.fnmatch(rel, glob)
                ):
                    continue
                if file.is_symlink() and not self._inside(file):
                    continue
                yield file, rel

    @staticmethod
    def _text_lines(file: Path) -> Iterator[tuple[int, str]]:
        """A text file's numbered lines; nothing for a binary, huge or unreadable file."""
        try:
            if file.stat().st_size > GREP_MAX_FILE_BYTES:
                return
            data = file.read_bytes()
        except OSError:
            return
        if _is_binary(data):
            return
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return
        for n, line in enumerate(text.split("\n"), start=1):
            yield n, line.removesuffix("\r")


# --- the server ---------------------------------------------------------------------------

PathArg = Annotated[str, Field(description="File path, relative to the working directory.")]
DirArg = Annotated[str, Field(description="Directory, relative to the working directory.")]

_READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)


def build_server(roots: Roots) -> MCPServer:
    """An `MCPServer` offering the six filesystem tools over ``roots``."""
    tools = FsTools(roots)
    allowed = ", ".join(str(root) for root in roots.resolved)
    server: MCPServer = MCPServer(
        "fs",
        instructions=(
            f"Files inside {allowed}. Relative paths start at {roots.resolved[0]}; "
            "paths outside these directories are refused."
        ),
    )

    def read(
        path: PathArg,
        offset: Annotated[int, Field(description="First line to show, 1-based.")] = 1,
        limit: Annotated[
            int | None, Field(description="How many lines (default: all, up to 2000).")
        ] = None,
    ) -> CallToolResult:
        """Read a UTF-8 text file, numbered like `cat -n`.

        Shows up to 2000 lines or 256 KiB; a final note says how to read more.
        """
        return _guard(lambda: tools.read(path, offset, limit))

    def write(
        path: PathArg,
        content: Annotated[str, Field(description="The whole new content of the file.")],
    ) -> CallToolResult:
        """Create a file or replace all of its content; missing parent directories are made."""
        return _guard(lambda: tools.write(path, content))

    def edit(
        path: PathArg,
        old_text: Annotated[str, Field(description="Text to find, copied from the file.")],
        new_text: Annotated[str, Field(description="Its replacement.")],
        replace_all: Annotated[
            bool, Field(description="Replace every occurrence instead of exactly one.")
        ] = False,
    ) -> CallToolResult:
        """Replace old_text with new_text in a file.

        old_text must occur exactly once unless replace_all is set.  With no exact match,
        a match ignoring indentation and trailing whitespace is used (if unique) and
        new_text is re-indented to fit.
        """
        return _guard(lambda: tools.edit(path, old_text, new_text, replace_all))

    def list_(
        path: DirArg = ".",
        depth: Annotated[int, Field(description="1 lists the entries, 2 also theirs, ...")] = 1,
    ) -> CallToolResult:
        """List a directory, sorted, directories ending in / (skips .git)."""
        return _guard(lambda: tools.list(path, depth))

    def glob(
        pattern: Annotated[str, Field(description="Glob such as **/*.py, relative to path.")],
        path: DirArg = ".",
    ) -> CallToolResult:
        """Find files by glob pattern, newest first (at most 500), relative to path."""
        return _guard(lambda: tools.glob(pattern, path))

    def grep(
        pattern: Annotated[str, Field(description="Python regular expression.")],
        path: Annotated[str, Field(description="File or directory to search.")] = ".",
        glob: Annotated[
            str | None, Field(description="Only files whose name or path matches, e.g. *.py.")
        ] = None,
        ignore_case: bool = False,
        max_results: Annotated[int, Field(description="Stop after this many lines.")] = 200,
    ) -> CallToolResult:
        """Search text files for a regex; prints path:line:text (skips binary, .git, >2 MiB)."""
        return _guard(lambda: tools.grep(pattern, path, glob, ignore_case, max_results))

    registrations: list[tuple[Callable[..., CallToolResult], str, str, ToolAnnotations]] = [
        (read, "read", "read", _READ_ONLY),
        (write, "write", "edit", ToolAnnotations(
            read_only_hint=False, destructive_hint=True, idempotent_hint=True,
            open_world_hint=False,
        )),
        (edit, "edit", "edit", ToolAnnotations(
            read_only_hint=False, destructive_hint=True, idempotent_hint=False,
            open_world_hint=False,
        )),
        (list_, "list", "read", _READ_ONLY),
        (glob, "glob", "search", _READ_ONLY),
        (grep, "grep", "search", _READ_ONLY),
    ]  # fmt: skip
    for fn, name, kind, hints in registrations:
        server.add_tool(fn, name=name, annotations=hints, meta={"crow/kind": kind})
    return server


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m crow.servers.fs",
        description="Crow's filesystem MCP server over stdio.",
    )
    parser.add_argument(
        "--root",
        action="append",
        metavar="DIR",
        help="a directory the tools may use (repeatable; the first is the working directory; "
        "default: the current directory)",
    )
    args = parser.parse_args(argv)
    dirs = [Path(d) for d in args.root] if args.root else [Path.cwd()]
    for d in dirs:
        if not d.is_dir():
            parser.error(f"--root {d}: not a directory")
    return run_stdio(build_server(Roots(cwd=dirs[0], extra=tuple(dirs[1:]))))


if __name__ == "__main__":
    sys.exit(main())
