"""What the model is sent of a session's transcript, in the order its API wants.

A prompt steered into a running turn (crow.agent.queue) is saved when it comes:
while a model reply streams (then it is marked ``DURING_REPLY``, and belongs after
that reply, saved once whole) or while the reply's tool calls run (then it sits
before their results, and the model's API refuses a tool result that does not
follow its call).  ``in_model_order`` moves such prompts where they belong.
"""

from __future__ import annotations

from typing import Any

import orjson

__all__ = ["DURING_REPLY", "estimate_tokens", "in_model_order"]

#: The mark of a transcript message steered in while a model reply streamed
#: (taken off before the model sees it).
DURING_REPLY = "_crow_during_reply"


def in_model_order(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` with every steered prompt after the reply and tool results it
    interrupted."""
    return _tool_results_first(_after_their_replies(messages))


def estimate_tokens(messages: list[dict[str, Any]]) -> int:
    """A rough count: about 4 characters a token."""
    return len(orjson.dumps(messages)) // 4


def _after_their_replies(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` with each prompt steered in while a reply streamed moved after that
    reply (saved once it was whole, so after it), and the mark taken off."""
    out: list[dict[str, Any]] = []
    steered: list[dict[str, Any]] = []
    for message in messages:
        if message.get(DURING_REPLY):
            steered.append({k: v for k, v in message.items() if k != DURING_REPLY})
            continue
        if message.get("role") == "assistant":
            out.append(message)
        else:
            out += steered  # no reply followed (cancelled): where it was
            steered = []
            out.append(message)
            continue
        out += steered
        steered = []
    return out + steered


def _tool_results_first(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` with the results of an assistant message's tool calls right after
    it: a prompt steered in while the calls ran was saved before their results, and
    the model's API refuses a tool result that does not follow its call."""
    out: list[dict[str, Any]] = []
    waiting: set[str] = set()  # calls of the last assistant message not answered yet
    moved: list[dict[str, Any]] = []  # what came between them and their results
    for message in messages:
        role = message.get("role")
        if role == "tool" and message.get("tool_call_id") in waiting:
            waiting.discard(message["tool_call_id"])
            out.append(message)
            if not waiting:
                out += moved
                moved = []
            continue
        if waiting and role != "tool":
            moved.append(message)
            continue
        out += moved
        moved = []
        out.append(message)
        calls = message.get("tool_calls") if role == "assistant" else None
        waiting = {str(c.get("id")) for c in calls or [] if isinstance(c, dict)}
    return out + moved
