"""Fit a chat request to what one model can take.

The transcript keeps user content in OpenAI's content-part form, images and
audio included.  Before a request goes to a model that lacks a modality, those
parts are replaced by a short text note, and the caller is told which
modalities were dropped so it can tell the user.
"""

from __future__ import annotations

from typing import Any

from ..config import ModelSpec

__all__ = ["PART_MODALITY", "fit_messages"]

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
