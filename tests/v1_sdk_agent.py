"""A v1-only ACP agent on the official Python SDK (``agent-client-protocol``'s
``run_agent``, v1 models and helpers), as agents written with it are: the SDK answers
``initialize`` with protocol version 1.

- ``session/new``, ``session/load`` (replays what the session said, then answers).
- ``session/prompt`` by its text: ``ask`` asks permission for a tool call, then
  says what was chosen; ``wait`` waits for ``session/cancel`` and ends
  ``cancelled``; anything else: a plan, a tool call and an echo in chunks.
"""

import asyncio
import uuid
from typing import Any

from acp import (
    PROTOCOL_VERSION,
    plan_entry,
    run_agent,
    start_tool_call,
    update_agent_message_text,
    update_plan,
    update_tool_call,
)
from acp import schema as v1


class EchoAgent:
    def __init__(self) -> None:
        self.conn: Any = None
        self.history: dict[str, list[Any]] = {}
        self.cancels: dict[str, asyncio.Event] = {}

    def on_connect(self, conn: Any) -> None:
        self.conn = conn

    async def say(self, session_id: str, update: Any, record: bool = True) -> None:
        if record:
            self.history[session_id].append(update)
        await self.conn.session_update(session_id=session_id, update=update)

    async def initialize(self, protocol_version: int, **kwargs: Any) -> v1.InitializeResponse:
        return v1.InitializeResponse(
            protocol_version=PROTOCOL_VERSION,
            agent_capabilities=v1.AgentCapabilities(load_session=True),
            agent_info=v1.Implementation(name="v1-sdk-agent", version="1.0"),
        )

    async def new_session(self, cwd: str, **kwargs: Any) -> v1.NewSessionResponse:
        session_id = f"sdk-{uuid.uuid4().hex[:8]}"
        self.history[session_id] = []
        return v1.NewSessionResponse(session_id=session_id)

    async def load_session(self, cwd: str, session_id: str, **kwargs: Any) -> Any:
        for update in list(self.history.get(session_id, [])):
            await self.say(session_id, update, record=False)
        return v1.LoadSessionResponse()

    async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> Any:
        text = "".join(getattr(block, "text", "") for block in prompt)
        if text == "wait":
            event = self.cancels[session_id] = asyncio.Event()
            await event.wait()
            return v1.PromptResponse(stop_reason="cancelled")
        if text == "ask":
            call = start_tool_call("call-1", "rm -rf build", kind="execute", status="pending")
            await self.say(session_id, call)
            options = [
                v1.PermissionOption(option_id="allow", name="Allow", kind="allow_once"),
                v1.PermissionOption(option_id="reject", name="Reject", kind="reject_once"),
            ]
            asked = v1.ToolCallUpdate(tool_call_id="call-1", title="rm -rf build")
            answer = await self.conn.request_permission(
                session_id=session_id, tool_call=asked, options=options
            )
            if answer.outcome.outcome != "selected":
                return v1.PromptResponse(stop_reason="cancelled")
            chosen = answer.outcome.option_id
            status = "completed" if chosen == "allow" else "failed"
            await self.say(session_id, update_tool_call("call-1", status=status))
            await self.say(session_id, update_agent_message_text(f"you chose {chosen}"))
            return v1.PromptResponse(stop_reason="end_turn")
        await self.say(session_id, update_plan([plan_entry("echo it", status="completed")]))
        call = start_tool_call("read-1", "read notes", kind="read", status="completed")
        await self.say(session_id, call)
        await self.say(session_id, update_agent_message_text("Echo: "))
        await self.say(session_id, update_agent_message_text(text))
        return v1.PromptResponse(stop_reason="end_turn")

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        event = self.cancels.pop(session_id, None)
        if event is not None:
            event.set()


if __name__ == "__main__":
    asyncio.run(run_agent(EchoAgent()))
