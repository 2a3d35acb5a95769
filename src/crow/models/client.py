"""One streamed chat-completion call to one OpenAI-compatible model.

The HTTP goes through ``transport`` (aiohttp), imported on first use: an agent
must answer ``initialize`` long before its first model call.  There are no
retries here; ``router`` owns the one retry and fallback policy.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import orjson

from ..config import Config, ModelSpec, ProviderSpec
from ..redact import redact, redact_url
from ..tls import client_context
from .discovery import Finding, discover
from .errors import (
    ModelError,
    ModelOverloaded,
    ModelStreamBroken,
    ModelUnreachable,
)
from .events import (
    Event,
    Finished,
    ReasoningDelta,
    Substituted,
    TextDelta,
    Usage,
    deltas,
)
from .local import LocalModels

if TYPE_CHECKING:
    from .transport import ModelHttp

__all__ = ["ModelClient"]

#: Seconds to open a connection to a model server.
CONNECT_TIMEOUT_S = 10.0
#: Seconds to wait for a TCP connect to zero config's guessed model server.
PROBE_TIMEOUT_S = 1.0
#: Connections to one model server at once.
MAX_CONNECTIONS = 1000


class ModelClient:
    """Streams chat completions; keeps one HTTP client per provider, and the
    embedded models (``kind = "local"`` providers) loaded in this process."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self._clients: dict[str, ModelHttp] = {}
        self._local: LocalModels | None = None
        self._seen_listening: set[str] = set()
        self._ollama_ids: dict[str, str] = {}  # a guessed model -> the id ollama has

    async def aclose(self) -> None:
        """Close the HTTP connections of every provider client, and free local models."""
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.aclose()
        local, self._local = self._local, None
        if local is not None:
            await local.aclose()

    def _http(self, provider: ProviderSpec) -> ModelHttp:
        http = self._clients.get(provider.name)
        if http is None:
            from .transport import ModelHttp  # start-up: aiohttp waits for the first call

            timeout = self.config.retry.timeout_s
            http = self._clients[provider.name] = ModelHttp(
                provider.base_url,
                api_key=_api_key(provider) or "not-needed",  # local servers ignore the key
                timeout_s=timeout,
                connect_timeout_s=min(CONNECT_TIMEOUT_S, timeout),
                max_connections=MAX_CONNECTIONS,
            )
        return http

    async def _probe(self, spec: ModelSpec, provider: ProviderSpec) -> None:
        """Zero config's guessed server: is anything listening?  A bare TCP connect
        answers in a millisecond, where a first call costs the HTTP client's import
        and its connect timeout; on a first run with no server, that is most of the
        wait for the fallback."""
        url = urlsplit(provider.base_url)
        port = url.port or (443 if url.scheme == "https" else 80)
        try:
            async with asyncio.timeout(PROBE_TIMEOUT_S):
                _, writer = await asyncio.open_connection(url.hostname, port)
        except (OSError, TimeoutError) as exc:
            raise ModelUnreachable(
                f"{spec.name}: nothing listens at {redact_url(provider.base_url)} ({exc})",
                model=spec.name,
            ) from None
        writer.close()
        self._seen_listening.add(provider.name)
        self._ollama_ids[spec.name] = await _ollama_pick(provider.base_url, spec.model_id)

    async def discover(self, spec: ModelSpec) -> Finding | None:
        """What ``spec``'s server says of it (models.discovery); None for an embedded
        model or a server that does not answer.  Raises ModelUnreachable when zero
        config's guessed server is not there."""
        provider = self.config.providers[spec.provider]
        if provider.kind == "local":
            return None
        if provider.guessed and provider.name not in self._seen_listening:
            await self._probe(spec, provider)
        model_id = self._ollama_ids.get(spec.name, spec.model_id)
        return await discover(provider.base_url, model_id, api_key=_api_key(provider))

    async def stream(
        self,
        spec: ModelSpec,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        tool_choice: dict[str, Any] | None = None,
    ) -> AsyncIterator[Event]:
        """Yield the deltas of one completion, then ``Finished``.  ``tool_choice``
        goes to OpenAI-compatible servers (an embedded model chooses its own).

        Raises ModelError; ModelStreamBroken if it fails after yielding output.
        """
        provider = self.config.providers[spec.provider]
        if provider.kind == "local":
            if self._local is None:
                self._local = LocalModels()
            local = self._local.stream(spec, messages, tools=tools)
            async with contextlib.aclosing(local):  # a cancelled turn stops generating now
                async for event in local:
                    yield event
            return
        if provider.guessed and provider.name not in self._seen_listening:
            await self._probe(spec, provider)
        http = self._http(provider)
        model_id = self._ollama_ids.get(spec.name, spec.model_id) if provider.guessed else None
        if model_id and model_id != spec.model_id:
            yield Substituted(model=spec.name, model_id=model_id)
        request: dict[str, Any] = {
            "model": model_id or spec.model_id,
            "messages": messages,
            "stream": True,
            "stream_options": {"include_usage": True},
            "max_tokens": spec.max_output_tokens,
        }
        if tools:
            request["tools"] = tools
            if tool_choice is not None:
                request["tool_choice"] = tool_choice
        reading = _Reading(spec.name)
        try:
            stream = http.post_stream("/chat/completions", _encode(request), spec.name)
            async with contextlib.aclosing(stream):  # leaving early closes the connection
                async for batch in stream:
                    ready, failed = reading.take(batch)
                    for event in _arrived_together(ready):
                        yield event
                    if failed is not None:
                        raise failed
        except ModelError as exc:
            if reading.produced:
                raise ModelStreamBroken(
                    f"{exc.message} (after part of the reply had arrived)", model=spec.name
                ) from exc
            raise
        if reading.finish_reason is None:
            raise ModelStreamBroken(
                f"{spec.name}: the reply ended without a finish reason", model=spec.name
            )
        yield Finished(finish_reason=reading.finish_reason, model=spec.name, usage=reading.usage)


