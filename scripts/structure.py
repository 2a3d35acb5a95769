"""Figures of src/crow's structure: import circles, upward imports, large modules.

    python scripts/structure.py            # the figures, one per line
    python scripts/structure.py --verbose  # and what makes each one

`lint-imports` (import-linter, run by .ci/run) keeps the rules and fails on a
break; this prints the figures the restructure is measured by, from the same
contract: the layers are read from the "layers" contract in pyproject.toml.
Circles are strongly connected sets of modules (lazy imports inside functions
count: a circle dodged by a late import is still a circle).
"""

from __future__ import annotations

import argparse
import ast
import sys
import tomllib
from collections.abc import Iterable, Iterator
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
LIMIT = 500  # lines a hand-written module may have


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verbose", action="store_true", help="list what each figure counts")
    verbose = parser.parse_args().verbose
    sys.path.insert(0, str(SRC))
    graph = grimp.build_graph("crow", include_external_packages=False)
    edges = {m: graph.find_modules_directly_imported_by(m) for m in graph.modules}
    report("import circles", [", ".join(c) for c in circles(edges)], verbose)
    upward = [f"{a} -> {b}" for a, b in upward_imports(edges, layers())]
    report("upward imports", upward, verbose)
    sizes = sorted(module_sizes(), reverse=True)
    report(f"modules over {LIMIT} lines", [f"{n} {p}" for n, p in sizes if n > LIMIT], verbose)
    print("largest modules: " + ", ".join(f"{p} {n}" for n, p in sizes[:5]))
    report("imports inside functions", list(inner_imports()), verbose)


def report(name: str, rows: list[str], verbose: bool) -> None:
    print(f"{name}: {len(rows)}")
    if verbose:
        for row in rows:
            print(f"    {row}")


def layers() -> list[list[str]]:
    """The layers contract's layers, top first, each a list of module names."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    for contract in config["tool"]["importlinter"]["contracts"]:
        if contract["type"] == "layers":
            return [
                [name.strip() for name in layer.replace("|", ":").split(":")]
                for layer in contract["layers"]
            ]
    raise SystemExit("pyproject.toml has no import-linter layers contract")


def floor_of(module: str, floors: list[list[str]]) -> int | None:
    for index, names in enumerate(floors):
        if any(module == n or module.startswith(n + ".") for n in names):
            return index
    return None


def upward_imports(
    edges: dict[str, set[str]], floors: list[list[str]]
) -> Iterator[tuple[str, str]]:
    for importer, imported in sorted((a, b) for a, bs in edges.items() for b in bs):
        high, low = floor_of(importer, floors), floor_of(imported, floors)
        if high is not None and low is not None and low < high:
            yield importer, imported


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected sets of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = _pop_component(stack, node)
                    if len(component) > 1:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                work.append((child, iter(sorted(edges.get(child, ())))))
            elif child in stack:
                low[node] = min(low[node], index[child])
    return found


def _pop_component(stack: list[str], node: str) -> list[str]:
    component = []
    while True:
        member = stack.pop()
        component.append(member)
        if member == node:
            return component


def hand_written() -> Iterable[Path]:
    for path in sorted((SRC / "crow").rglob("*.py")):
        if not path.name.startswith("_generated"):
            yield path


def module_sizes() -> Iterator[tuple[int, str]]:
    for path in hand_written():
        yield path.read_text().count("\n"), str(path.relative_to(ROOT))


def inner_imports() -> Iterator[str]:
    for path in hand_written():
        lines: set[int] = set()  # an import in a nested function is inside both
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                for inner in ast.walk(node):
                    if isinstance(inner, ast.Import | ast.ImportFrom):
                        lines.add(inner.lineno)
        yield from (f"{path.relative_to(ROOT)}:{n}" for n in sorted(lines))


if __name__ == "__main__":
    main()
