"""Watching a running server: Prometheus metrics, OpenTelemetry traces, JSON log lines.

Every layer records into ``metrics`` and ``tracing`` with plain calls that cost a
check of one global while nothing watches: the libraries behind them
(prometheus_client, the OpenTelemetry SDK) are imported only by a server that
turns them on, so crow serve on stdio and every other command start as fast as
before.
"""
