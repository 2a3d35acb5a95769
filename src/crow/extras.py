"""Which of Crow's optional extras are installed, found without importing them.

The ``local`` extra brings a runtime for GGUF models (mistral.rs, or llama.cpp
with the ``llama`` extra) and the embedded model's weights.  Config loading asks
whether they are there (zero config adds the embedded model as the fallback) long
before anything runs a model, so the answer lives on the bottom floor, beside
``model_files``, and costs a look at the import path only.
"""

from __future__ import annotations

import importlib.util

from .model_files import SMOLLM2_GGUF

__all__ = ["RUNTIMES", "embedded_available"]

#: The runtimes, by the module each needs; the first installed is the default
#: (mistral.rs: faster here under load, bench/local_model_bench.py).
RUNTIMES = {"mistral.rs": "mistralrs", "llama.cpp": "llama_cpp"}


def embedded_available() -> bool:
    """The embedded model's file and a runtime are installed (nothing is imported)."""
    if SMOLLM2_GGUF.find() is None:
        return False
    return any(importlib.util.find_spec(module) for module in RUNTIMES.values())
