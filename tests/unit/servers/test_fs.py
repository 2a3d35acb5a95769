"""The filesystem MCP server, driven through a real MCP client (in-process, and once over stdio)."""

from __future__ import annotations

import asyncio
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcp_types import CallToolResult, TextContent

from crow.servers.fs import build_server
from crow.servers.roots import OutsideRoots, Roots


@dataclass
class Tree:
    root: Path  # the cwd root
    extra: Path  # a second root
    outside: Path  # not a root

    def client(self) -> Client:
        return Client(build_server(Roots(self.root, (self.extra,))))


@pytest.fixture
def tree(tmp_path: Path) -> Tree:
    t = Tree(tmp_path / "root", tmp_path / "extra", tmp_path / "outside")
    for d in (t.root, t.extra, t.outside):
        d.mkdir()
    (t.outside / "secret.txt").write_text("top secret\n")
    (t.root / "escape").symlink_to(t.outside, target_is_directory=True)
    (t.root / "secret_link.txt").symlink_to(t.outside / "secret.txt")
    (t.root / "dangling").symlink_to(t.outside / "not_yet.txt")
    return t


def text(result: CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


async def call(tree: Tree, name: str, **args: Any) -> CallToolResult:
    async with asyncio.timeout(10), tree.client() as c:
        return await c.call_tool(name, args)


async def ok(tree: Tree, name: str, **args: Any) -> CallToolResult:
    result = await call(tree, name, **args)
    assert not result.is_error, text(result)
    return result


async def refused(tree: Tree, name: str, **args: Any) -> str:
    result = await call(tree, name, **args)
    assert result.is_error, text(result)
    assert "\n" not in text(result)  # one sentence, not a traceback
    return text(result)


# --- Roots ----------------------------------------------------------------------------------


def test_roots_resolve_relative_to_cwd_without_expanding_home(tree: Tree) -> None:
    roots = Roots(tree.root, (tree.extra,))
    assert roots.resolve("a/b.txt") == tree.root.resolve() / "a" / "b.txt"
    assert roots.resolve("~/x") == tree.root.resolve() / "~" / "x"
    assert roots.resolve(str(tree.extra / "y")) == tree.extra.resolve() / "y"
    assert roots.resolve("sub/../z") == tree.root.resolve() / "z"


@pytest.mark.parametrize(
    "path", ["../outside/secret.txt", "escape/secret.txt", "secret_link.txt", "dangling", "/etc"]
)
def test_roots_refuse_escapes_with_a_one_line_message(tree: Tree, path: str) -> None:
    with pytest.raises(OutsideRoots) as info:
        Roots(tree.root, (tree.extra,)).resolve(path)
    message = str(info.value)
    assert isinstance(info.value, ValueError)
    assert repr(path) in message and str(tree.root.resolve()) in message
    assert str(tree.extra.resolve()) in message and "\n" not in message


# --- the tool list --------------------------------------------------------------------------


async def test_tools_carry_their_kind_and_annotations(tree: Tree) -> None:
    async with asyncio.timeout(10), tree.client() as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
    kinds = {name: (t.meta or {}).get("crow/kind") for name, t in tools.items()}
    assert kinds == {"read": "read", "write": "edit", "edit": "edit", "list": "read",
                     "glob": "search", "grep": "search"}  # fmt: skip
    for name in ("read", "list", "glob", "grep"):
        assert tools[name].annotations is not None and tools[name].annotations.read_only_hint
    for name in ("write", "edit"):
        hints = tools[name].annotations
        assert hints is not None and hints.destructive_hint and not hints.read_only_hint
    assert set(tools["grep"].input_schema["properties"]) == {
        "pattern", "path", "glob", "ignore_case", "max_results"}  # fmt: skip


# --- read -----------------------------------------------------------------------------------


async def test_read_numbers_lines_and_takes_a_range(tree: Tree) -> None:
    f = tree.root / "ten.txt"
    f.write_text("".join(f"line {i}\n" for i in range(1, 11)))
    whole = await ok(tree, "read", path="ten.txt")
    assert text(whole).splitlines()[0] == "     1\tline 1"
    assert text(whole).splitlines()[-1] == "    10\tline 10"
    assert whole.meta is not None
    assert whole.meta["crow/locations"] == [{"path": str(f.resolve()), "line": 1}]

    part = await ok(tree, "read", path="ten.txt", offset=3, limit=2)
    assert text(part).splitlines() == [
        "     3\tline 3",
        "     4\tline 4",
        "[Showing lines 3-4 (limit); call read with offset=5 to read more.]",
    ]
    assert part.meta is not None
    assert part.meta["crow/locations"] == [{"path": str(f.resolve()), "line": 3}]

    tail = await ok(tree, "read", path="ten.txt", offset=9, limit=5)
    assert text(tail) == "     9\tline 9\n    10\tline 10"
    assert "past the end" in await refused(tree, "read", path="ten.txt", offset=11)
    assert "not found" in await refused(tree, "read", path="nope.txt")


async def test_read_caps_lines_and_bytes_with_a_note(tree: Tree) -> None:
    (tree.root / "long.txt").write_text("x\n" * 2500)
    out = text(await ok(tree, "read", path="long.txt")).splitlines()
    assert len(out) == 2001 and out[-2].startswith("  2000\t")
    assert "offset=2001" in out[-1]

    (tree.root / "wide.txt").write_text(("y" * 300 + "\n") * 2000)
    wide = text(await ok(tree, "read", path="wide.txt"))
    *body, note = wide.splitlines()
    assert len("\n".join(body).encode()) <= 256 * 1024
    assert f"offset={len(body) + 1}" in note and len(body) < 2000


async def test_read_refuses_binary_files(tree: Tree) -> None:
    (tree.root / "blob.bin").write_bytes(b"PK\x03\x04\x00\x00binary")
    (tree.root / "latin1.txt").write_bytes("caf\xe9\n".encode("latin-1"))
    assert "binary" in await refused(tree, "read", path="blob.bin")
    assert "UTF-8" in await refused(tree, "read", path="latin1.txt")
    assert "directory" in await refused(tree, "read", path=".")


# --- write ----------------------------------------------------------------------------------


async def test_write_creates_parents_and_describes_the_diff(tree: Tree) -> None:
    result = await ok(tree, "write", path="new/deep/a.txt", content="one\ntwo\n")
    f = (tree.root / "new" / "deep" / "a.txt").resolve()
    assert f.read_text() == "one\ntwo\n"
    assert text(result) == f"Created {f} (2 lines)."
    assert result.meta is not None
    diff = result.meta["crow/diff"]
    assert diff["changes"] == [{"operation": "add", "path": str(f), "fileType": "text"}]
    assert diff["patch"] == (
        f"diff --git {f} {f}\nnew file mode 100644\n--- /dev/null\n+++ {f}\n"
        "@@ -0,0 +1,2 @@\n+one\n+two\n"
    )
    assert result.meta["crow/locations"] == [{"path": str(f), "line": 1}]

    again = await ok(tree, "write", path="new/deep/a.txt", content="one\nTWO")
    assert text(again) == f"Overwrote {f} (2 lines)."
    assert again.meta is not None
    diff = again.meta["crow/diff"]
    assert diff["changes"] == [{"operation": "modify", "path": str(f), "fileType": "text"}]
    assert diff["patch"] == (
        f"diff --git {f} {f}\n--- {f}\n+++ {f}\n@@ -1,2 +1,2 @@\n one\n-two\n+TWO\n"
        "\\ No newline at end of file\n"
    )
    assert again.meta["crow/locations"] == [{"path": str(f), "line": 2}]
    assert "directory" in await refused(tree, "write", path="new", content="x")


# --- edit -----------------------------------------------------------------------------------


async def test_edit_replaces_an_exact_unique_match(tree: Tree) -> None:
    f = tree.root / "a.py"
    f.write_text("a = 1\nb = 2\nc = 3\n")
    result = await ok(tree, "edit", path="a.py", old_text="b = 2", new_text="b = 20")
    assert f.read_text() == "a = 1\nb = 20\nc = 3\n"
    assert "replaced 1 occurrence" in text(result) and "tolerant" not in text(result)
    assert result.meta is not None
    p = str(f.resolve())
    assert result.meta["crow/locations"] == [{"path": p, "line": 2}]
    assert result.meta["crow/diff"]["changes"] == [
        {"operation": "modify", "path": p, "fileType": "text"}
    ]
    assert result.meta["crow/diff"]["patch"] == (
        f"diff --git {p} {p}\n--- {p}\n+++ {p}\n@@ -1,3 +1,3 @@\n a = 1\n-b = 2\n+b = 20\n c = 3\n"
    )


async def test_edit_refuses_an_ambiguous_match_unless_replace_all(tree: Tree) -> None:
    f = tree.root / "dup.txt"
    f.write_text("x = 1\ny = 1\nz = 1\n")
    message = await refused(tree, "edit", path="dup.txt", old_text="= 1", new_text="= 2")
    assert "3 places" in message and "replace_all" in message
    assert f.read_text() == "x = 1\ny = 1\nz = 1\n"

    result = await ok(
        tree, "edit", path="dup.txt", old_text="= 1", new_text="= 2", replace_all=True
    )
    assert "replaced 3 occurrences" in text(result)
    assert f.read_text() == "x = 2\ny = 2\nz = 2\n"


async def test_edit_refuses_text_that_is_not_there(tree: Tree) -> None:
    f = tree.root / "a.txt"
    f.write_text("hello\n")
    assert "not found" in await refused(tree, "edit", path="a.txt", old_text="bye", new_text="x")
    assert "identical" in await refused(tree, "edit", path="a.txt", old_text="he", new_text="he")
    assert "empty" in await refused(tree, "edit", path="a.txt", old_text="", new_text="x")
    assert f.read_text() == "hello\n"
    assert "not found" in await refused(tree, "edit", path="b.txt", old_text="a", new_text="b")
    (tree.root / "blob.bin").write_bytes(b"\x00\x01")
    assert "binary" in await refused(tree, "edit", path="blob.bin", old_text="a", new_text="b")


async def test_edit_tolerates_indentation_drift_and_reindents(tree: Tree) -> None:
    f = tree.root / "m.py"
    f.write_text(
        "class A:\n"
        "    def f(self):\n"
        "        if self.x:   \n"
        "            return 1\n"
        "        return 2\n"
    )
    # The model dropped the indentation and the trailing blanks; its new text is at
    # the same (wrong) indentation as its old text, with a nested block.
    old = "if self.x:\n    return 1\n"
    new = "if self.x:\n    log()\n    return 10\nelse:\n    pass\n"
    result = await ok(tree, "edit", path="m.py", old_text=old, new_text=new)
    assert "tolerant match" in text(result) and "line 3" in text(result)
    assert f.read_text() == (
        "class A:\n"
        "    def f(self):\n"
        "        if self.x:\n"
        "            log()\n"
        "            return 10\n"
        "        else:\n"
        "            pass\n"
        "        return 2\n"
    )
    assert result.meta is not None
    assert result.meta["crow/locations"] == [{"path": str(f.resolve()), "line": 3}]
    assert "+            log()\n" in result.meta["crow/diff"]["patch"]


async def test_edit_tolerant_match_from_deeper_indentation_and_crlf(tree: Tree) -> None:
    f = tree.root / "w.txt"
    f.write_bytes(b"top\r\n  a\r\n    b\r\nend\r\n")
    result = await ok(
        tree, "edit", path="w.txt", old_text="\t\ta\n\t\t  b", new_text="\t\tA\n\t\t  B\n\t\tC"
    )
    assert "tolerant" in text(result)
    assert f.read_bytes() == b"top\r\n  A\r\n    B\r\n  C\r\nend\r\n"


async def test_edit_tolerant_match_still_refuses_ambiguity(tree: Tree) -> None:
    f = tree.root / "t.py"
    content = "def a():\n    x = 1\n    y = 2\n\ndef b():\n        x = 1\n        y = 2\n"
    f.write_text(content)
    message = await refused(tree, "edit", path="t.py", old_text="x = 1\ny = 2", new_text="z = 3")
    assert "2 places" in message and "indentation" in message
    assert f.read_text() == content


# --- list, glob, grep ------------------------------------------------------------------------


async def test_list_sorts_marks_directories_and_skips_git(tree: Tree) -> None:
    base = tree.extra
    (base / "b.txt").write_text("b")
    (base / "a").mkdir()
    (base / "a" / "inner.txt").write_text("i")
    (base / ".git").mkdir()
    (base / ".git" / "HEAD").write_text("ref")
    shallow = text(await ok(tree, "list", path=str(base)))
    assert shallow.splitlines() == [f"{base.resolve()}/", "a/", "b.txt"]
    deep = text(await ok(tree, "list", path=str(base), depth=2))
    assert deep.splitlines()[1:] == ["a/", "a/inner.txt", "b.txt"]
    assert "not a directory" in await refused(tree, "list", path=str(base / "b.txt"))


async def test_list_is_capped(tree: Tree) -> None:
    many = tree.extra / "many"
    many.mkdir()
    for i in range(1005):
        (many / f"f{i:04}").touch()
    lines = text(await ok(tree, "list", path=str(many))).splitlines()
    assert len(lines) == 1 + 1000 + 1 and lines[1] == "f0000"
    assert "Stopped at 1000 entries" in lines[-1]


async def test_glob_lists_newest_first_relative_to_path(tree: Tree) -> None:
    src = tree.extra / "src"
    (src / "pkg").mkdir(parents=True)
    (src / ".git").mkdir()
    for i, name in enumerate(["old.py", "pkg/mid.py", "new.py", ".git/hook.py", "note.md"]):
        (src / name).write_text("x")
        os.utime(src / name, (1_000_000 + i, 1_000_000 + i))
    result = await ok(tree, "glob", pattern="**/*.py", path=str(src))
    assert text(result).splitlines() == ["new.py", "pkg/mid.py", "old.py"]
    assert "No files match" in text(await ok(tree, "glob", pattern="*.rs", path=str(src)))
    assert "'..'" in await refused(tree, "glob", pattern="../*", path=str(src))


async def test_glob_is_capped(tree: Tree) -> None:
    many = tree.extra / "many"
    many.mkdir()
    for i in range(510):
        (many / f"f{i:03}.txt").touch()
    lines = text(await ok(tree, "glob", pattern="*.txt", path=str(many))).splitlines()
    assert len(lines) == 501 and "500 newest of 510" in lines[-1]


async def test_grep_finds_lines_in_text_files_only(tree: Tree) -> None:
    base = tree.extra
    (base / "sub").mkdir()
    (base / "a.py").write_text("import os\nTODO: fix\n")
    (base / "sub" / "b.txt").write_text("nothing\ntodo later\n")
    (base / "bin.dat").write_bytes(b"TODO\x00\x01")
    (base / ".git").mkdir()
    (base / ".git" / "c.txt").write_text("TODO in git\n")
    (base / "huge.txt").write_text("TODO\n" + "x" * (2 * 1024 * 1024))

    hits = text(await ok(tree, "grep", pattern="TODO", path=str(base)))
    assert hits.splitlines() == ["a.py:2:TODO: fix"]
    hits = text(await ok(tree, "grep", pattern="todo", path=str(base), ignore_case=True))
    assert hits.splitlines() == ["a.py:2:TODO: fix", "sub/b.txt:2:todo later"]
    hits = text(await ok(tree, "grep", pattern="o", path=str(base), glob="*.txt"))
    assert hits.splitlines() == ["sub/b.txt:1:nothing", "sub/b.txt:2:todo later"]
    hits = text(await ok(tree, "grep", pattern="^import", path=str(base / "a.py")))
    assert hits == "a.py:1:import os"
    assert "No matches" in text(await ok(tree, "grep", pattern="zzz", path=str(base)))


async def test_grep_is_capped_and_refuses_a_bad_regex(tree: Tree) -> None:
    (tree.root / "many.txt").write_text("hit\n" * 50)
    lines = text(await ok(tree, "grep", pattern="hit", path="many.txt", max_results=3))
    assert lines.splitlines()[:3] == ["many.txt:1:hit", "many.txt:2:hit", "many.txt:3:hit"]
    assert "Stopped at 3 matches" in lines.splitlines()[3]
    assert len(lines.splitlines()) == 4
    assert "Invalid regular expression" in await refused(tree, "grep", pattern="(unclosed")


# --- staying inside the roots ----------------------------------------------------------------

ESCAPES = {
    "dotdot": "../outside/secret.txt",
    "absolute": "{outside}/secret.txt",
    "symlinked file": "secret_link.txt",
    "through a symlinked dir": "escape/secret.txt",
}


def _calls(path: str) -> list[tuple[str, dict[str, Any]]]:
    dir_path = str(Path(path).parent)
    return [
        ("read", {"path": path}),
        ("write", {"path": path, "content": "pwned\n"}),
        ("edit", {"path": path, "old_text": "top secret", "new_text": "pwned"}),
        ("list", {"path": dir_path}),
        ("glob", {"pattern": "*", "path": dir_path}),
        ("grep", {"pattern": "secret", "path": path}),
    ]


@pytest.mark.parametrize("escape", ESCAPES.values(), ids=ESCAPES.keys())
async def test_every_tool_refuses_paths_outside_the_roots(tree: Tree, escape: str) -> None:
    path = escape.format(outside=tree.outside)
    if path == "secret_link.txt":  # a file link: list/glob the directory of its target
        calls = _calls(path)[:3] + _calls(str(tree.outside / "secret.txt"))[3:]
    else:
        calls = _calls(path)
    async with asyncio.timeout(10), tree.client() as c:
        for name, args in calls:
            result = await c.call_tool(name, args)
            assert result.is_error, (name, text(result))
            assert "outside the allowed roots" in text(result), (name, text(result))
    assert (tree.outside / "secret.txt").read_text() == "top secret\n"


async def test_writing_through_links_cannot_create_files_outside(tree: Tree) -> None:
    for path in ("escape/new.txt", "escape/deep/new.txt", "dangling"):
        message = await refused(tree, "write", path=path, content="x")
        assert "outside the allowed roots" in message
    assert sorted(p.name for p in tree.outside.iterdir()) == ["secret.txt"]


async def test_search_does_not_follow_links_out_of_the_roots(tree: Tree) -> None:
    (tree.root / "mine.txt").write_text("my secret\n")
    hits = text(await ok(tree, "grep", pattern="secret"))
    assert hits.splitlines() == ["mine.txt:1:my secret"]
    found = text(await ok(tree, "glob", pattern="**/*.txt"))
    assert found.splitlines() == ["mine.txt"]


async def test_a_second_root_is_allowed(tree: Tree) -> None:
    f = tree.extra / "notes.md"
    written = await ok(tree, "write", path=str(f), content="# notes\n")
    assert f.read_text() == "# notes\n" and str(f.resolve()) in text(written)
    assert text(await ok(tree, "read", path="../extra/notes.md")) == "     1\t# notes"
    await ok(tree, "edit", path=str(f), old_text="notes", new_text="Notes")
    assert f.read_text() == "# Notes\n"
    assert "notes.md" in text(await ok(tree, "list", path=str(tree.extra)))


# --- run alone ------------------------------------------------------------------------------


async def test_runs_as_a_stdio_server(tree: Tree) -> None:
    (tree.root / "hello.txt").write_text("hello\nworld\n")
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "crow.servers.fs", "--root", str(tree.root)]
    )
    async with asyncio.timeout(10), Client(params) as c:
        result = await c.call_tool("read", {"path": "hello.txt", "offset": 2})
        escape = await c.call_tool("read", {"path": "../outside/secret.txt"})
    assert not result.is_error and text(result) == "     2\tworld"
    assert result.meta is not None
    assert result.meta["crow/locations"] == [
        {"path": str((tree.root / "hello.txt").resolve()), "line": 2}
    ]
    assert escape.is_error and "outside the allowed roots" in text(escape)
