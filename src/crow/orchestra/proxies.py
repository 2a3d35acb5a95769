"""Crow's own proxies served on stdio, for ``crow proxy NAME`` (a component of a
proxy chain): each made from the config and served until its conductor leaves.

Each proxy runs as a process of its own, so each function imports only its own
proxy's parts (the judge's model router is no part of ``crow proxy memory``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from crow.acp import open_stdio
from crow.acp.proxy import ProxySide

if TYPE_CHECKING:
    from crow.config import Config
    from crow.store.aio import AsyncStore

__all__ = ["serve_judge", "serve_memory", "serve_record"]


async def serve_judge(
    config: Config, *, model: str, rubric: str, check: str | None, max_rounds: int
) -> None:
    """After each turn, ``model``'s verdict on it goes to the client."""
    from crow.models.router import ModelRouter  # this proxy's own (see the module)

    from .judge import TurnView, Verdict, ask
    from .judge_proxy import JudgeProxy, with_check

    router = ModelRouter(config)

    async def judge(turn: TurnView, cwd: str, check: str | None) -> Verdict:
        return await ask(router, model, turn, rubric)

    proxy = ProxySide(await open_stdio())
    JudgeProxy(
        proxy,
        with_check(judge, config.judge.check_timeout_s),
        judge_model=model,
        check=check,
        max_rounds=max_rounds,
    )
    await _serve(proxy, router.aclose)


async def serve_record(store: AsyncStore) -> None:
    """The agent's sessions go into ``store``."""
    from .record_proxy import RecordProxy  # this proxy's own (see the module)

    proxy = ProxySide(await open_stdio())
    await _serve(proxy, RecordProxy(proxy, store).aclose)


async def serve_memory(config: Config) -> None:
    """Every session gets Crow's memory tools (server "crow-memory")."""
    # This proxy's own (see the module).
    from crow.memory.scopes import OWN, READ_ALL, MemoryPlace
    from crow.memory.shared import shared_store
    from crow.servers.memory import build_server

    from .memory_proxy import MemoryProxy

    def make_server(cwd: str, session_id: str | None) -> Any:
        store = lambda: shared_store(config.paths.memory, config.memory)  # noqa: E731
        # What the agent reaches: its session's own scopes (no approvals: nobody here
        # asks the person before a write beyond them).
        reach = READ_ALL if config.memory.model_reads == "all" else OWN
        return build_server(store, MemoryPlace(cwd, session_id, reach))

    proxy = ProxySide(await open_stdio())
    await _serve(proxy, MemoryProxy(proxy, make_server).aclose)


async def _serve(proxy: ProxySide, close: Callable[[], Awaitable[None]]) -> None:
    """Serve until the conductor leaves; then ``close`` what the proxy holds."""
    try:
        await proxy.serve()
    finally:
        await close()
