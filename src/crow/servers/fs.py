"""The built-in filesystem MCP server: read, write, edit, list, glob, grep inside the roots.

Every path is looked up and opened through ``_fs_safe``: component by component from a
root's directory fd, never following a link the kernel's way, so ``..``, absolute paths
elsewhere and symlinks pointing out are refused alike, even when the tree changes during
the call (issue #11).  Symlinks that stay inside the roots are followed.  Only regular files
are read or written: a FIFO, socket or device is refused at once, never opened blocking.
Failures the model can fix (outside the roots, not found, binary, an ambiguous edit, a bad
regex) come back as tool results with ``isError`` and one sentence; they never reach the
server's crash path.

Results carry ``_meta`` for the agent (``crow.tools.surface``):

- ``crow/locations``: ``[{"path": <abs>, "line"?: n}]``, the files touched;
- ``crow/diff`` (write, edit): ``{"changes": [{"operation": "add" | "modify", "path":
  <abs>, "fileType": "text"}], "patch": <git patch>}``, ACP v2 diff content.  The patch
  is one ``diff --git`` section with absolute paths and no commit headers
  (ACP-V2.md §8.2).

This module owns the tools (`FsTools`, their checks and result text) and the MCP server.
Opening inside the roots lives in ``_fs_safe``, text decoding and `FsError` in ``_fs_text``,
edit matching in ``_fs_edit``, the git patch and diff ``_meta`` in ``_fs_patch``, and tree
walking for list/glob/grep in ``_fs_walk``.

Run alone: ``python -m crow.servers.fs --root DIR [--root DIR ...]`` (stdio).
"""

from __future__ import annotations

import argparse
import os
import re
import stat
import sys
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, closing
from pathlib import Path
from typing import Annotated, BinaryIO

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field

from ..extensions import LOCATIONS, TOOL_KIND
from ._fs_edit import replace_text
from ._fs_patch import Meta as Meta
from ._fs_patch import diff_meta, first_changed_line
from ._fs_patch import git_patch as git_patch
from ._fs_safe import open_dir, open_file
from ._fs_text import SNIFF_BYTES as SNIFF_BYTES
from ._fs_text import FsError, count_lines, cut, decode_text, is_binary
from ._fs_walk import GREP_MAX_FILE_BYTES as GREP_MAX_FILE_BYTES
from ._fs_walk import SKIP_DIRS as SKIP_DIRS
from ._fs_walk import glob_files, list_entries, text_lines, tree_texts
from ._stdio import run_stdio
from .roots import OutsideRoots, Roots, stat_in
from .shared import connection_state, scoped_lifespan

__all__ = ["FsError", "FsTools", "build_server", "main"]
# Meta, git_patch and the limits imported ``as`` themselves above stay importable from
# here, where they were defined before the split.

#: read's default window: whole file up to this many lines ...
READ_MAX_LINES = 2000
#: ... or this many bytes of output, whichever comes first (the model's context is the budget).
READ_MAX_BYTES = 256 * 1024
#: A longer line is cut in read and grep output (minified files would eat the budget).
MAX_LINE_CHARS = 2000
GREP_LINE_CHARS = 500
LIST_MAX_ENTRIES = 1000
GLOB_MAX_FILES = 500


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


def _overwrite(fh: BinaryIO, data: bytes) -> None:
    """Replace the open file's content in place (its inode, mode and links are kept)."""
    fh.seek(0)
    fh.write(data)
    fh.truncate()


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
        opened = open_file(self.roots, path, "read")
        file = opened.path
        max_lines = limit if limit is not None else READ_MAX_LINES
        out: list[str] = []
        size = 0
        seen = 0  # lines read so far
        more = False
        with opened.file as fh:
            if is_binary(fh.read(SNIFF_BYTES)):
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
                entry = f"{seen:>6}\t{cut(text, MAX_LINE_CHARS)}\n"
                size += len(entry.encode())
                if out and size > READ_MAX_BYTES:
                    more = True
                    break
                out.append(entry)
        last = offset + len(out) - 1
        meta: Meta = {LOCATIONS: [{"path": str(file), "line": offset}]}
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
        data = content.encode("utf-8")  # before the file is made: a bad string makes nothing
        with self._write_lock:
            opened = open_file(self.roots, path, "write")
            file = opened.path
            with opened.file as fh:
                old = None if opened.created else fh.read().decode("utf-8", errors="replace")
                _overwrite(fh, data)
        lines = count_lines(content)
        verb = "Created" if old is None else "Overwrote"
        plural = "" if lines == 1 else "s"
        line = 1 if old is None else first_changed_line(old, content)
        meta = diff_meta(file, old, content, line)
        return _result(f"{verb} {file} ({lines} line{plural}).", meta)

    def edit(
        self, path: str, old_text: str, new_text: str, replace_all: bool = False
    ) -> CallToolResult:
        if not old_text:
            raise FsError("old_text is empty; use write to create or replace a whole file.")
        if old_text == new_text:
            raise FsError("old_text and new_text are identical; there is nothing to change.")
        with self._write_lock:
            opened = open_file(self.roots, path, "edit")
            file = opened.path
            with opened.file as fh:  # read and written through one fd: no swap in between
                content = decode_text(file, fh.read())
                new, note = replace_text(file, content, old_text, new_text, replace_all)
                _overwrite(fh, new.encode("utf-8"))
        line = first_changed_line(content, new)
        return _result(f"Edited {file}: {note}", diff_meta(file, content, new, line))

    def list(self, path: str = ".", depth: int = 1) -> CallToolResult:
        if depth < 1:
            raise FsError("depth must be at least 1 (1 lists the directory's own entries).")
        base, fd = open_dir(self.roots, path)
        try:
            entries, full = list_entries(self.roots, base, fd, depth, LIST_MAX_ENTRIES)
        finally:
            os.close(fd)
        meta: Meta = {LOCATIONS: [{"path": str(base)}]}
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
        base, fd = open_dir(self.roots, path)
        try:
            found = glob_files(self.roots, base, fd, pattern)
        finally:
            os.close(fd)
        meta: Meta = {LOCATIONS: [{"path": str(base)}]}
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
        base, st = stat_in(self.roots, path)
        if st is None:
            raise FsError(f"Path not found: {base}.")
        out: list[str] = []
        capped = False
        texts = tree_texts(self.roots, path, base, stat.S_ISDIR(st.st_mode), glob)
        with closing(texts):  # a capped search closes the walk's directory fds at once
            for rel, text in texts:
                for n, line in text_lines(text):
                    if regex.search(line):
                        if len(out) >= max_results:
                            capped = True
                            break
                        out.append(f"{rel}:{n}:{cut(line, GREP_LINE_CHARS)}")
                if capped:
                    break
        meta: Meta = {LOCATIONS: [{"path": str(base)}]}
        if not out:
            return _result(f"No matches for {pattern!r} under {base}.", meta)
        if capped:
            out.append(
                f"[Stopped at {max_results} matches; narrow the pattern, path or glob, "
                "or raise max_results.]"
            )
        return _result("\n".join(out), meta)


