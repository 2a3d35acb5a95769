"""Crow's wire names (``crow/*``, ``_crow/*``) are written once, in ``crow.extensions``.

A name spelt out elsewhere can drift from the one its reader expects; a constant
nothing uses is a name nobody sends.  The source is parsed (``ast``), so comments and
docstrings may name them freely.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import crow.extensions

SRC = Path(crow.extensions.__file__).parent
REGISTRY = SRC / "extensions.py"
WIRE_NAME = re.compile(r"(?<![\w./-])_?crow/[A-Za-z]")

# crow.acp imports nothing of Crow (clients use it like a third-party library), so the
# few Crow names it knows (the _crow/after cursor it sends, the crow/seq it reads) stay
# literal there.
INDEPENDENT = (SRC / "acp",)


def _modules() -> Iterator[tuple[Path, ast.Module]]:
    for path in sorted(SRC.rglob("*.py")):
        if path != REGISTRY:
            yield path, ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _docstrings(tree: ast.Module) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def _wire_literals(tree: ast.Module) -> Iterator[tuple[int, str]]:
    skip = _docstrings(tree)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Constant) or id(node) in skip:
            continue
        value = node.value
        text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
        if isinstance(text, str) and WIRE_NAME.search(text):
            yield node.lineno, text


def _exempt(path: Path) -> bool:
    return any(path.is_relative_to(folder) for folder in INDEPENDENT)


def test_no_wire_name_is_spelt_out_outside_the_registry() -> None:
    stray = [
        f"{path.relative_to(SRC.parent)}:{line}: {text[:80]!r}"
        for path, tree in _modules()
        if not _exempt(path)
        for line, text in _wire_literals(tree)
    ]
    assert not stray, "use a crow.extensions constant instead of:\n" + "\n".join(stray)


def _is_registry(node: ast.ImportFrom) -> bool:
    """``from crow.extensions import ...`` or ``from ..extensions import ...``."""
    return node.module == "crow.extensions" or (node.level > 0 and node.module == "extensions")


def _names_used(tree: ast.Module) -> Iterator[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and _is_registry(node):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.Attribute) and getattr(node.value, "id", "") == "extensions":
            yield node.attr  # extensions.NAME, after ``from crow import extensions``


def test_every_registered_name_is_used() -> None:
    used = {name for _, tree in _modules() for name in _names_used(tree)}
    unused = sorted(set(crow.extensions.__all__) - used)
    assert not unused, f"crow.extensions names nothing in src uses: {unused}"


def test_the_registry_exports_each_of_its_names() -> None:
    tree = ast.parse(REGISTRY.read_text(encoding="utf-8"))
    assigned = {
        target.id
        for node in tree.body
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name) and target.id != "__all__"
    }
    assert assigned == set(crow.extensions.__all__)
