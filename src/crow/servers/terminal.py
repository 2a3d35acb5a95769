"""The built-in terminal MCP server: run shell commands, in the foreground or the background.

Every command runs as ``/bin/sh -c COMMAND`` in a process group of its own
(``start_new_session``), with stdin from ``/dev/null`` and stderr merged into stdout.  A
group is always ended the same way: SIGTERM to the whole group, then SIGKILL to it after
a 2 s grace.  That happens on a timeout, on ``stop``, when a ``run`` call is cancelled
(before the cancellation is re-raised, so no process outlives the call), when a ``run``
command exits but leaves processes behind, and, for every group still alive, when the
connection that started it closes (each connection has a terminal of its own: its
directory, its background ids; ``crow.servers.shared``).  Should this process die
without ending them (``kill -9``), its reaper process (``crow.runtime.children``)
SIGKILLs every group still alive, and every process the commands started, even one
that left its group.

Tools (``_meta["crow/kind"]`` in brackets):

- ``run(command, timeout_s?, cwd?)`` [execute]: run to completion.  While it runs, each
  piece of output is sent at once (pieces are coalesced over at most ~50 ms) as an MCP
  progress notification: ``progress`` is the byte count so far, ``message`` the text
  (UTF-8, errors replaced; a character split between reads is kept whole).  The result
  is the output (head and tail kept around ``[... N bytes of output truncated ...]`` when
  longer than ``max_output_bytes``), then ``[exit code N]``, ``[killed after timeout of S
  s]`` or ``[terminated by signal N]``.  ``isError`` only when the command could not start.
  ``_meta``: ``crow/command``, ``crow/cwd`` (absolute), ``crow/exitCode`` (int | None),
  ``crow/signal`` ("SIGTERM" | None), ``crow/timedOut``, ``crow/truncated``.
- ``start(command, cwd?)`` [execute]: a background process ``bg_N``; its output goes to a
  ring buffer holding the last 1 MiB.  ``_meta``: ``crow/id``, ``crow/pid``,
  ``crow/command``, ``crow/cwd``.
- ``output(id, since=0)`` [read]: output from byte offset ``since`` (at most
  ``max_output_bytes`` per call) and the status.  ``_meta``: the process fields below plus
  ``crow/next`` (the cursor for the next call), ``crow/dropped`` (bytes before the
  buffer's start that were asked for but are gone) and ``crow/more`` (bytes still unread).
- ``stop(id)`` [execute]: end the group; the output not yet read and the final status.
- ``list_processes()`` [read]: ``_meta["crow/processes"]``, a list of the process fields.

Process fields: ``crow/id``, ``crow/pid``, ``crow/command``, ``crow/cwd``, ``crow/status``
("running" | "exited"), ``crow/exitCode``, ``crow/signal``.

A ``_meta`` key whose value is None does not reach the client: mcp 2.x serializes results
with ``exclude_none``, so an absent key means null.  A burst of more than 1 MiB of output
between two progress notifications is streamed as its last 512 KiB after a
``[... N bytes not streamed ...]`` line (the result is unaffected).

This module owns the MCP tool definitions and the command line.  What the tools do lives
in ``_terminal_jobs``, process groups in ``_terminal_process``, and output buffering and
progress streaming in ``_terminal_output``.

Run alone: ``python -m crow.servers.terminal [--cwd DIR] [--timeout S]`` (stdio).
"""

from __future__ import annotations

import argparse
import inspect
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import CallToolResult, ToolAnnotations
from pydantic import Field

from ..extensions import NEXT, TOOL_KIND
from ._stdio import run_stdio
from ._terminal_jobs import Meta as Meta
from ._terminal_jobs import Terminal
from ._terminal_output import COALESCE_S as COALESCE_S
from ._terminal_output import MAX_PENDING_PROGRESS as MAX_PENDING_PROGRESS
from ._terminal_process import DRAIN_S as DRAIN_S
from ._terminal_process import KILL_GRACE_S as KILL_GRACE_S
from ._terminal_process import READ_SIZE as READ_SIZE
from ._terminal_process import shielded
from .shared import connection_state, scoped_lifespan

__all__ = ["build_server", "main"]
# The limits and Meta imported ``as`` themselves above stay importable from here, where
# they were defined before the split.

# These two are read by build_server and handed to the server's state, so setting them
# here (as the tests do) still takes effect.
SHELL = "/bin/sh"
#: A background process keeps this much of its latest output.
RING_BYTES = 1024 * 1024

# -- the server ---------------------------------------------------------------------------

EXECUTE = {TOOL_KIND: "execute"}
READ = {TOOL_KIND: "read"}

CommandArg = Annotated[str, Field(description="A /bin/sh command line.")]
CwdArg = Annotated[
    str | None,
    Field(description="Working directory, relative to the server's (default: the server's)."),
]
TimeoutArg = Annotated[
    float | None,
    Field(description="Seconds before the command is killed (default: the server's timeout)."),
]
IdArg = Annotated[str, Field(description="A background process id from start, like bg_1.")]


