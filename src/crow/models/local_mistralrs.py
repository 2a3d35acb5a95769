"""A GGUF model run by mistral.rs (``mistralrs``, the ``local`` extra's default
runtime: a prebuilt wheel, no compiler), one of the two runtimes behind the
``local`` provider (``local.py`` picks one).

mistral.rs generates on threads of its own and streams chunks to an iterator
that releases the GIL while it waits.  Leaving the iterator (dropping it) tells
the engine the reader is gone, and it stops that sequence: a set ``stop`` is
checked after every chunk.

Two things to keep it well behaved inside Crow:

- it logs through Rust's ``tracing`` to **stdout**, which is the ACP wire of
  ``crow serve``: ``RUST_LOG=off`` while the runner is made (the filter is read
  then), the caller's own value put back afterwards;
- its CPU kernels share work through spinning barriers: with more threads than
  idle cores (two cores, an editor and a test run beside it) a token took 6x the
  CPU; one thread (``CANDLE_NUM_THREADS``) degrades gracefully instead;
- it has no vectorised kernel for Q4_1, the embedded model's quantization: that
  model is requantized to Q8_0 as it loads (143 MB instead of 80 MB in memory,
  no precision lost), which made a 500-token prompt ~6x cheaper.  Other GGUF
  files run as they are (a larger model would double its memory).

Tools: mistral.rs calls tools only through a model's own chat template, and
most small GGUF models' templates ignore tools.  So, as llama-cpp-python's
chatml-function-calling does, the tools are described in the system message,
the answer must begin with ``message:`` or ``functions.<name>:`` and a grammar
(llguidance's Lark, with each tool's JSON schema) holds the arguments to their
schema.  A tool call arrives whole, a message streams.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .adapt import plain_messages

__all__ = ["MistralRsEngine"]

#: Threads for mistral.rs's CPU kernels (``CANDLE_NUM_THREADS`` overrides it).
THREADS = "1"
#: Sampling as llama-cpp-python's defaults (mistral.rs's own, for a GGUF file that
#: says none, sample at temperature 1: SmolLM2 then answers in several scripts at once).
SAMPLING: dict[str, Any] = {
    "temperature": 0.2,
    "top_p": 0.95,
    "top_k": 40,
    "min_p": 0.05,
    "repetition_penalty": 1.1,
}
MESSAGE = "message:"
CALL = "functions."


class MistralRsEngine:
    runtime = "mistral.rs"

    def __init__(self, path: Path, context_window: int, *, requantize: str | None = None) -> None:
        self.context_window = context_window
        with _environment(RUST_LOG="off", CANDLE_NUM_THREADS=THREADS):
            from mistralrs import Runner, Which  # the optional local extra, quiet

            gguf = Which.GGUF(quantized_model_id=str(path.parent), quantized_filename=path.name)
            self.runner = Runner(
                which=gguf,  # type: ignore[arg-type]  # its stub types the variants apart
                token_source="none",  # a local file: never ask a hub for anything
                max_seqs=1,  # one generation at a time (the provider queues turns)
                in_situ_quant=requantize,
            )

    def close(self) -> None:
        del self.runner

    def chunks(self, request: dict[str, Any], stop: threading.Event) -> Iterator[dict[str, Any]]:
        tools = request.get("tools") or []
        messages = _with_tools(request["messages"], tools) if tools else request["messages"]
        stream = self._stream(messages, request["max_tokens"], _grammar(tools) if tools else None)
        try:
            pieces = _chunks(stream, stop)
            yield from _tool_answer(pieces, tools) if tools else pieces
        finally:
            del stream  # the engine stops a sequence nobody reads

    def _stream(self, messages: list[dict[str, Any]], max_tokens: int, grammar: str | None) -> Any:
        from mistralrs import ChatCompletionRequest  # the optional local extra

        request = ChatCompletionRequest(
            model="local",
            messages=messages,
            max_tokens=max_tokens,
            stream=True,
            grammar=grammar,
            grammar_type="lark" if grammar else None,
            **SAMPLING,
        )
        return self.runner.send_chat_completion_request(request)


def _chunks(stream: Any, stop: threading.Event) -> Iterator[dict[str, Any]]:
    """mistral.rs's chunk objects as OpenAI's streamed chunk dicts."""
    for chunk in stream:
        if stop.is_set():
            return
        out: dict[str, Any] = {"choices": []}
        for choice in chunk.choices[:1]:
            delta = {"role": "assistant", "content": choice.delta.content}
            out["choices"].append({"delta": delta, "finish_reason": choice.finish_reason})
        if chunk.usage is not None:
            usage = chunk.usage
            out["usage"] = {
                "prompt_tokens": usage.prompt_tokens,
                "completion_tokens": usage.completion_tokens,
            }
        yield out


# ---- tools --------------------------------------------------------------------------
def _with_tools(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The conversation as text, the tools described in its system message and earlier
    calls written the way the model is asked to write them."""
    described = "\n".join(
        f"{CALL}{t['function']['name']}: {t['function'].get('description', '')}\n"
        f"  arguments (JSON schema): {json.dumps(t['function'].get('parameters') or {})}"
        for t in tools
    )
    instructions = (
        f"You can call these functions:\n{described}\n\n"
        f"Answer in one of two ways. To reply to the user, start with '{MESSAGE}' and write "
        f"your reply. To call a function, write '{CALL}<name>:' and then its arguments as "
        "one JSON object, nothing else."
    )
    converted = []
    for message in messages:
        if message.get("role") == "assistant" and message.get("tool_calls"):
            text = "\n".join(
                f"{CALL}{c['function']['name']}:\n{c['function'].get('arguments') or '{}'}"
                for c in message["tool_calls"]
            )
            message = {"role": "assistant", "content": text}
        converted.append(message)
    plain = plain_messages(converted)
    if plain and plain[0]["role"] == "system":
        plain[0] = {"role": "system", "content": f"{plain[0]['content']}\n\n{instructions}"}
    else:
        plain.insert(0, {"role": "system", "content": instructions})
    return plain


