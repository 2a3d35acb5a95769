"""Embedders: text in, unit vectors out, behind one small interface.

``offline`` is all-MiniLM-L6-v2 in process (``minilm``, on onnxruntime; its
files come from registry packages with the ``local`` extra); ``openai`` is any
OpenAI-compatible ``/v1/embeddings`` (ollama's ``nomic-embed-text``, vLLM,
llama.cpp), called with httpx2, the HTTP client Crow already has; ``none``
searches by text alone.  An embedder's ``name`` is what the store records beside
the vectors, so vectors of two embedders are never compared.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ..model_files import ModelFileError
from ..tls import client_context
from .minilm import MODEL_NAME, MiniLM, installed

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
    """The offline default: loaded on first use (~0.2 s), then a few ms a query."""

    name = f"offline:{MODEL_NAME}"

    def __init__(self) -> None:
        self._model: object | None = None
        self._lock = threading.Lock()

    def load(self) -> None:
        with self._lock:  # one load, however many threads ask at once
            if self._model is None:
                if not installed():
                    raise EmbedderUnavailable(
                        "the offline embedder's files are not installed "
                        "(pip install 'crow-cli[local]', or set [memory] embedder)"
                    )
                try:
                    self._model = MiniLM()
                except ImportError as exc:
                    raise EmbedderUnavailable(
                        f"the offline embedder needs onnxruntime ({exc}): "
                        "pip install 'crow-cli[local]'"
                    ) from None
                except ModelFileError as exc:
                    raise EmbedderUnavailable(str(exc)) from None

    def embed(self, texts: list[str]) -> np.ndarray:
        self.load()
        assert isinstance(self._model, MiniLM)
        return self._model.encode(texts)


class OpenAIEmbedder:
    """``POST {url}/embeddings`` (the OpenAI API, as ollama, vLLM and llama.cpp serve
    it); rows are normalised here."""

    #: One quick attempt: a turn must not wait long on memory.
    TIMEOUT_S = 15.0

    def __init__(self, url: str, model: str, api_key_env: str | None = None) -> None:
        self.url, self.model, self.api_key_env = url.rstrip("/"), model, api_key_env
        self.name = f"openai:{model}"

    def load(self) -> None:
        """Nothing to load: the server holds the model."""

    def close(self) -> None:
        """Nothing to close: each call has a client of its own."""

    def embed(self, texts: list[str]) -> np.ndarray:
        import httpx2  # only for an embedder over HTTP

        key = os.environ.get(self.api_key_env, "") if self.api_key_env else ""
        headers = {"Authorization": f"Bearer {key or 'none'}"}
        where = f"{self.url} ({self.model})"
        body = {"model": self.model, "input": texts}
        try:
            # A client per call (a call or two per turn): nothing is left open when
            # the store goes, and no thread shares a connection.
            with httpx2.Client(
                headers=headers, timeout=self.TIMEOUT_S, verify=client_context()
            ) as client:
                response = client.post(f"{self.url}/embeddings", json=body)
            if response.status_code >= 400:
                raise EmbedderUnavailable(
                    f"{where}: HTTP {response.status_code}: {_said(response)}"
                )
            rows = sorted(response.json()["data"], key=lambda item: item["index"])
            vectors = np.asarray([row["embedding"] for row in rows], dtype=np.float32)
        except httpx2.HTTPError as exc:
            raise EmbedderUnavailable(f"{where}: {_reason(exc)}") from exc
        except (ValueError, KeyError, TypeError) as exc:
            raise EmbedderUnavailable(f"{where}: a malformed answer ({exc})") from exc
        if vectors.ndim != 2 or len(vectors) != len(texts):
            raise EmbedderUnavailable(f"{where}: a malformed answer")
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        unit: np.ndarray = vectors / np.maximum(norms, np.float32(1e-12))
        return unit


def _said(response: Any) -> str:
    """The server's own error message, on one line."""
    try:
        error = response.json().get("error")
        text = error.get("message") if isinstance(error, dict) else error
    except (ValueError, AttributeError):
        text = None
    return " ".join(str(text or response.text or response.reason_phrase).split())[:300]


def _reason(exc: Exception) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def make_embedder(settings: MemorySettings) -> Embedder | None:
    """The configured embedder (None: text search only)."""
    if settings.embedder == "none":
        return None
    if settings.embedder == "openai":
        assert settings.url is not None  # the config checks it
        return OpenAIEmbedder(settings.url, settings.model, settings.api_key_env)
    return MiniLMEmbedder()
