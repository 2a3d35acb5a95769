"""Fit a chat request to what one model can take.

The transcript keeps user content in OpenAI's content-part form, images and
audio included.  Before a request goes to a model that lacks a modality, those
parts are replaced by a short text note, and the caller is told which
modalities were dropped so it can tell the user.  A local model without tools
gets the conversation as plain alternating text turns (``plain_messages``).
"""

from __future__ import annotations

from typing import Any

from ..config import ModelSpec

__all__ = ["PART_MODALITY", "fit_messages", "plain_messages"]

PART_MODALITY = {"image_url": "image", "input_audio": "audio"}


def fit_messages(
    messages: list[dict[str, Any]], spec: ModelSpec
) -> tuple[list[dict[str, Any]], tuple[str, ...]]:
    """Messages for ``spec``, and the modalities that had to be stripped."""
    stripped: set[str] = set()
    out = []
    for message in messages:
        content = message.get("content")
        if not isinstance(content, list):
            out.append(message)
            continue
        parts = []
        for part in content:
            modality = PART_MODALITY.get(part.get("type", ""))
            if modality is not None and modality not in spec.capabilities:
                stripped.add(modality)
                parts.append(
                    {
                        "type": "text",
                        "text": f"[{modality} omitted: {spec.name} cannot read {modality}]",
                    }
                )
            else:
                parts.append(part)
        out.append({**message, "content": parts})
    return out, tuple(sorted(stripped))


def plain_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversation as text turns a model without tools can take.

    Tool calls and results (from an earlier model in the chain) become text, and
    turns of the same role are joined: chat templates such as Gemma's refuse a
    conversation whose user and assistant turns do not alternate.
    """
    out: list[dict[str, Any]] = []
    for message in messages:
        role, text = message.get("role"), _text(message.get("content"))
        if role == "tool":
            role, text = "user", f"[tool result]\n{text}"
        elif role == "assistant" and message.get("tool_calls"):
            calls = ", ".join(
                str((call.get("function") or {}).get("name")) for call in message["tool_calls"]
            )
            text = f"{text}\n[called tools: {calls}]".strip()
        if role not in ("system", "user", "assistant"):
            role = "user"
        if out and out[-1]["role"] == role and role != "system":
            out[-1]["content"] += f"\n\n{text}"
        else:
            out.append({"role": role, "content": text})
    return out


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            part.get("text", "") for part in content if isinstance(part, dict) and "text" in part
        )
    return ""
