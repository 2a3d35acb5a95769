"""``crow mcp SERVER``: one of Crow's built-in MCP servers on stdio, the same servers
Crow runs in every session (``crow.servers``), for any MCP host."""

from __future__ import annotations

import argparse
import importlib

__all__ = ["SERVERS", "add_arguments", "main"]

SERVERS = ("fs", "terminal", "web", "memory")


def add_arguments(mcp: argparse.ArgumentParser) -> None:
    mcp.add_argument("server", choices=list(SERVERS))
    mcp.add_argument("args", nargs=argparse.REMAINDER, help="the server's own options (--help)")


def main(args: argparse.Namespace) -> int:
    """``crow mcp fs --root DIR``: the server's module runs its own command line."""
    module = importlib.import_module(f"crow.servers.{args.server}")
    result: int = module.main(args.args)
    return result