def build_server(
    cwd: Path | None = None,
    *,
    default_timeout_s: float = 120,
    max_output_bytes: int = 64 * 1024,
) -> MCPServer:
    """An `MCPServer` offering run, start, output, stop and list_processes.

    Each connection has a terminal of its own (``crow.servers.shared``): in the directory
    its opener gave, else ``cwd``, with its own background processes, which end when the
    connection closes.  Without ``cwd`` the server is Crow's shared one, and a connection
    that brings no directory is refused.
    """
    shell, ring_bytes = SHELL, RING_BYTES
    timeout = f"{default_timeout_s:g} s"

    @asynccontextmanager
    async def connect(scope: Path) -> AsyncIterator[Terminal]:
        terminal = Terminal(
            scope, default_timeout_s, max_output_bytes, shell=shell, ring_bytes=ring_bytes
        )
        try:
            yield terminal
        finally:
            await shielded(terminal.shutdown())

    server: MCPServer = MCPServer(
        "terminal",
        instructions=(
            "Shell commands (/bin/sh) in the session's working directory. Use run for "
            "commands that finish; use start, output and stop for servers and watchers. run "
            f"times out after {timeout} unless given timeout_s."
        ),
        lifespan=scoped_lifespan(connect, name="terminal", default=cwd),
    )

    async def run(
        command: CommandArg,
        ctx: Context,
        timeout_s: TimeoutArg = None,
        cwd: CwdArg = None,
    ) -> CallToolResult:
        """Run a shell command to completion and return its output (stdout and stderr merged).

        stdin is empty. The last line is the exit status: [exit code N], [killed after
        timeout of S s] or [terminated by signal N]. Processes the command leaves in the
        background are ended when it exits; use start for long-running processes.
        """
        return await _terminal(ctx).run(command, timeout_s, cwd, ctx)

    async def start(command: CommandArg, ctx: Context, cwd: CwdArg = None) -> CallToolResult:
        """Start a shell command in the background (a dev server, a watcher) and return its id.

        Its output is kept (the last 1 MiB); read it with output, end it with stop.
        """
        return await _terminal(ctx).start(command, cwd)

    async def output(
        id: IdArg,
        ctx: Context,
        since: Annotated[
            int,
            Field(ge=0, description=f"Byte offset to read from: the previous call's {NEXT}."),
        ] = 0,
    ) -> CallToolResult:
        """Read a background process's output from a byte offset, and whether it still runs."""
        return _terminal(ctx).output(id, since)

    async def stop(id: IdArg, ctx: Context) -> CallToolResult:
        """Stop a background process (SIGTERM, then SIGKILL after 2 s) with all it started.

        Returns the output not yet read and the final status.
        """
        return await _terminal(ctx).stop(id)

    async def list_processes(ctx: Context) -> CallToolResult:
        """List the background processes: id, pid, status and command."""
        return _terminal(ctx).list_processes()

    run_doc = f"{inspect.cleandoc(run.__doc__ or '')}\n\nThe default timeout is {timeout}."
    tools: list[tuple[Any, str, str, str | None, dict[str, Any], bool, bool, bool]] = [
        # (function, name, title, description, meta, read-only, destructive, idempotent)
        (run, "run", "Run a command", run_doc, EXECUTE, False, True, False),
        (start, "start", "Start a background command", None, EXECUTE, False, True, False),
        (output, "output", "Background output", None, READ, True, False, False),
        (stop, "stop", "Stop a background command", None, EXECUTE, False, True, True),
        (
            list_processes,
            "list_processes",
            "List background commands",
            None,
            READ,
            True,
            False,
            False,
        ),
    ]
    for fn, name, title, description, meta, read_only, destructive, idempotent in tools:
        hints: dict[str, Any] = {
            "title": title,
            "read_only_hint": read_only,
            "open_world_hint": name in ("run", "start"),
        }
        if not read_only:
            hints.update(destructive_hint=destructive, idempotent_hint=idempotent)
        server.add_tool(
            fn,
            name=name,
            title=title,
            description=description,
            annotations=ToolAnnotations(**hints),
            meta=dict(meta),
        )
    return server


def _terminal(ctx: Context) -> Terminal:
    """The calling connection's terminal (made when it opened)."""
    return connection_state(ctx, Terminal)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="crow mcp terminal",
        description="Crow's terminal MCP server over stdio.",
    )
    parser.add_argument(
        "--cwd", metavar="DIR", help="the commands' working directory (default: the current one)"
    )
    parser.add_argument(
        "--timeout",
        metavar="S",
        type=float,
        default=120.0,
        help="run's default timeout in seconds (default: 120)",
    )
    args = parser.parse_args(argv)
    cwd = Path(args.cwd) if args.cwd else Path.cwd()
    if not cwd.is_dir():
        parser.error(f"--cwd {cwd}: not a directory")
    if args.timeout <= 0:
        parser.error("--timeout must be positive")
    return run_stdio(build_server(cwd, default_timeout_s=args.timeout))


if __name__ == "__main__":
    sys.exit(main())
