"""Embedders: text in, unit vectors out, behind one small interface.

``offline`` is all-MiniLM-L6-v2 in process (``minilm``; its files come from
PyPI with the ``local`` extra); ``openai`` is any OpenAI-compatible
``/v1/embeddings`` (ollama's ``nomic-embed-text``, vLLM, llama.cpp); ``none``
searches by text alone.  An embedder's ``name`` is what the store records
beside the vectors, so vectors of two embedders are never compared.
"""

from __future__ import annotations

import contextlib
import os
import threading
from typing import TYPE_CHECKING, Protocol

import numpy as np

from ..tls import client_context
from .minilm import MODEL_NAME, find_model_dir

if TYPE_CHECKING:
    from crow.config import MemorySettings

__all__ = ["Embedder", "EmbedderUnavailable", "MiniLMEmbedder", "OpenAIEmbedder", "make_embedder"]


class EmbedderUnavailable(Exception):
    """The embedder cannot embed now (not installed, server down): search by text."""


class Embedder(Protocol):
    name: str

    def embed(self, texts: list[str]) -> np.ndarray:
        """An (n, d) float32 array of unit rows; raises EmbedderUnavailable."""
        ...

    def load(self) -> None:
        """Get ready to embed (load weights); may raise EmbedderUnavailable."""
        ...


class MiniLMEmbedder:
    """The offline default: loaded on first use (0.5 s), then ~10 ms a query."""

    name = f"offline:{MODEL_NAME}"

    def __init__(self) -> None:
        self._model: object | None = None
        self._lock = threading.Lock()

    def load(self) -> None:
        from .minilm import MiniLM

        with self._lock:  # one load, however many threads ask at once
            if self._model is None:
                folder = find_model_dir()
                if folder is None:
                    raise EmbedderUnavailable(
                        "the offline embedder's files are not installed "
                        "(pip install 'crow-cli[local]', or set [memory] embedder)"
                    )
                self._model = MiniLM(folder)

    def embed(self, texts: list[str]) -> np.ndarray:
        from .minilm import MiniLM

        self.load()
        assert isinstance(self._model, MiniLM)
        return self._model.encode(texts)


class OpenAIEmbedder:
    """``POST {url}/embeddings`` through the openai SDK; rows are normalised here."""

    def __init__(self, url: str, model: str, api_key_env: str | None = None) -> None:
        self.url, self.model, self.api_key_env = url, model, api_key_env
        self.name = f"openai:{model}"
        self._client: object | None = None

    def load(self) -> None:
        """Nothing to load: the server holds the model."""

    def close(self) -> None:
        """Close the HTTP client (ours, for Crow's trust source: the SDK closes only
        the clients it made itself)."""
        client, self._client = self._client, None
        close = getattr(client, "close", None)
        if close is not None:
            with contextlib.suppress(Exception):
                close()

    def __del__(self) -> None:
        self.close()

    def embed(self, texts: list[str]) -> np.ndarray:
        import openai

        if self._client is None:
            key = os.environ.get(self.api_key_env, "") if self.api_key_env else ""
            # One quick attempt: a turn must not wait long on memory.
            self._client = openai.OpenAI(
                base_url=self.url,
                api_key=key or "none",
                max_retries=0,
                timeout=15.0,
                http_client=openai.DefaultHttpxClient(verify=client_context()),
            )
        assert isinstance(self._client, openai.OpenAI)
        try:
            response = self._client.embeddings.create(model=self.model, input=texts)
        except openai.OpenAIError as exc:
            raise EmbedderUnavailable(f"{self.url} ({self.model}): {_reason(exc)}") from exc
        rows = sorted(response.data, key=lambda item: item.index)
        vectors = np.asarray([row.embedding for row in rows], dtype=np.float32)
        if vectors.ndim != 2 or len(vectors) != len(texts):
            raise EmbedderUnavailable(f"{self.url} ({self.model}): a malformed answer")
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        unit: np.ndarray = vectors / np.maximum(norms, np.float32(1e-12))
        return unit


def _reason(exc: Exception) -> str:
    status = getattr(exc, "status_code", None)
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return f"HTTP {status}: {text}" if status else text


def make_embedder(settings: MemorySettings) -> Embedder | None:
    """The configured embedder (None: text search only)."""
    if settings.embedder == "none":
        return None
    if settings.embedder == "openai":
        assert settings.url is not None  # the config checks it
        return OpenAIEmbedder(settings.url, settings.model, settings.api_key_env)
    return MiniLMEmbedder()
