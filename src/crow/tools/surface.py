"""One MCP tool call as the ACP client sees it (ACP-V2.md §8.2, §8.3).

    tool_call_update  {toolCallId, title, kind, status: pending, rawInput, locations}
    tool_call_update  {status: in_progress}
    terminal_update / tool_call_content_chunk {type: terminal}   (commands)
    terminal_output_chunk ...                                     (streamed output)
    tool_call_content_chunk {type: content | diff}                (the result)
    tool_call_update  {status: completed | failed | cancelled, rawOutput}

Built-in servers describe what they did in result ``_meta``: ``crow/diff``
(structured changes plus a git patch), ``crow/locations``, and for commands
``crow/exitCode`` / ``crow/signal``; streamed command output arrives as MCP
progress messages.  Other servers' results are shown as content.
"""

from __future__ import annotations

import base64
import os
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from crow.extensions import BACKGROUND, DIFF, EXIT_CODE, LOCATIONS, SIGNAL, TOOL_NAME

from .hub import ToolInfo, ToolResult

__all__ = ["ToolCallView", "title_for"]

Emit = Callable[[dict[str, Any]], Awaitable[object]]  # what it returns is not used
#: rawOutput carries at most this much of a result's text (the content has it all).
RAW_OUTPUT_CHARS = 20_000


def title_for(tool: ToolInfo, args: dict[str, Any]) -> str:
    """A short human title: "Read src/a.py", "Run `pytest -q`"."""
    target = (
        args.get("path")
        or args.get("url")
        or args.get("query")
        or args.get("pattern")
        or args.get("text")  # memory: remember
        or args.get("id")  # memory: forget
    )
    if "command" in args:
        return f"Run `{_short(str(args['command']))}`"
    verbs = {
        "read": "Read",
        "write": "Write",
        "edit": "Edit",
        "list": "List",
        "glob": "Find",
        "grep": "Search for",
        "search": "Search the web for",
        "fetch": "Fetch",
        "remember": "Remember",
        "recall": "Recall",
        "forget": "Forget",
    }
    verb = verbs.get(tool.name)
    if verb and target:
        return f"{verb} {_short(str(target))}"
    return tool.title or f"{tool.server}: {tool.name}"


def _short(text: str, limit: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class ToolCallView:
    """Reports one tool call's lifecycle through ``emit`` (the session's)."""

    def __init__(self, emit: Emit, tool: ToolInfo, args: dict[str, Any], *, cwd: str) -> None:
        self.emit = emit
        self.tool = tool
        self.args = args
        self.cwd = cwd
        self.id = f"tc_{uuid.uuid4().hex[:16]}"
        self.terminal_id: str | None = None

    @property
    def title(self) -> str:
        return title_for(self.tool, self.args)

    async def created(self) -> None:
        update: dict[str, Any] = {
            "sessionUpdate": "tool_call_update",
            "toolCallId": self.id,
            "title": self.title,
            "kind": self.tool.kind,
            "status": "pending",
            "rawInput": self.args,
            "_meta": {TOOL_NAME: self.tool.qualified},
        }
        path = self.args.get("path")
        if isinstance(path, str):
            update["locations"] = [{"path": os.path.normpath(os.path.join(self.cwd, path))}]
        await self.emit(update)

    async def started(self) -> None:
        await self._status("in_progress")
        command = self.args.get("command")
        if self.tool.kind == "execute" and isinstance(command, str):
            self.terminal_id = f"term_{uuid.uuid4().hex[:16]}"
            cwd = os.path.normpath(os.path.join(self.cwd, str(self.args.get("cwd") or ".")))
            await self.emit(
                {
                    "sessionUpdate": "terminal_update",
                    "terminalId": self.terminal_id,
                    "command": command,
                    "cwd": cwd,
                }
            )
            await self.emit(
                {
                    "sessionUpdate": "tool_call_content_chunk",
                    "toolCallId": self.id,
                    "content": {"type": "terminal", "terminalId": self.terminal_id},
                }
            )

    async def output(self, text: str) -> None:
        """A piece of streamed output (MCP progress)."""
        if self.terminal_id is None:
            return
        data = base64.b64encode(text.encode()).decode()
        await self.emit(
            {"sessionUpdate": "terminal_output_chunk", "terminalId": self.terminal_id, "data": data}
        )

    async def finished(self, result: ToolResult) -> None:
        meta = result.meta
        if self.terminal_id is not None and meta.get(BACKGROUND) is None:
            await self._exit_status(meta)  # (a background process's terminal lives on)
        else:
            for block in result.content:
                await self._content({"type": "content", "content": block})
        diff = meta.get(DIFF)
        if isinstance(diff, dict) and isinstance(diff.get("changes"), list):
            item: dict[str, Any] = {"type": "diff", "changes": diff["changes"]}
            if isinstance(diff.get("patch"), str) and diff["patch"]:
                item["patch"] = {"format": "git_patch", "text": diff["patch"]}
            await self._content(item)
        update: dict[str, Any] = {
            "sessionUpdate": "tool_call_update",
            "toolCallId": self.id,
            "status": "failed" if result.is_error else "completed",
            "rawOutput": {"text": result.text[:RAW_OUTPUT_CHARS], "isError": result.is_error},
        }
        locations = meta.get(LOCATIONS)
        if isinstance(locations, list) and locations:
            update["locations"] = locations
        await self.emit(update)

    async def failed(self, message: str) -> None:
        await self._content({"type": "content", "content": {"type": "text", "text": message}})
        await self.emit(
            {
                "sessionUpdate": "tool_call_update",
                "toolCallId": self.id,
                "status": "failed",
                "rawOutput": {"text": message, "isError": True},
            }
        )

    async def cancelled(self) -> None:
        await self._status("cancelled")

    async def _status(self, status: str) -> None:
        await self.emit(
            {"sessionUpdate": "tool_call_update", "toolCallId": self.id, "status": status}
        )

    async def _content(self, item: dict[str, Any]) -> None:
        await self.emit(
            {"sessionUpdate": "tool_call_content_chunk", "toolCallId": self.id, "content": item}
        )

    async def exited(self, meta: dict[str, Any]) -> None:
        """The terminal of a background process has ended (its exit code, signal)."""
        await self._exit_status(meta)

    async def _exit_status(self, meta: dict[str, Any]) -> None:
        status: dict[str, Any] = {}
        if isinstance(meta.get(EXIT_CODE), int):
            status["exitCode"] = meta[EXIT_CODE]
        if isinstance(meta.get(SIGNAL), str):
            status["signal"] = meta[SIGNAL]
        await self.emit(
            {
                "sessionUpdate": "terminal_update",
                "terminalId": self.terminal_id,
                "exitStatus": status,
            }
        )