class _Reading:
    """What a streamed completion has said so far, read a batch of chunks at a time."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.produced = False
        self.finish_reason: str | None = None
        self.usage: Usage | None = None

    def take(self, batch: list[bytes]) -> tuple[list[Event], ModelError | None]:
        """The events in ``batch``; and the error an error event in it reports
        (the events before it are the reply's all the same)."""
        ready: list[Event] = []
        for data in batch:
            chunk = _decode(data, self.model)
            if not isinstance(chunk, dict):
                continue
            if isinstance(chunk.get("error"), dict):  # an error event mid-stream
                reason = chunk["error"].get("message", "the model stream failed")
                reason = redact(str(reason))  # it is logged, and sent to the client
                self.produced = self.produced or bool(ready)
                return ready, ModelOverloaded(f"{self.model}: {reason}", model=self.model)
            if isinstance(chunk.get("usage"), dict):
                self.usage = Usage(
                    prompt_tokens=chunk["usage"].get("prompt_tokens") or 0,
                    completion_tokens=chunk["usage"].get("completion_tokens") or 0,
                )
            for choice in (chunk.get("choices") or [])[:1]:
                ready += deltas(choice.get("delta") or {})
                self.finish_reason = choice.get("finish_reason") or self.finish_reason
        self.produced = self.produced or bool(ready)
        return ready, None


def _arrived_together(events: list[Event]) -> list[Event]:
    """``events`` (parsed from one network read), each delta but the last marked as
    having ``more`` right behind it."""
    marked: list[Event] = []
    for event in events[:-1]:
        if isinstance(event, TextDelta | ReasoningDelta):
            event = dataclasses.replace(event, more=True)
        marked.append(event)
    return marked + events[-1:]


def _api_key(provider: ProviderSpec) -> str | None:
    from_env = os.environ.get(provider.api_key_env) if provider.api_key_env else None
    return from_env or provider.api_key


async def _ollama_pick(base_url: str, wanted: str) -> str:
    """The model id to ask zero config's ollama for: ``wanted`` if it has it (or
    cannot tell), else the first model it has (``/api/tags``)."""
    import httpx2  # start-up: only zero config's first call asks ollama

    root = base_url.rstrip("/").removesuffix("/v1")
    try:
        async with httpx2.AsyncClient(timeout=PROBE_TIMEOUT_S, verify=client_context()) as http:
            answer = await http.get(f"{root}/api/tags")
        names = [m["name"] for m in answer.json()["models"]] if answer.is_success else []
    except (httpx2.HTTPError, ValueError, KeyError, TypeError):
        return wanted  # not ollama, or not telling: ask for the model as configured
    if not names or wanted in names or f"{wanted}:latest" in names:
        return wanted
    return str(names[0])


def _encode(request: dict[str, Any]) -> bytes:
    """The body as bytes: orjson encodes a long history several times faster than json."""
    try:
        return orjson.dumps(request)
    except orjson.JSONEncodeError:  # a lone surrogate: json escapes it
        return json.dumps(request).encode()


def _decode(data: bytes, model: str) -> Any:
    """One event's JSON.  Chunks stay plain dicts: a ChatCompletionChunk model
    per chunk would cost more than everything else Crow does with it."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        raise ModelOverloaded(
            f"{model}: the model server sent malformed data ({data[:80]!r})", model=model
        ) from None
