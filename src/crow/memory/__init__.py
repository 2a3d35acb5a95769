"""Crow's long-term memory: LanceDB on disk, embedders, hybrid search.

A layer below ``crow.servers`` (the memory MCP server) and ``crow.agent``
(automatic recall); it knows nothing of ACP.  The modules: ``scopes`` (light:
the agent imports it early), ``store`` (LanceDB), ``embedders`` and
``minilm`` (numpy), ``shared`` (one store per process and folder).
"""
