"""ACP prompt content → the user message the model sees (ACP-V2.md §9).

Text and resource links are baseline; images, audio and embedded resources
are accepted only when advertised.  A block that cannot be taken is refused
with ``-32602`` before anything is inserted, never dropped silently.  What the
chosen model lacks (an image for a text-only fallback) is stripped later, per
model, by ``crow.models.adapt``.

A prompt larger than ``[limits] max_prompt_mib`` is refused too: the store keeps
every prompt several times over (the update log, the transcript, replays).
"""

from __future__ import annotations

import functools
from typing import Any

import orjson

from crow.acp import InvalidParams, schema

__all__ = ["prompt_capabilities", "to_user_content"]

_AUDIO_FORMATS = {
    "audio/wav": "wav",
    "audio/x-wav": "wav",
    "audio/wave": "wav",
    "audio/mpeg": "mp3",
    "audio/mp3": "mp3",
}


@functools.lru_cache(maxsize=8)  # asked for every prompt; read, never changed
def prompt_capabilities(model_capabilities: frozenset[str]) -> schema.PromptCapabilities:
    """What prompts may carry: embedded context always (it is text to us)."""
    caps = schema.PromptCapabilities(embedded_context=schema.PromptEmbeddedContextCapabilities())
    if "image" in model_capabilities:
        caps.image = schema.PromptImageCapabilities()
    if "audio" in model_capabilities:
        caps.audio = schema.PromptAudioCapabilities()
    return caps


def to_user_content(
    blocks: list[Any], allowed: schema.PromptCapabilities, *, max_bytes: int
) -> list[dict[str, Any]]:
    """OpenAI content parts for a prompt.  Raises InvalidParams for a refused block
    or a prompt over ``max_bytes``."""
    if not blocks:
        raise InvalidParams("The prompt is empty: send at least one content block")
    _refuse_lone_surrogates(blocks)
    parts = _parts(blocks, allowed)
    size = sum(map(_size, parts))
    if size > max_bytes:
        raise InvalidParams(
            f"The prompt is {size / MIB:.1f} MiB; this agent takes at most "
            f"{max_bytes / MIB:g} MiB (limits.max_prompt_mib in config.toml)",
            data={"size": size, "limit": max_bytes},
        )
    return parts


MIB = 1024 * 1024


def _refuse_lone_surrogates(blocks: list[Any]) -> None:
    """JSON may escape half a surrogate pair (``"\\ud800"``): such a string is no
    Unicode text, and neither the store nor a client could take it back.  Every
    string of a block counts, since the blocks are logged whole (``user_message``)."""
    for index, block in enumerate(blocks):
        try:
            orjson.dumps(block.to_wire())
        except TypeError:  # orjson's only refusal of a str: a lone surrogate
            raise InvalidParams(
                f"prompt[{index}] holds a lone UTF-16 surrogate (half of a \\uD8xx\\uDCxx "
                "pair), which is not text: send the whole pair, or valid UTF-8",
                data={"index": index},
            ) from None


def _size(part: dict[str, Any]) -> int:
    """About the bytes a part costs (its text, or its base64 data)."""
    if part["type"] == "text":
        return len(part["text"])
    if part["type"] == "image_url":
        return len(part["image_url"]["url"])
    return len(part["input_audio"]["data"])


def _parts(blocks: list[Any], allowed: schema.PromptCapabilities) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    for index, block in enumerate(blocks):
        kind = getattr(block, "type", None)
        if kind == "text":
            parts.append({"type": "text", "text": block.text})
        elif kind == "resource_link":
            label = block.title if isinstance(block.title, str) else block.name
            parts.append({"type": "text", "text": f"[linked file: {label} <{block.uri}>]"})
        elif kind == "image" and _on(allowed.image):
            parts.append(
                {
                    "type": "image_url",
                    "image_url": {"url": f"data:{block.mime_type};base64,{block.data}"},
                }
            )
        elif kind == "audio" and _on(allowed.audio):
            parts.append(
                {
                    "type": "input_audio",
                    "input_audio": {
                        "data": block.data,
                        "format": _AUDIO_FORMATS.get(block.mime_type, "wav"),
                    },
                }
            )
        elif kind == "resource" and _on(allowed.embedded_context):
            parts.append(_resource_part(block.resource))
        else:
            raise InvalidParams(
                f"prompt[{index}]: content of type {kind!r} is not accepted by this agent",
                data={"index": index, "type": kind},
            )
    return parts


def _on(marker: Any) -> bool:
    return marker is not schema.UNSET and marker is not None


def _resource_part(resource: Any) -> dict[str, Any]:
    uri = resource.uri
    text = getattr(resource, "text", None)
    if isinstance(text, str):
        return {"type": "text", "text": f'<file uri="{uri}">\n{text}\n</file>'}
    mime = getattr(resource, "mime_type", None)
    if isinstance(mime, str) and mime.startswith("image/"):
        return {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{resource.blob}"}}
    return {"type": "text", "text": f"[binary file {uri} ({mime or 'unknown type'}) not shown]"}