# --- the server ---------------------------------------------------------------------------

PathArg = Annotated[str, Field(description="File path, relative to the working directory.")]
DirArg = Annotated[str, Field(description="Directory, relative to the working directory.")]

_READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)


def build_server(roots: Roots | None = None) -> MCPServer:
    """An `MCPServer` offering the six filesystem tools.

    Each connection's tools work inside its own roots (``crow.servers.shared``): the
    `Roots` its opener gave, else ``roots``.  Without ``roots`` the server is Crow's
    shared one, and a connection that brings no roots is refused.
    """

    @asynccontextmanager
    async def connect(scope: Roots) -> AsyncIterator[FsTools]:
        yield FsTools(scope)

    server: MCPServer = MCPServer(
        "fs",
        instructions=(
            "Files inside the session's directories (its working directory and any others "
            "it was given). Relative paths start at the working directory; paths outside "
            "these directories are refused."
        ),
        lifespan=scoped_lifespan(connect, name="fs", default=roots),
    )

    def read(
        ctx: Context,
        path: PathArg,
        offset: Annotated[int, Field(description="First line to show, 1-based.")] = 1,
        limit: Annotated[
            int | None, Field(description="How many lines (default: all, up to 2000).")
        ] = None,
    ) -> CallToolResult:
        """Read a UTF-8 text file, numbered like `cat -n`.

        Shows up to 2000 lines or 256 KiB; a final note says how to read more.
        """
        return _guard(lambda: _tools(ctx).read(path, offset, limit))

    def write(
        ctx: Context,
        path: PathArg,
        content: Annotated[str, Field(description="The whole new content of the file.")],
    ) -> CallToolResult:
        """Create a file or replace all of its content; missing parent directories are made."""
        return _guard(lambda: _tools(ctx).write(path, content))

    def edit(
        ctx: Context,
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
        return _guard(lambda: _tools(ctx).edit(path, old_text, new_text, replace_all))

    def list_(
        ctx: Context,
        path: DirArg = ".",
        depth: Annotated[int, Field(description="1 lists the entries, 2 also theirs, ...")] = 1,
    ) -> CallToolResult:
        """List a directory, sorted, directories ending in / (skips .git)."""
        return _guard(lambda: _tools(ctx).list(path, depth))

    def glob(
        ctx: Context,
        pattern: Annotated[str, Field(description="Glob such as **/*.py, relative to path.")],
        path: DirArg = ".",
    ) -> CallToolResult:
        """Find files by glob pattern, newest first (at most 500), relative to path."""
        return _guard(lambda: _tools(ctx).glob(pattern, path))

    def grep(
        ctx: Context,
        pattern: Annotated[str, Field(description="Python regular expression.")],
        path: Annotated[str, Field(description="File or directory to search.")] = ".",
        glob: Annotated[
            str | None, Field(description="Only files whose name or path matches, e.g. *.py.")
        ] = None,
        ignore_case: bool = False,
        max_results: Annotated[int, Field(description="Stop after this many lines.")] = 200,
    ) -> CallToolResult:
        """Search text files for a regex; prints path:line:text (skips binary, .git, >2 MiB)."""
        return _guard(lambda: _tools(ctx).grep(pattern, path, glob, ignore_case, max_results))

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
        server.add_tool(fn, name=name, annotations=hints, meta={TOOL_KIND: kind})
    return server


def _tools(ctx: Context) -> FsTools:
    """The tools of the calling connection, in its roots (set when it opened)."""
    return connection_state(ctx, FsTools)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="crow mcp fs",
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
