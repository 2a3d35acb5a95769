"""Orchestration: programs that drive or watch Crow sessions as ordinary ACP clients
(the judge; later the conductor and Crow's own proxies)."""
