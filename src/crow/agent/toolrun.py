"""Running the tool calls of one model reply: permission, the call, the result.

The calls of one reply run concurrently (a TaskGroup).  Each one shows up in the
client as a tool call (``crow.tools.surface``); when policy says "ask", the
session goes ``requires_action`` until the answer, and ``running`` again after
the last open question.  A memory write beyond the session's own scopes always
asks, whatever the policy, and goes to the server marked as the person's yes.
Whatever happens, each call yields one result text for the model: its output
(cut past ``[tools] max_result_kib``, crow.tools.caps), an error, a refusal, or
"cancelled".
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crow.acp import schema
from crow.extensions import APPROVED, BACKGROUND
from crow.memory.scopes import MemoryPlace
from crow.observe import metrics, tracing
from crow.tools.caps import cap_result
from crow.tools.hub import ToolHub, ToolInfo, ToolServerError
from crow.tools.permissions import OPTIONS
from crow.tools.surface import ToolCallView

from .asking import Question
from .background import follow_process
from .preview import fs_diff
from .updates import state_update

if TYPE_CHECKING:
    from .session import LiveSession

__all__ = ["ToolRunner"]

CANCELLED = "The tool call was cancelled by the user."
#: The answers to a question that no "always" answer may settle.
ONCE = ("allow_once", "reject_once")
REJECTED = "The user rejected this tool call. Do not retry it; ask what to do instead."


class ToolRunner:
    def __init__(
        self, session: LiveSession, hub: ToolHub, *, max_result_bytes: int, kept_in: Path | None
    ) -> None:
        self.session = session
        self.hub = hub
        self.open_questions = 0
        self.max_result_bytes = max_result_bytes
        self.kept_in = kept_in  # where a cut result is kept whole

    async def run_all(self, calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Run every call; returns the tool messages for the transcript, in order.

        On cancellation the messages are still complete ("cancelled" for the
        unfinished calls) and the CancelledError is raised after them: read
        ``messages`` before re-raising.
        """
        results: dict[str, str] = {}
        try:
            async with asyncio.TaskGroup() as group:
                for call in calls:
                    group.create_task(self._run_into(call, results))
        finally:
            self.messages = [
                {
                    "role": "tool",
                    "tool_call_id": call["id"],
                    "content": results.get(call["id"], CANCELLED),
                }
                for call in calls
            ]
        return self.messages

    async def _run_into(self, call: dict[str, Any], results: dict[str, str]) -> None:
        results[call["id"]] = await self.run(call)

    async def run(self, call: dict[str, Any]) -> str:
        tool = self.hub.find(call["name"])
        if tool is None:
            names = ", ".join(t.qualified for t in self.hub.tools()) or "none"
            return f"Error: there is no tool named {call['name']!r}. Available tools: {names}."
        try:
            args = json.loads(call["arguments"] or "{}")
            if not isinstance(args, dict):
                raise ValueError("the arguments must be a JSON object")
        except ValueError as exc:
            return f"Error: the arguments of {tool.qualified} are not valid JSON: {exc}"
        view = ToolCallView(self.session.emit, tool, args, cwd=self.session.record.cwd)
        await view.created()
        try:
            beyond = self.beyond(tool, args)
            allowed = await (
                self.approved(view, tool, args, beyond)
                if beyond
                else self.allowed(view, tool, args)
            )
            if not allowed:
                return REJECTED
            await view.started()
            meta = {APPROVED: True} if beyond else None
            result = await self._call(tool, args, view, meta)
        except asyncio.CancelledError:
            await view.cancelled()
            raise
        except ToolServerError as exc:
            await view.failed(str(exc))
            return f"Error: {exc}"
        result = cap_result(result, self.max_result_bytes, self.kept_in, view.id)
        await view.finished(result)
        process = result.meta.get(BACKGROUND)
        if isinstance(process, str) and view.terminal_id is not None and tool.trusted:
            follow_process(self.session, self.hub, tool.server, process, view)
        return f"Error: {result.text}" if result.is_error else result.text

    async def _call(
        self, tool: ToolInfo, args: dict[str, Any], view: ToolCallView, meta: dict[str, Any] | None
    ) -> Any:
        """The call itself, timed and traced by its server."""
        failed = True
        started = time.perf_counter()
        try:
            with tracing.child("crow.tool", server=tool.server, tool=tool.name):
                result = await self.hub.call(tool, args, on_progress=view.output, meta=meta)
            failed = result.is_error
            return result
        finally:
            metrics.tool_call(tool.server, time.perf_counter() - started, failed=failed)

    async def allowed(self, view: ToolCallView, tool: ToolInfo, args: dict[str, Any]) -> bool:
        assert self.session.permissions is not None
        decision = self.session.permissions.decide(tool)
        if decision == "allow":
            return True
        if decision == "deny":
            await view.failed(
                f"Refused by Crow's permission policy for {tool.permission_kind} tools."
            )
            return False
        outcome = await self.ask(view, tool, args)
        option = getattr(outcome, "option_id", None) if _selected(outcome) else None
        answer = self.session.permissions.answer(tool, option)
        if not answer.allowed:
            await view.failed("The user rejected this tool call.")
        return answer.allowed

    def beyond(self, tool: ToolInfo, args: dict[str, Any]) -> str | None:
        """The memory scope beyond the session's own that this call writes to, if any."""
        if tool.scope_argument is None or tool.scope_argument not in args:
            return None
        place = MemoryPlace(self.session.record.cwd, self.session.id)
        return place.outside(args[tool.scope_argument])

    async def approved(
        self, view: ToolCallView, tool: ToolInfo, args: dict[str, Any], scope: str
    ) -> bool:
        """Ask the person about a write to ``scope``, beyond the session's own: every
        time (no policy or "always" answer covers another project's memories)."""
        why = f"{tool.server} wants to write to {scope}, beyond this session's memory scopes."
        outcome = await self.ask(view, tool, args, description=why, once=True)
        option = getattr(outcome, "option_id", None) if _selected(outcome) else None
        if option != "allow_once":
            await view.failed("The user rejected this tool call.")
            return False
        return True

    async def ask(
        self,
        view: ToolCallView,
        tool: ToolInfo,
        args: dict[str, Any],
        *,
        description: str | None = None,
        once: bool = False,
    ) -> Any:
        """Ask every client watching now or attaching later; the first answer wins.
        ``once``: offer only "allow once" and "reject"."""
        session = self.session
        request = _request(session.id, view, tool, args, once=once)
        subject = request.subject
        if isinstance(subject, schema.ToolCallPermissionSubject):
            extra = session.tool_setup[1] if session.tool_setup else ()
            diff = await fs_diff(tool.server, tool.name, args, session.record.cwd, extra)
            if diff is not None:  # what the person is asked to allow
                content = schema.adapter(schema.ToolCallContent).validate_python(diff)
                subject.tool_call.content = [content]
            else:  # the command, the URL: as the call will get them
                subject.tool_call.raw_input = args
        if description is not None:
            request.description = description
        question = Question(request)
        self.open_questions += 1
        if self.open_questions == 1:
            await session.emit(state_update("requires_action"))
        try:
            outcome = await session.ask(question)
        finally:
            self.open_questions -= 1
        if self.open_questions == 0:
            await session.emit(state_update("running"))
        return outcome


def _trust(tool: ToolInfo) -> str:
    return "" if tool.trusted else ", from an MCP server not marked trusted"


def _selected(outcome: Any) -> bool:
    return getattr(outcome, "outcome", None) == "selected"


def _request(
    session_id: str, view: ToolCallView, tool: ToolInfo, args: dict[str, Any], *, once: bool
) -> schema.RequestPermissionRequest:
    subject: Any = schema.ToolCallPermissionSubject(
        tool_call=schema.ToolCallUpdate(tool_call_id=view.id, title=view.title, kind=tool.kind)
    )
    command = args.get("command")
    if tool.permission_kind == "execute" and isinstance(command, str):
        subject = schema.CommandPermissionSubject(
            command=command, cwd=view.cwd, tool_call_id=view.id
        )
    return schema.RequestPermissionRequest(
        session_id=session_id,
        title=f"Allow {view.title}?",
        description=f"{tool.server} wants to run {tool.name} ({tool.kind}){_trust(tool)}.",
        subject=subject,
        options=[
            schema.PermissionOption(option_id=option_id, name=label, kind=kind)
            for option_id, (kind, label) in OPTIONS.items()
            if not once or option_id in ONCE
        ],
    )
