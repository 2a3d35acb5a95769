"""Crow's built-in memory MCP server: ``remember``, ``recall``, ``forget``, ``list_memories``.

Any MCP host can use it: ``crow mcp memory`` serves it on stdio over the
store in ``$CROW_HOME/memory`` (``--folder`` moves it), for the project of
the current directory.  In a Crow session it runs in process beside fs and
terminal, for the session's project and the session itself.

Scopes: ``global`` (everywhere), ``project`` (this project: the git root
above the working directory, or the directory), ``session`` (this session
only, in Crow), or the full forms ``project:<root>`` / ``session:<id>``.
Recall and list look at global + this project (+ this session) unless told
otherwise.

What the tools reach is fixed when a connection opens, by its ``MemoryPlace``
(crow.memory.scopes; in Crow, the session's, given by the hub: ``crow.servers.shared``;
run alone, the one the server was made with): whoever calls a tool (a model, an agent
behind ``crow proxy memory``) gets its own scopes only, whatever scope it names; ``all`` and other
projects' or sessions' scopes are refused with a one-line error.  A server made
with ``approvals`` (Crow's own, in process) also writes beyond them when the call
says the person agreed (``_meta["crow/approved"]``, which only Crow's tool runner
sets, after asking); the model names arguments, never a call's ``_meta``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations
from pydantic import Field

from ..config import ConfigError, load_config
from ..extensions import APPROVED, SCOPE_ARGUMENT, TOOL_KIND
from ..memory.scopes import OWN, READ_ALL, MemoryError, MemoryPlace
from ..observe import metrics
from ._stdio import run_stdio
from .shared import connection_state, scoped_lifespan

if TYPE_CHECKING:
    from ..memory.store import MemoryStore

__all__ = ["build_server", "main"]

T = TypeVar("T")
MAX_LIMIT = 100


SearchScope = Annotated[
    str | None,
    Field(description="global, project, session or all (default: global + project)."),
]
TagFilter = Annotated[list[str] | None, Field(description="Only memories with one of these.")]

INSTRUCTIONS = (
    "Long-term memory that outlives this conversation. remember durable facts: the user's "
    "preferences, project conventions, decisions and their reasons, pitfalls found the hard "
    "way. Do not remember transient chatter or what the code itself says. recall before "
    "guessing at something a past session may have learned."
)


def build_server(
    open_store: Callable[[], MemoryStore],
    place: MemoryPlace | None = None,
    *,
    approvals: bool = False,
) -> MCPServer:
    """The server; each connection reaches its own place (given when it opened), else
    ``place``; without ``place`` it is Crow's shared one, and a connection that brings
    no place is refused.  ``open_store`` is called in a worker
    thread at the first tool call (opening the store imports LanceDB and numpy: not on
    the event loop).  ``approvals``: honour ``_meta["crow/approved"]`` (Crow's own only)."""

    @asynccontextmanager
    async def connect(scope: MemoryPlace) -> AsyncIterator[MemoryPlace]:
        yield scope

    server: MCPServer = MCPServer(
        "memory",
        instructions=INSTRUCTIONS,
        lifespan=scoped_lifespan(connect, name="memory", default=place),
    )

    def approved(ctx: Context) -> bool:
        meta = ctx.request_context.meta or {}
        return approvals and meta.get(APPROVED) is True

    async def remember(
        text: Annotated[
            str, Field(description="The fact, in one or two self-contained sentences.")
        ],
        tags: Annotated[
            list[str] | None, Field(description="A few lowercase keywords, e.g. testing.")
        ] = None,
        scope: Annotated[
            str, Field(description="global (everywhere), project (default) or session.")
        ] = "project",
        ctx: Context = None,  # type: ignore[assignment]  # given by MCPServer
    ) -> dict[str, Any]:
        """Store a durable fact for later sessions; a near-duplicate in the scope is replaced."""
        place = _place(ctx)
        target = _checked(lambda: place.scope(scope, approved=approved(ctx)))
        done = await _run(
            lambda: open_store().remember(
                text,
                scope=target,
                tags=tags or (),
                session=(place.session or "").removeprefix("session:"),
            )
        )
        out: dict[str, Any] = {"id": done.id, "merged_into": done.merged_into}
        if done.replaced_text is not None:
            out["replaced_text"] = done.replaced_text
        return out

    async def recall(
        query: Annotated[str, Field(description="What you want to know, in plain words.")],
        limit: Annotated[int, Field(description="At most this many memories.", ge=1)] = 5,
        scope: SearchScope = None,
        tags: TagFilter = None,
        ctx: Context = None,  # type: ignore[assignment]  # given by MCPServer
    ) -> dict[str, Any]:
        """Find the memories most relevant to a query, best first."""
        scopes = _checked(lambda: _place(ctx).scopes(scope))
        with metrics.timed(metrics.memory_recall):
            found = await _run(
                lambda: open_store().recall(
                    query, scopes=scopes, tags=tags or (), limit=min(limit, MAX_LIMIT)
                )
            )
        await _run(lambda: open_store().mark_recalled([h.memory.id for h in found.hits]))
        out: dict[str, Any] = {
            "memories": [
                {**_brief(h.memory.to_dict()), "score": round(h.score, 4)} for h in found.hits
            ],
            "search": found.mode,
        }
        if found.note:
            out["note"] = found.note
        return out

    async def forget(
        id: Annotated[str, Field(description="The memory's id, as remember or recall gave it.")],
        ctx: Context = None,  # type: ignore[assignment]  # given by MCPServer
    ) -> dict[str, Any]:
        """Delete one memory for good."""
        found = await _run(lambda: open_store().get(id))
        if found is not None and not _place(ctx).reaches(found.scope) and not approved(ctx):
            raise ToolError(
                f"{id} is kept in {found.scope}, beyond this session's memory scopes: the "
                f"memory tools cannot forget it; the person can, with `crow memory forget {id}`"
            )
        gone = await _run(lambda: open_store().forget(id))
        if gone is None:
            raise ToolError(f"no memory has the id {id!r}")
        return {"forgotten": id, "text": gone.text}

    async def list_memories(
        scope: SearchScope = None,
        tags: TagFilter = None,
        limit: Annotated[int, Field(ge=1)] = 20,
        offset: Annotated[int, Field(ge=0)] = 0,
        ctx: Context = None,  # type: ignore[assignment]  # given by MCPServer
    ) -> dict[str, Any]:
        """List memories, most recently updated first."""
        scopes = _checked(lambda: _place(ctx).scopes(scope))
        memories = await _run(
            lambda: open_store().list_memories(
                scopes=scopes,
                tags=tags or (),
                limit=min(limit, MAX_LIMIT),
                offset=offset,
            )
        )
        return {"memories": [_brief(m.to_dict()) for m in memories], "offset": offset}

    writes = ToolAnnotations(read_only_hint=False, open_world_hint=False)
    reads = ToolAnnotations(read_only_hint=True, open_world_hint=False)
    registrations: list[tuple[Callable[..., Any], str, str, ToolAnnotations]] = [
        (remember, "remember", "edit", writes),  # its "scope" may need the person's yes
        (recall, "recall", "search", reads),
        (forget, "forget", "delete", ToolAnnotations(
            read_only_hint=False, destructive_hint=True, open_world_hint=False
        )),
        (list_memories, "list_memories", "read", reads),
    ]  # fmt: skip
    for fn, name, kind, hints in registrations:
        meta: dict[str, Any] = {TOOL_KIND: kind}
        if fn is remember and approvals:
            meta[SCOPE_ARGUMENT] = "scope"  # Crow asks before a write beyond the place
        server.add_tool(fn, name=name, annotations=hints, meta=meta)
    return server


def _place(ctx: Context) -> MemoryPlace:
    """The calling connection's place (given when it opened)."""
    return connection_state(ctx, MemoryPlace)


def _checked(work: Callable[[], T]) -> T:
    """A scope decision; refused as a one-line tool error."""
    try:
        return work()
    except MemoryError as exc:
        raise ToolError(str(exc)) from None


def _brief(record: dict[str, Any]) -> dict[str, Any]:
    """What a model needs of a memory: no empty fields."""
    keep = ("id", "text", "scope", "tags", "created")
    return {k: record[k] for k in keep if record.get(k) not in (None, [], "")}


async def _run(work: Callable[[], T]) -> T:
    """Store work off the event loop; a refused request is a one-line tool error."""
    try:
        return await asyncio.to_thread(work)
    except MemoryError as exc:
        raise ToolError(str(exc)) from None


def main(argv: list[str] | None = None) -> int:
    from crow.memory.shared import shared_store  # numpy and the store: only when run alone

    parser = argparse.ArgumentParser(
        prog="crow mcp memory", description="Crow's memory MCP server over stdio."
    )
    parser.add_argument("--folder", type=Path, help="the store (default: $CROW_HOME/memory)")
    parser.add_argument("--cwd", type=Path, default=Path.cwd(), help="the project's directory")
    parser.add_argument("--session", help="the session whose own scope it reaches too")
    args = parser.parse_args(argv)
    try:
        config = load_config()
    except ConfigError as exc:
        print(f"crow mcp memory: {exc}", file=sys.stderr)
        return 2
    folder = args.folder or config.paths.memory
    reach = READ_ALL if config.memory.model_reads == "all" else OWN
    place = MemoryPlace(args.cwd, args.session, reach)
    server = build_server(lambda: shared_store(folder, config.memory), place)
    return run_stdio(server)


if __name__ == "__main__":
    sys.exit(main())
