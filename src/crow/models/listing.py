"""``crow models``: the models Crow can use, where each comes from, and whether it
answers now; ``--check [NAME]`` makes a real one-token call and reports its time
or its exact error.

One line per model in the chain, in order, with its capabilities and context
window as its server describes them (models.discovery; ``*`` marks figures the
server gave) or as configured::

    qwen3:8b      ollama guess  http://localhost:11434/v1  tools, reasoning; 40960*  ready
    smollm2-135m  embedded      (in process)               text only; 8192           ready
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

from ..config import EMBEDDED_MODEL, Config, ModelSpec
from ..tls import client_context

__all__ = ["check", "describe", "described", "origin", "reachable"]

PROBE_TIMEOUT_S = 2.0


def origin(config: Config, spec: ModelSpec) -> str:
    """Where the model comes from, in a word or two."""
    provider = config.providers[spec.provider]
    if provider.kind == "local":
        return "embedded" if spec.model_id == EMBEDDED_MODEL else "local file"
    if provider.guessed:
        return "ollama guess"
    return "config" if config.paths.config_file.exists() else "environment"


async def reachable(config: Config, spec: ModelSpec) -> str:
    """``ready``, or why not, without generating anything."""
    provider = config.providers[spec.provider]
    if provider.kind == "local":
        from .local import embedded_available

        if spec.model_id == EMBEDDED_MODEL:
            return "ready" if embedded_available() else "the local extra is not installed"
        path = Path(spec.model_id)
        return "ready" if path.is_file() else f"no file at {path}"
    import httpx2

    try:
        async with httpx2.AsyncClient(timeout=PROBE_TIMEOUT_S, verify=client_context()) as client:
            answer = await client.get(provider.base_url.rstrip("/") + "/models")
    except httpx2.HTTPError as exc:
        return f"unreachable ({type(exc).__name__})"
    if answer.status_code == 404:
        return "answers, but has no /models (is /v1 missing from the base URL?)"
    return "ready" if answer.is_success else f"answers {answer.status_code}"


@contextlib.asynccontextmanager
async def described(config: Config) -> AsyncIterator[Callable[[str], Awaitable[ModelSpec]]]:
    """A function from a model's name to its spec as its server describes it."""
    from .router import ModelRouter

    router = ModelRouter(config)
    try:
        yield router.describe
    finally:
        await router.aclose()


def describe(spec: ModelSpec) -> str:
    """Capabilities and context window; ``*`` after what the server said."""
    mark = "*" if spec.discovered else ""
    kinds = ", ".join(sorted(spec.capabilities)) or "text only"
    return f"{kinds}; {spec.context_window}{mark}"


async def check(config: Config, name: str) -> tuple[bool, str]:
    """One real call, one token, this model alone (no retries, no fallback)."""
    from .client import ModelClient
    from .errors import ModelError
    from .events import Finished

    spec = dataclasses.replace(config.models[name], max_output_tokens=1)
    client = ModelClient(config)
    started = time.perf_counter()
    try:
        async with asyncio.timeout(config.retry.timeout_s):
            async for event in client.stream(spec, [{"role": "user", "content": "Say OK."}]):
                if isinstance(event, Finished):
                    took = (time.perf_counter() - started) * 1000
                    return True, f"answered in {took:.0f} ms"
    except ModelError as exc:
        return False, exc.message
    except TimeoutError:
        return False, f"no answer within {config.retry.timeout_s:g} s"
    finally:
        await client.aclose()
    return False, "the reply ended without finishing"
