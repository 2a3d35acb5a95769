"""all-MiniLM-L6-v2 on onnxruntime: the offline embedder, with no torch and no download.

The model (ONNX, float weights, 90 MB) and its WordPiece tokenizer come in
``crow-cli-weights`` with the ``local`` extra, checked by sha256 before they are
loaded (model_files); weights/backend.py says how the model file is made.
onnxruntime runs the encoder; this module tokenizes, pads a batch to its own
longest text, and pools as sentence-transformers does: the mean over the real
tokens, then unit length.

Its vectors are the float model's (those of sentence-transformers, and of the
numpy MiniLM Crow had before): the embedder keeps that name, so stores written
then need no reindex.  A store written by the int8 model of Crow 2.x's first
onnxruntime release says to run ``crow memory reindex``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from ..model_files import MINILM_ONNX, MINILM_TOKENIZER
from .wordpiece import WordPiece

__all__ = ["DIMENSION", "MODEL_NAME", "MiniLM", "installed"]

MODEL_NAME = "all-MiniLM-L6-v2"
DIMENSION = 384
#: sentence-transformers' max_seq_length for this model: longer texts are cut.
MAX_TOKENS = 256
_F32 = np.float32


def installed() -> bool:
    """Whether the model's files are installed (nothing is imported or read)."""
    return MINILM_ONNX.find() is not None and MINILM_TOKENIZER.find() is not None


class MiniLM:
    """Sentence embeddings: ``encode(texts)`` → an (n, 384) float32 array of unit rows."""

    def __init__(self, model: Path | None = None, tokenizer: Path | None = None) -> None:
        import onnxruntime  # optional (crow-cli[local]) and heavy: only when the model loads

        self.tokenizer = WordPiece(tokenizer or MINILM_TOKENIZER.verified(), max_tokens=MAX_TOKENS)
        options = onnxruntime.SessionOptions()
        # A query is embedded in a turn beside everything else: two threads at most,
        # and none left spinning after a batch (the default spins for a while).
        options.intra_op_num_threads = min(2, os.cpu_count() or 1)
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.log_severity_level = 3  # errors only (it warns on stderr otherwise)
        self.session: Any = onnxruntime.InferenceSession(
            str(model or MINILM_ONNX.verified()), options, providers=["CPUExecutionProvider"]
        )
        self._inputs = {i.name for i in self.session.get_inputs()}

    def encode(self, texts: list[str], *, batch: int = 32) -> np.ndarray:
        if not texts:
            return np.zeros((0, DIMENSION), dtype=_F32)
        # Similar lengths batched together pad less.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = np.empty((len(texts), DIMENSION), dtype=_F32)
        for start in range(0, len(order), batch):
            chosen = order[start : start + batch]
            out[chosen] = self._encode_batch([texts[i] for i in chosen])
        return out

    def _encode_batch(self, texts: list[str]) -> np.ndarray:
        encoded = [self.tokenizer.encode(text) for text in texts]
        width = max(len(ids) for ids in encoded)
        ids = np.zeros((len(texts), width), dtype=np.int64)
        mask = np.zeros((len(texts), width), dtype=np.int64)
        for row, tokens in enumerate(encoded):
            ids[row, : len(tokens)] = tokens
            mask[row, : len(tokens)] = 1
        feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        (hidden,) = self.session.run(None, {k: v for k, v in feed.items() if k in self._inputs})
        weights = mask.astype(_F32)[:, :, None]
        pooled = (hidden * weights).sum(axis=1) / weights.sum(axis=1)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        unit: np.ndarray = (pooled / np.maximum(norms, _F32(1e-12))).astype(_F32)
        return unit
