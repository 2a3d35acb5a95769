"""crow serve (stdio and HTTP) closes its store when the agent cannot start."""

from __future__ import annotations

import sqlite3
from types import SimpleNamespace
from typing import Any

import pytest

from crow.config import ServerSettings
from crow.serve import stdio as serve
from crow.store.db import SqliteStore, Store, StoreUnavailable


def serving_stdio(config: Any) -> Any:
    return serve.serve_stdio(config)


def serving_http(config: Any) -> Any:
    from crow.serve.http import serve_http

    return serve_http(config, "127.0.0.1", 0, SimpleNamespace(token="t"))  # type: ignore[arg-type]


@pytest.mark.parametrize("serving", [serving_stdio, serving_http])
async def test_a_failed_start_closes_the_store(tmp_path, monkeypatch, serving):
    opened: list[Store] = []

    def open_store(location: Any) -> Store:
        opened.append(SqliteStore(location))
        return opened[-1]

    def failing_agent(config: Any, store: Store, **options: Any) -> None:
        raise StoreUnavailable("recovery failed")

    monkeypatch.setattr(serve, "open_store", open_store)
    monkeypatch.setattr(serve, "CrowAgent", failing_agent)
    config: Any = SimpleNamespace(store_location=tmp_path / "crow.db", server=ServerSettings())
    with pytest.raises(StoreUnavailable):
        await serving(config)
    [store] = opened
    with pytest.raises(sqlite3.ProgrammingError):  # closed
        store.db.execute("SELECT 1")
