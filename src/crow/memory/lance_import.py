"""``import lancedb`` without importing its REST catalog client.

LanceDB imports ``lance_namespace``, whose generated OpenAPI client
(``lance_namespace_urllib3_client``) re-exports ~150 pydantic models and nine
API classes from its package ``__init__`` files: about 60 % of the 2 s that
``import lancedb`` takes, for a REST catalog a local folder never talks to.

``lancedb()`` imports it with those ``__init__`` files made lazy: each name
they re-export is imported from its own module the first time it is asked
for, so what LanceDB really uses (a dozen response models) still loads, and
the rest never does.  Nothing is changed on disk.  A package whose
``__init__`` does anything but re-export and set constants is left to load
as it always has (a later release that changed them loses the speed-up, not
correctness).  Written here because the released client has no lazy import
of its own (upstream lance made theirs lazy in the same way).

On Python 3.11 LanceDB decorates ~100 methods with the ``overrides``
package's ``@override``, which reads each method's bytecode to check it
against its base class (0.2-0.3 s of CPU per cold start, a third of
``crow memory search``'s import); on 3.12 it uses ``typing.override``, a
marker.  While LanceDB imports, ``overrides`` is made to do what it does on
3.12 (``typing_extensions.override`` and a plain base class), then restored.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import importlib.abc
import importlib.machinery
import os
import sys
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = ["LAZY_PACKAGES", "lancedb"]

#: The generated client's packages whose ``__init__`` only re-exports.
LAZY_PACKAGES = frozenset(
    {
        "lance_namespace_urllib3_client",
        "lance_namespace_urllib3_client.api",
        "lance_namespace_urllib3_client.models",
    }
)

_installed = threading.Lock()


def lancedb() -> ModuleType:
    """The ``lancedb`` module, imported with the REST client's re-exports lazy.

    LanceDB warns (a RuntimeWarning) in every child forked after it is imported;
    uvloop runs fork hooks when it starts a subprocess, so each MCP server and
    command a session starts would print it on the person's terminal.  Crow's
    children exec at once and never touch LanceDB: the warning is not theirs."""
    with _installed:  # one import, made here: what sys.modules holds is whole
        module = sys.modules.get("lancedb")
        if module is not None:
            return module
        warnings.filterwarnings(
            "ignore", message="lancedb fork support is experimental", category=RuntimeWarning
        )
        # Its Rust side logs warnings straight to stderr (env_logger, read once at
        # import), e.g. "partition index is 6 but the number of partitions is 2" while
        # new rows are folded into an index: noise on the person's terminal, with the
        # results still right.  Errors only, unless the user asks for more.
        os.environ.setdefault("LANCEDB_LOG", "error")
        if not any(isinstance(f, _LazyReexports) for f in sys.meta_path):
            sys.meta_path.insert(0, _LazyReexports(LAZY_PACKAGES))
        as_on_312 = (
            _overrides_as_on_312() if sys.version_info < (3, 12) else contextlib.nullcontext()
        )
        with as_on_312:
            return importlib.import_module("lancedb")


@contextlib.contextmanager
def _overrides_as_on_312() -> Iterator[None]:
    """``overrides.override`` and ``EnforceOverrides`` as LanceDB takes them on 3.12."""
    try:
        import overrides
        from typing_extensions import override
    except ImportError:  # LanceDB would fail on it anyway: let it say so
        yield
        return
    module: Any = overrides
    saved = module.override, module.EnforceOverrides
    module.override, module.EnforceOverrides = override, _Plain
    try:
        yield
    finally:
        module.override, module.EnforceOverrides = saved


class _Plain:
    """A base class that checks nothing (LanceDB's own stand-in on 3.12)."""


class _LazyReexports(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the named packages as usual, then loads their ``__init__`` lazily."""

    def __init__(self, names: frozenset[str]) -> None:
        self.names = names

    def find_spec(
        self, fullname: str, path: Any = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.names:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.origin is None or spec.submodule_search_locations is None:
            return None
        if _reexports(Path(spec.origin)) is None:
            return spec  # not a plain re-export module: loaded as usual
        spec.loader = self
        return spec

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return None  # the default module object

    def exec_module(self, module: ModuleType) -> None:
        assert module.__spec__ is not None and module.__spec__.origin is not None
        found = _reexports(Path(module.__spec__.origin))
        assert found is not None  # find_spec checked it
        names, constants = found
        module.__dict__.update(constants)

        def __getattr__(name: str) -> Any:
            if name not in names:
                raise AttributeError(f"module {module.__name__!r} has no attribute {name!r}")
            source, attribute = names[name]
            value = getattr(importlib.import_module(source), attribute)
            setattr(module, name, value)  # asked once
            return value

        module.__getattr__ = __getattr__  # type: ignore[method-assign]
        module.__dict__["__all__"] = list(names)


def _reexports(init: Path) -> tuple[dict[str, tuple[str, str]], dict[str, Any]] | None:
    """What a package ``__init__`` re-exports (name -> (module, attribute)) and the
    constants it sets, or None if it does anything else."""
    try:
        tree = ast.parse(init.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return None
    names: dict[str, tuple[str, str]] = {}
    constants: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                if alias.name == "*":
                    return None
                names[alias.asname or alias.name] = (node.module, alias.name)
        elif (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Constant)
        ):
            constants[node.targets[0].id] = node.value.value
        elif not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)):
            return None  # code, not a re-export: leave it alone
    return names, constants
