"""Ask a model server what a model can do, instead of trusting defaults.

Three kinds of server say something, each in its own words:

- ollama, ``POST /api/show``: ``capabilities`` (``tools``, ``vision``,
  ``thinking``, ``audio``; a model lacks what the list leaves out) and the
  context length (``num_ctx`` in its parameters, else the model's own
  ``<arch>.context_length``).
- OpenAI-compatible ``GET /v1/models``: the model's entry, with its context
  length where the server gives one (vLLM's ``max_model_len``,
  ``context_length`` on others).
- llama.cpp, ``GET /props``: the context it was started with
  (``default_generation_settings.n_ctx``) and ``modalities`` (vision, audio).

What a server does not say stays as configured.  ``merge`` applies a finding
to a ``ModelSpec``, leaving alone what config.toml set (``ModelSpec.declared``):
the user's word beats the server's.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from dataclasses import dataclass, field
from typing import Any

from ..config import ModelSpec
from ..tls import client_context

__all__ = ["Finding", "discover", "merge"]

log = logging.getLogger("crow.models")

#: Seconds for each discovery request: it delays the first turn of a model.
DISCOVERY_TIMEOUT_S = 2.0
#: ollama's capability words, in Crow's.
OLLAMA_CAPABILITIES = {
    "tools": "tools",
    "vision": "image",
    "audio": "audio",
    "thinking": "reasoning",
}


@dataclass(frozen=True, kw_only=True)
class Finding:
    """What one server said of one model."""

    source: str  # the request that said it, e.g. "ollama /api/show"
    capabilities: dict[str, bool] = field(default_factory=dict)  # only what it spoke of
    context_window: int | None = None


async def discover(base_url: str, model_id: str, *, api_key: str | None = None) -> Finding | None:
    """What the server at ``base_url`` says of ``model_id``; None if nothing
    answers there (worth asking again later), or a finding that may be empty."""
    import httpx2  # start-up: crow serve answers initialize before httpx2 is loaded

    root = base_url.rstrip("/").removesuffix("/v1")
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    async with httpx2.AsyncClient(
        timeout=DISCOVERY_TIMEOUT_S, headers=headers, verify=client_context()
    ) as http:
        try:
            shown = await _json(http.post(f"{root}/api/show", json={"model": model_id}))
        except (httpx2.TransportError, httpx2.InvalidURL):
            return None  # nothing listens, or not there: the call itself will say so
        if shown is not None and ("capabilities" in shown or "model_info" in shown):
            return _from_ollama(shown)
        found = Finding(source="")
        listed = await _json(http.get(base_url.rstrip("/") + "/models"), swallow=True)
        if listed is not None:
            found = _from_model_list(listed, model_id) or found
        props = await _json(http.get(f"{root}/props"), swallow=True)
        if props is not None and "default_generation_settings" in props:
            found = _combine(found, _from_llama_props(props))
        return found


async def _json(request: Any, *, swallow: bool = False) -> dict[str, Any] | None:
    """The JSON object a request answers with, or None for an error status or
    anything else; transport errors propagate unless ``swallow``."""
    import httpx2  # start-up: as in discover (loaded by then)

    try:
        answer = await request
    except httpx2.TransportError:
        if swallow:
            return None
        raise
    if not answer.is_success:
        return None
    try:
        body = answer.json()
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


def _from_ollama(shown: dict[str, Any]) -> Finding:
    capabilities: dict[str, bool] = {}
    listed = shown.get("capabilities")
    if isinstance(listed, list):
        capabilities = {ours: theirs in listed for theirs, ours in OLLAMA_CAPABILITIES.items()}
    return Finding(
        source="ollama /api/show",
        capabilities=capabilities,
        context_window=_ollama_context(shown),
    )


def _ollama_context(shown: dict[str, Any]) -> int | None:
    parameters = shown.get("parameters")
    if isinstance(parameters, str):
        match = re.search(r"^\s*num_ctx\s+(\d+)", parameters, re.MULTILINE)
        if match:
            return _positive(int(match.group(1)))
    info = shown.get("model_info")
    if isinstance(info, dict):
        for key, value in info.items():
            if key.endswith(".context_length"):
                return _positive(value)
    return None


def _from_model_list(listed: dict[str, Any], model_id: str) -> Finding | None:
    entries = listed.get("data")
    if not isinstance(entries, list):
        return None
    for entry in entries:
        if isinstance(entry, dict) and entry.get("id") == model_id:
            context = entry.get("max_model_len") or entry.get("context_length")
            return Finding(source="/v1/models", context_window=_positive(context))
    return None


def _from_llama_props(props: dict[str, Any]) -> Finding:
    settings = props.get("default_generation_settings")
    context = settings.get("n_ctx") if isinstance(settings, dict) else None
    modalities = props.get("modalities")
    capabilities = {}
    if isinstance(modalities, dict):
        for theirs, ours in (("vision", "image"), ("audio", "audio")):
            if isinstance(modalities.get(theirs), bool):
                capabilities[ours] = modalities[theirs]
    return Finding(
        source="llama.cpp /props", capabilities=capabilities, context_window=_positive(context)
    )


def _combine(first: Finding, then: Finding) -> Finding:
    """``first`` completed by ``then``: a running server's context beats a listing's."""
    sources = [s for s in (first.source, then.source) if s]
    return Finding(
        source=", ".join(sources),
        capabilities={**first.capabilities, **then.capabilities},
        context_window=then.context_window or first.context_window,
    )


def _positive(value: Any) -> int | None:
    return value if type(value) is int and value > 0 else None


def merge(spec: ModelSpec, found: Finding) -> ModelSpec:
    """``spec`` with what ``found`` says, except where config.toml spoke."""
    capabilities, context = spec.capabilities, spec.context_window
    said: set[str] = set()
    if "capabilities" not in spec.declared and found.capabilities:
        has = {name for name, present in found.capabilities.items() if present}
        lacks = {name for name, present in found.capabilities.items() if not present}
        capabilities = frozenset((capabilities - lacks) | has)
        said.add("capabilities")
    if "context_window" not in spec.declared and found.context_window:
        context = found.context_window
        said.add("context_window")
    if not found.source:
        return spec
    log.info(
        "model %s: %s says %s, %d tokens",
        spec.name,
        found.source,
        ", ".join(sorted(capabilities)) or "text only",
        context,
    )
    return dataclasses.replace(
        spec,
        capabilities=capabilities,
        context_window=context,
        discovered=found.source,
        from_server=frozenset(said),
    )
