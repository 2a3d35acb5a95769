"""The fs server's confinement under attack (issue #11): symlink races, special files, links.

The tool bodies are called directly (`FsTools`, through the same `_guard` the MCP server
uses) so a race can be hammered thousands of times in a few seconds.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from mcp_types import CallToolResult, TextContent

from crow.servers.fs import FsTools, _guard
from crow.servers.roots import Roots

#: How long the symlink-swap race is hammered.
RACE_SECONDS = 3.0
#: A tool that blocks longer than this has hung (on a FIFO, say).
HANG_S = 5.0

SECRET = "SECRET outside the roots\n"

AT_FDCWD = -100
RENAME_EXCHANGE = 2
_renameat2 = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)


@dataclass
class Tree:
    root: Path  # the cwd root
    outside: Path  # not a root

    @property
    def tools(self) -> FsTools:
        return FsTools(Roots(self.root))


@pytest.fixture
def tree(tmp_path: Path) -> Tree:
    t = Tree(tmp_path / "root", tmp_path / "outside")
    t.root.mkdir()
    t.outside.mkdir()
    (t.outside / "t.txt").write_text(SECRET)
    return t


def text(result: CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


def bounded(op: Callable[[], CallToolResult], unblock: Path | None = None) -> CallToolResult:
    """Run ``op`` on a thread and fail (not hang) if it takes longer than `HANG_S`.

    A hung call blocked opening the FIFO ``unblock`` is released by opening its other end,
    so no thread is left behind.
    """
    box: list[CallToolResult] = []
    worker = threading.Thread(target=lambda: box.append(op()), daemon=True)
    worker.start()
    worker.join(HANG_S)
    if worker.is_alive():
        if unblock is not None:
            fd = os.open(unblock, os.O_RDWR | os.O_NONBLOCK)  # both ends: releases a reader
            worker.join(HANG_S)
            os.close(fd)
        pytest.fail(f"the tool call blocked for more than {HANG_S} s")
    return box[0]


def exchange(a: Path, b: Path) -> None:
    """Swap two names atomically (Linux renameat2 RENAME_EXCHANGE)."""
    if _renameat2(AT_FDCWD, bytes(a), AT_FDCWD, bytes(b), RENAME_EXCHANGE) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), str(a))


# --- the symlink-swap race --------------------------------------------------------------------


@pytest.mark.skipif(_renameat2 is None, reason="needs renameat2 (Linux, glibc 2.28+)")
def test_swapping_a_directory_for_a_symlink_never_escapes(tree: Tree) -> None:
    """One thread swaps root/d between a real directory and a symlink to outside/, while
    every tool works on root/d; nothing outside is ever written, read or listed."""
    (tree.outside / "outside_only.txt").write_text("a name only seen outside\n")
    d = tree.root / "d"
    d.mkdir()
    (d / "t.txt").write_text("inside\n")
    link = tree.root / "d_link"
    link.symlink_to(tree.outside, target_is_directory=True)
    tools = tree.tools
    stop = threading.Event()
    swaps = 0

    def swapper() -> None:  # d is always there: a directory or a link out, never missing
        nonlocal swaps
        while not stop.is_set():
            exchange(d, link)
            swaps += 1

    calls: list[Callable[[], CallToolResult]] = [
        lambda: tools.write("d/t.txt", "written\n"),
        lambda: tools.read("d/t.txt"),
        lambda: tools.edit("d/t.txt", "e", "E", replace_all=True),
        lambda: tools.write("d/new.txt", "created\n"),
        lambda: tools.write("d/sub/new.txt", "created\n"),  # a directory made on the way
        lambda: tools.grep("S.CRET", "d"),
        lambda: tools.list("d"),
        lambda: tools.glob("*", "d"),
    ]
    thread = threading.Thread(target=swapper, daemon=True)
    thread.start()
    made = 0
    leaked: list[str] = []
    try:
        deadline = time.monotonic() + RACE_SECONDS
        while time.monotonic() < deadline:
            for call in calls:
                result = _guard(call)
                made += 1
                if "SECRET" in text(result) or "outside_only" in text(result):
                    leaked.append(text(result))
    finally:
        stop.set()
        thread.join(HANG_S)
    assert not thread.is_alive()
    assert swaps > 100 and made > 100, (swaps, made)  # the race was really run
    assert leaked == []
    assert (tree.outside / "t.txt").read_text() == SECRET
    assert sorted(p.name for p in tree.outside.iterdir()) == ["outside_only.txt", "t.txt"]


# --- FIFOs, sockets, devices ------------------------------------------------------------------


def test_reading_a_fifo_fails_at_once(tree: Tree) -> None:
    fifo = tree.root / "pipe"
    os.mkfifo(fifo)
    result = bounded(lambda: _guard(lambda: tree.tools.read("pipe")), unblock=fifo)
    assert result.is_error
    assert text(result) == f"{fifo} is a FIFO, not a regular file."


@pytest.mark.parametrize("tool", ["write", "edit"])
def test_writing_a_fifo_fails_at_once(tree: Tree, tool: str) -> None:
    fifo = tree.root / "pipe"
    os.mkfifo(fifo)
    tools = tree.tools
    op = {
        "write": lambda: _guard(lambda: tools.write("pipe", "x")),
        "edit": lambda: _guard(lambda: tools.edit("pipe", "a", "b")),
    }[tool]
    result = bounded(op, unblock=fifo)
    assert result.is_error and "is a FIFO, not a regular file" in text(result)


def test_reading_a_character_device_is_refused() -> None:
    result = bounded(lambda: _guard(lambda: FsTools(Roots(Path("/dev"))).read("null")))
    assert result.is_error
    assert text(result) == "/dev/null is a character device, not a regular file."


def test_grep_skips_a_fifo_in_the_tree(tree: Tree) -> None:
    fifo = tree.root / "sub" / "pipe"
    fifo.parent.mkdir()
    os.mkfifo(fifo)
    (tree.root / "sub" / "z.txt").write_text("needle\n")
    result = bounded(lambda: _guard(lambda: tree.tools.grep("needle")), unblock=fifo)
    assert not result.is_error and text(result) == "sub/z.txt:1:needle"
    result = bounded(lambda: _guard(lambda: tree.tools.grep("needle", "sub/pipe")), unblock=fifo)
    assert result.is_error and "is a FIFO, not a regular file" in text(result)
    listing = text(_guard(lambda: tree.tools.list("sub")))
    assert listing.splitlines()[1:] == ["pipe", "z.txt"]


# --- links --------------------------------------------------------------------------------------


def test_symlinks_inside_the_roots_are_followed(tree: Tree) -> None:
    """Policy: a link that stays inside the roots works like the file or directory it names."""
    tools = tree.tools
    (tree.root / "lib").mkdir()
    (tree.root / "lib" / "a.txt").write_text("alpha\n")
    (tree.root / "link.txt").symlink_to("lib/a.txt")
    (tree.root / "libs").symlink_to("lib", target_is_directory=True)
    (tree.root / "lib" / "up").symlink_to("../lib", target_is_directory=True)
    real = (tree.root / "lib" / "a.txt").resolve()

    read = _guard(lambda: tools.read("link.txt"))
    assert text(read) == "     1\talpha" and read.meta == {
        "crow/locations": [{"path": str(real), "line": 1}]
    }
    assert text(_guard(lambda: tools.read("libs/up/up/a.txt"))) == "     1\talpha"
    written = _guard(lambda: tools.write("libs/a.txt", "beta\n"))
    assert text(written) == f"Overwrote {real} (1 line)."
    assert (tree.root / "lib" / "a.txt").read_text() == "beta\n"
    assert (tree.root / "link.txt").is_symlink()  # written through, not replaced
    _guard(lambda: tools.edit("link.txt", "beta", "gamma"))
    assert (tree.root / "lib" / "a.txt").read_text() == "gamma\n"
    created = _guard(lambda: tools.write("libs/new/b.txt", "new\n"))
    assert not created.is_error and (tree.root / "lib" / "new" / "b.txt").read_text() == "new\n"
    assert text(_guard(lambda: tools.grep("gamma", "link.txt"))) == "a.txt:1:gamma"
    # A tree walk reads linked files but never enters a linked directory (libs/, lib/up/).
    assert text(_guard(lambda: tools.grep("gamma"))).splitlines() == [
        "link.txt:1:gamma", "lib/a.txt:1:gamma"]  # fmt: skip
    assert text(_guard(lambda: tools.list("libs"))).splitlines()[1:] == [
        "a.txt", "new/", "up/"]  # fmt: skip


def test_links_out_of_the_roots_are_refused_for_read_and_write(tree: Tree) -> None:
    tools = tree.tools
    (tree.root / "out").symlink_to(tree.outside, target_is_directory=True)
    (tree.root / "file").symlink_to(tree.outside / "t.txt")
    (tree.root / "rel").symlink_to("../outside/t.txt")
    (tree.root / "hop").symlink_to("rel")  # in-root link to a link that leaves
    (tree.root / "new").symlink_to(tree.outside / "new.txt")  # dangling, outside
    ops: list[Callable[[], CallToolResult]] = []
    for path in ("out/t.txt", "file", "rel", "hop", "new", "out/sub/x.txt"):
        ops += [
            lambda p=path: tools.read(p),
            lambda p=path: tools.write(p, "pwned\n"),
            lambda p=path: tools.edit(p, "SECRET", "pwned"),
            lambda p=path: tools.grep("SECRET", p),
        ]
    for op in ops:
        result = _guard(op)
        assert result.is_error and "outside the allowed roots" in text(result), text(result)
    assert text(_guard(lambda: tools.grep("S.CRET"))).startswith("No matches")
    assert (tree.outside / "t.txt").read_text() == SECRET
    assert sorted(p.name for p in tree.outside.iterdir()) == ["t.txt"]


def test_dotdot_cannot_climb_out(tree: Tree) -> None:
    tools = tree.tools
    (tree.root / "a").mkdir()
    (tree.root / "a" / "in.txt").write_text("in\n")
    for path in ("../outside/t.txt", "a/../../outside/t.txt", "a/../../../" + str(tree.outside)):
        for op in (lambda p=path: tools.read(p), lambda p=path: tools.write(p, "x")):
            result = _guard(op)
            assert result.is_error and "outside the allowed roots" in text(result), text(result)
    assert text(_guard(lambda: tools.read("a/../a/./in.txt"))) == "     1\tin"
    assert (tree.outside / "t.txt").read_text() == SECRET
