"""crow.agent.v1: ACP v1 clients on the same agent (``face``), with what turns v2
updates into v1 (``translate``, ``content``).  ``crow.serve.stdio`` imports it
on the first v1 connection."""

from .face import V1Agent, V1Watcher, serve_v1

__all__ = ["V1Agent", "V1Watcher", "serve_v1"]
