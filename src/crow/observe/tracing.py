"""OpenTelemetry traces of prompt turns, when a server turns them on (``[server] tracing``).

A span per turn (``crow.turn``) with child spans for its model calls
(``crow.model``), tool calls (``crow.tool``) and store writes
(``crow.store.append``).  A client's W3C trace context in the prompt's ``_meta``
(``traceparent``, ``tracestate``: root keys ACP reserves for it) becomes the
turn's parent, so the turn shows inside the client's own trace.

The spans follow the task: the prompt's handler makes the client's context
current (``client_context``) while the turn's task is created, the task copies
it, and every span started in the turn (or in tasks it starts) is a child of the
turn's.  A store write outside any turn makes no span of its own (``child``).

The OpenTelemetry SDK is the ``otel`` extra, imported only by ``enable``; off,
every function here returns a shared context that does nothing.  Spans go to
the OTLP/HTTP exporter, configured by the standard ``OTEL_EXPORTER_OTLP_*``
variables (endpoint, headers); tests hand ``enable`` an exporter of their own.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

__all__ = [
    "TracingUnavailable",
    "child",
    "client_context",
    "disable",
    "enable",
    "enabled",
    "set_attribute",
    "turn",
]

_NULL = contextlib.nullcontext()
_tracer: Any = None


class TracingUnavailable(Exception):
    """Tracing was asked for, but the ``otel`` extra is not installed."""


def enable(exporter: Any = None) -> None:
    """Trace from now on: to ``exporter`` span by span, else to OTLP/HTTP in batches."""
    global _tracer
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

        if exporter is None:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            processor: Any = BatchSpanProcessor(OTLPSpanExporter())
        else:
            processor = SimpleSpanProcessor(exporter)
    except ImportError as exc:
        raise TracingUnavailable(
            f"[server] tracing needs OpenTelemetry ({exc.name} is missing): "
            "pip install 'crow-cli[otel]', or set tracing = false"
        ) from None
    provider = TracerProvider(resource=Resource.create({"service.name": "crow"}))
    provider.add_span_processor(processor)
    _tracer = provider.get_tracer("crow")


def disable() -> None:
    """Stop tracing (spans already ended have gone to the exporter)."""
    global _tracer
    _tracer = None


def enabled() -> bool:
    return _tracer is not None


@contextlib.contextmanager
def client_context(meta: Any) -> Iterator[None]:
    """The trace context a client put in ``_meta`` is current inside the block."""
    carrier = {}
    if isinstance(meta, dict):
        carrier = {k: v for k in ("traceparent", "tracestate") if isinstance(v := meta.get(k), str)}
    if _tracer is None or "traceparent" not in carrier:
        yield
        return
    from opentelemetry import context
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    token = context.attach(TraceContextTextMapPropagator().extract(carrier))
    try:
        yield
    finally:
        context.detach(token)


def turn(session_id: str) -> Any:
    """A turn's span: a child of the client's trace if it sent one, else a new trace."""
    if _tracer is None:
        return _NULL
    return _tracer.start_as_current_span("crow.turn", attributes={"crow.session_id": session_id})


def child(name: str, **attributes: str | int | float | bool) -> Any:
    """A span under the current one, for a leaf (a model call, a tool call, a store
    write); none where no span is being recorded.  It is not made current: a model
    call's span spans the yields of a stream, and a context attached inside a
    generator would leak to its consumer between them."""
    if _tracer is None:
        return _NULL
    from opentelemetry import trace

    if not trace.get_current_span().is_recording():
        return _NULL
    return _leaf(_tracer.start_span(name, attributes=attributes))


@contextlib.contextmanager
def _leaf(span: Any) -> Iterator[None]:
    from opentelemetry.trace import Status, StatusCode

    try:
        yield
    except Exception as exc:
        span.record_exception(exc)
        span.set_status(Status(StatusCode.ERROR, str(exc)))
        raise
    finally:
        span.end()


def set_attribute(name: str, value: str | int | float | bool) -> None:
    """On the current span, if one is being recorded."""
    if _tracer is not None:
        from opentelemetry import trace

        trace.get_current_span().set_attribute(name, value)
