"""One store per process and folder: every session shares it, so the embedder loads once."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING

from .embedders import make_embedder
from .store import MemoryStore

if TYPE_CHECKING:
    from crow.config import MemorySettings

__all__ = ["shared_store"]

_stores: dict[tuple[str, str, str | None, str], MemoryStore] = {}
_lock = threading.Lock()


def shared_store(folder: Path, settings: MemorySettings) -> MemoryStore:
    """This process's store for ``folder`` with these embedder settings."""
    key = (str(folder), settings.embedder, settings.url, settings.model)
    with _lock:
        store = _stores.get(key)
        if store is None:
            store = _stores[key] = MemoryStore(
                folder,
                make_embedder(settings),
                merge_threshold=settings.merge_threshold,
                max_text_bytes=settings.max_text_kib * 1024,
            )
        return store
