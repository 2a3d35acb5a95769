"""A GGUF model run by llama-cpp-python (the ``llama`` extra), one of the two
runtimes behind the ``local`` provider (``local.py`` picks one).

llama.cpp has no wheel for most machines: pip compiles it (a C++ compiler and
~15 minutes on two cores), which is why it is an extra on top of ``local``
rather than its default; ``CROW_LOCAL_RUNTIME=llama.cpp`` chooses it.  Generation
runs synchronously in the caller's thread: a set ``stop`` ends it at the next
token.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["LlamaCppEngine"]


class LlamaCppEngine:
    runtime = "llama.cpp"

    def __init__(self, path: Path, context_window: int) -> None:
        from llama_cpp import Llama  # the optional llama extra (a native library)

        _quiet_llama_cpp()
        self.llm = Llama(
            model_path=str(path),
            n_ctx=context_window,
            n_threads=max(1, (os.cpu_count() or 2)),
            verbose=False,
        )

    def close(self) -> None:
        self.llm.close()

    def chunks(self, request: dict[str, Any], stop: threading.Event) -> Iterator[dict[str, Any]]:
        """The completion's chunks, in the streamed ``delta`` format, the last with its
        usage; a set ``stop`` ends generation at the next token."""
        produced, said_usage = 0, False
        try:
            stream = _completion(self.llm, request, stop)
        except _Stopped:
            return
        try:
            for chunk in stream:
                if stop.is_set():
                    return
                produced += bool(chunk.get("choices"))
                said_usage = said_usage or bool(chunk.get("usage"))
                yield chunk
        except _Stopped:
            return
        finally:
            if hasattr(stream, "close"):
                stream.close()
        if said_usage:
            return
        # Streamed, llama-cpp-python says no usage: a chunk is a token, and the
        # context holds the prompt and the reply.
        yield {
            "choices": [],
            "usage": {
                "prompt_tokens": max(0, self.llm.n_tokens - produced),
                "completion_tokens": produced,
            },
        }


_silencer: Any = None


def _quiet_llama_cpp() -> None:
    """llama.cpp logs from C straight to stderr, past Python's logging, even with
    ``verbose=False``: route it nowhere (its errors still raise in Python)."""
    global _silencer
    if _silencer is None:
        import ctypes  # with llama.cpp only

        import llama_cpp  # the optional llama extra

        _silencer = llama_cpp.llama_log_callback(lambda level, text, data: None)
        llama_cpp.llama_log_set(_silencer, ctypes.c_void_p(0))


def _completion(llm: Any, request: dict[str, Any], stop: threading.Event) -> Iterator[Any]:
    """Without tools, the model's own chat template.  With tools, llama-cpp-python's
    chatml-function-calling (a ChatML prompt that lists them; best for models
    trained on ChatML, such as Qwen and SmolLM).  It cannot stream a tool call
    (it raises): the choice is then made again without streaming (at temperature
    0, so it comes out the same) and the whole answer is one chunk."""
    if not request.get("tools"):
        return iter(llm.create_chat_completion(**request))
    from llama_cpp.llama_chat_format import chatml_function_calling  # the optional extra

    request = {**request, "tool_choice": "auto"}  # OpenAI's default; offers the tools
    if not any(m.get("role") == "system" for m in request["messages"]):
        # ... in a system message, which it describes them in.
        request["messages"] = [{"role": "system", "content": ""}, *request["messages"]]
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
        from llama_cpp import StoppingCriteriaList  # the optional extra

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
