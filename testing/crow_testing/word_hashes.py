"""An embedder for tests: each word hashed to a direction, the sum made unit.  Texts
that share words are near; nothing to install."""

from __future__ import annotations

import hashlib
import re

import numpy as np

__all__ = ["WordHashes"]


class WordHashes:
    """The embedder (see the module's docstring)."""

    name = "test:word-hashes"
    DIMENSION = 64

    def load(self) -> None:
        pass

    def embed(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.DIMENSION), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in re.findall(r"\w+", text.lower()):
                seed = int.from_bytes(hashlib.sha256(word.encode()).digest()[:8], "little")
                out[row] += np.random.default_rng(seed).normal(size=self.DIMENSION)
        out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        return out
