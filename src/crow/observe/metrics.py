"""What a server counts, for ``/metrics`` in Prometheus' text format.

``enable`` (crow serve --http, as it starts) makes the metrics, with
prometheus_client, in a registry of their own: the library's default registry
would mix in whatever else the process registers.  Until then each recording
function returns at once, and prometheus_client (~50 ms to import) is not loaded.

Labels stay few and bounded, so a scrape stays small however long the server
runs: a model's configured name, an MCP server's name, a stop reason, a
transport, a verdict's outcome, an error's class; never a session id, a path or
a message.  The process's own figures (resident memory, CPU, open files) come
from the library's process collector.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

__all__ = [
    "connected",
    "enable",
    "enabled",
    "exposition",
    "memory_recall",
    "model_call",
    "prompt_ended",
    "store_append",
    "timed",
    "tool_call",
    "verdict",
]

_MODEL_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
_TOOL_BUCKETS = (0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
_STORE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5)
_RECALL_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10)


class _Metrics:
    def __init__(self, live_sessions: Callable[[], int], running_turns: Callable[[], int]) -> None:
        # prometheus_client only for a server that serves /metrics (start-up: see above).
        from prometheus_client import (
            CollectorRegistry,
            Counter,
            Gauge,
            Histogram,
            ProcessCollector,
        )

        self.registry = registry = CollectorRegistry()
        ProcessCollector(registry=registry)  # process_resident_memory_bytes and the rest
        Gauge(
            "crow_live_sessions", "Sessions loaded in this server", registry=registry
        ).set_function(live_sessions)
        Gauge("crow_running_turns", "Prompt turns running now", registry=registry).set_function(
            running_turns
        )
        self.prompts = Counter(
            "crow_prompts", "Prompt turns ended, by stop reason", ["stop_reason"], registry=registry
        )
        self.connections = Gauge(
            "crow_connections",
            "Open client connections, by transport",
            ["transport"],
            registry=registry,
        )
        self.model_seconds = Histogram(
            "crow_model_call_seconds",
            "A model call, from the request to its last event (retries apart)",
            ["model"],
            buckets=_MODEL_BUCKETS,
            registry=registry,
        )
        self.model_errors = Counter(
            "crow_model_errors",
            "Failed model calls, by model and error",
            ["model", "error"],
            registry=registry,
        )
        self.tool_seconds = Histogram(
            "crow_tool_call_seconds",
            "An MCP tool call, by server",
            ["server"],
            buckets=_TOOL_BUCKETS,
            registry=registry,
        )
        self.tool_errors = Counter(
            "crow_tool_errors", "Tool calls that failed, by server", ["server"], registry=registry
        )
        self.store_append = Histogram(
            "crow_store_append_seconds",
            "Logging a session's updates, until the store has them",
            buckets=_STORE_BUCKETS,
            registry=registry,
        )
        self.memory_recall = Histogram(
            "crow_memory_recall_seconds",
            "A memory recall",
            buckets=_RECALL_BUCKETS,
            registry=registry,
        )
        self.verdicts = Counter(
            "crow_judge_verdicts",
            "Judges' verdicts posted, by outcome",
            ["outcome"],
            registry=registry,
        )


_live: _Metrics | None = None


def enable(*, live_sessions: Callable[[], int], running_turns: Callable[[], int]) -> None:
    """Count from now on (a second call starts again from zero)."""
    global _live
    _live = _Metrics(live_sessions, running_turns)


def enabled() -> bool:
    return _live is not None


def exposition(accept: str = "") -> tuple[bytes, str]:
    """The metrics, and their content type, in the format the scraper's ``Accept``
    asks for (the library's negotiation: Prometheus' text format by default,
    OpenMetrics when asked)."""
    from prometheus_client.exposition import choose_encoder  # loaded by enable

    encode, content_type = choose_encoder(accept)
    return (encode(_live.registry) if _live is not None else b""), content_type


def prompt_ended(stop_reason: str) -> None:
    if _live is not None:
        _live.prompts.labels(stop_reason).inc()


def connected(transport: str, delta: int) -> None:
    """A connection over ``transport`` (stdio, http, websocket) opened (+1) or ended (-1)."""
    if _live is not None:
        _live.connections.labels(transport).inc(delta)


def model_call(model: str, seconds: float, error: BaseException | None = None) -> None:
    if _live is not None:
        _live.model_seconds.labels(model).observe(seconds)
        if error is not None:
            _live.model_errors.labels(model, type(error).__name__).inc()


def tool_call(server: str, seconds: float, *, failed: bool) -> None:
    if _live is not None:
        _live.tool_seconds.labels(server).observe(seconds)
        if failed:
            _live.tool_errors.labels(server).inc()


def store_append(seconds: float) -> None:
    if _live is not None:
        _live.store_append.observe(seconds)


def memory_recall(seconds: float) -> None:
    if _live is not None:
        _live.memory_recall.observe(seconds)


def verdict(outcome: str) -> None:
    if _live is not None:
        _live.verdicts.labels(outcome).inc()


@contextlib.contextmanager
def timed(record: Callable[[float], None]) -> Iterator[None]:
    """Call ``record`` with the seconds the block took (however it ended)."""
    if _live is None:
        yield
        return
    started = time.perf_counter()
    try:
        yield
    finally:
        record(time.perf_counter() - started)
