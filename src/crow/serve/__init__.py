"""``crow serve``: the agent served over stdio (``stdio``), and over HTTP + SSE and
WebSocket in one long-lived process (``http``, with ``ws_bursts``).

Above ``crow.agent`` and below ``crow.cli``.  The package itself imports nothing: the
start-up of ``crow serve`` pays only for the submodule it runs.
"""