def _grammar(tools: list[dict[str, Any]]) -> str:
    """A reply (``message:`` and any text) or one call of a tool with arguments that
    match its schema, as an llguidance Lark grammar."""
    calls = [f'"{CALL}{t["function"]["name"]}:" WS? %json {json.dumps(_schema(t))}' for t in tools]
    return "\n".join(
        [
            "start: reply | call",
            f'reply: "{MESSAGE}" TEXT',
            "call: " + " | ".join(calls),
            "TEXT: /(.|\\n)*/",
            "WS: /[ \\n]+/",
        ]
    )


def _schema(tool: dict[str, Any]) -> dict[str, Any]:
    schema = tool["function"].get("parameters") or {}
    return schema if schema.get("type") == "object" else {"type": "object"}


def _tool_answer(
    chunks: Iterator[dict[str, Any]], tools: list[dict[str, Any]]
) -> Iterator[dict[str, Any]]:
    """Stream a ``message:`` reply without its prefix; hold a call until it is whole,
    then send it as one tool call."""
    head, decided, finish, usage = "", False, None, None
    for chunk in chunks:
        usage = chunk.get("usage") or usage
        for choice in chunk["choices"]:
            finish = choice.get("finish_reason") or finish
            text = choice["delta"].get("content") or ""
            if decided:
                yield _text_chunk(text)
                continue
            head += text
            if head.startswith(MESSAGE):
                decided = True
                yield _text_chunk(head.removeprefix(MESSAGE).lstrip(" "))
            elif not (CALL.startswith(head) or head.startswith(CALL)) and len(head) >= len(CALL):
                decided = True  # neither: the grammar was not held; pass it on as text
                yield _text_chunk(head)
    call = None if decided else _parsed_call(head, tools)
    if call is not None:
        delta = {"role": "assistant", "content": None, "tool_calls": [call]}
        yield {"choices": [{"delta": delta, "finish_reason": "tool_calls"}], "usage": usage}
        return
    if not decided and head:
        yield _text_chunk(head)
    yield {"choices": [{"delta": {}, "finish_reason": finish or "stop"}], "usage": usage}


def _parsed_call(text: str, tools: list[dict[str, Any]]) -> dict[str, Any] | None:
    name, _, arguments = text.removeprefix(CALL).partition(":")
    if name not in {t["function"]["name"] for t in tools}:
        return None
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return None  # cut off by the output limit
    return {
        "index": 0,
        "id": f"call_{uuid.uuid4().hex[:24]}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(parsed)},
    }


def _text_chunk(text: str) -> dict[str, Any]:
    return {"choices": [{"delta": {"role": "assistant", "content": text}, "finish_reason": None}]}


@contextlib.contextmanager
def _environment(**values: str) -> Iterator[None]:
    """Set variables the runtime reads while it starts (the caller's own win), then
    put the environment back: child processes (tools) must not inherit them."""
    saved = {name: os.environ.get(name) for name in values}
    for name, value in values.items():
        os.environ.setdefault(name, value)
    try:
        yield
    finally:
        for name, old in saved.items():
            if old is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = old
