"""ARCHITECTURE.md stays true: its table names every module of each package, and
only modules that exist (a module added, moved or removed without the map fails)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "crow"


def table_rows() -> dict[str, str]:
    """Each package row of the "What each package owns" table: package -> its text."""
    text = (ROOT / "ARCHITECTURE.md").read_text()
    rows = re.findall(r"^\| `crow\.(\w+)` \| (.+) \|$", text, flags=re.M)
    return dict(rows)


def modules_of(package: str) -> set[str]:
    """The modules of a package (and of its subpackages, by their own names)."""
    folder = SRC / package
    names = set()
    for path in folder.rglob("*.py"):
        if path.name == "__init__.py" or path.name.startswith("_generated"):
            continue
        names.add(path.stem)
    names.update(p.name for p in folder.iterdir() if p.is_dir() and (p / "__init__.py").exists())
    return names - {"_base", "_lenient"}  # the schema's hand-written parts


def test_the_table_has_a_row_for_every_package() -> None:
    packages = {p.name for p in SRC.iterdir() if (p / "__init__.py").exists()}
    assert set(table_rows()) == packages


@pytest.mark.parametrize("package", sorted(table_rows()))
def test_a_package_row_names_its_modules_and_no_others(package: str) -> None:
    text = table_rows()[package]
    named = {name.rstrip("/") for name in re.findall(r"`(\w+/?)`", text)}
    modules = modules_of(package)
    private = {m for m in modules if m.startswith("_")}
    # A private module may be named by its family (``_fs_*``, ``_terminal_*``).
    families = {f[:-1] for f in re.findall(r"`(_\w+_)\*`", text)}
    covered = {m for m in private if any(m.startswith(f) for f in families)}
    assert modules - named - covered == set(), "modules ARCHITECTURE.md does not name"
    stale = {n for n in named if n.islower() and n not in modules}
    assert stale == set(), "names in ARCHITECTURE.md that are not modules"
