"""A scripted OpenAI-compatible chat-completions server on a real loopback socket.

Tests use it as a stand-in model for an agent that runs in-process (asyncio) or in a
subprocess: the server lives in a background thread of the test process, never in the
test's event loop.

    with ScriptedModel() as model:
        model.script(Text(text="hello", chunks=3), ToolCalls(calls=[("read", {"path": "a"})]))
        ...  # point the agent at model.base_url
        model.wait_for_requests(2)

Every POST /v1/chat/completions is recorded in `requests` (before the reply is produced)
and consumes one scripted reply from a FIFO, falling back to `set_default(...)`, and to an
HTTP 500 when neither exists. Streamed replies use chunked transfer encoding on a
keep-alive HTTP/1.1 connection, so a connection closed mid-body (`Drop`) is an error the
client can see rather than an ordinary end of stream.
"""

from __future__ import annotations

import contextlib
import json
import math
import select
import socket
import socketserver
import ssl
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

import pytest

__all__ = [
    "Drop",
    "Error",
    "Hang",
    "Reply",
    "ScriptedModel",
    "Slow",
    "Text",
    "ToolCalls",
    "bag_of_words",
    "scripted_model",
]

_POLL_S = 0.05  # how often waits look for a closed client or a stopping server
_STOP_GRACE_S = 0.6  # how long stop() waits for handler threads to finish


@dataclass(frozen=True, kw_only=True)
class Text:
    """An assistant text turn, streamed as `chunks` content deltas (reasoning first);
    `together`: the whole stream in one write, as a fast or busy server sends it."""

    text: str = "ok"
    chunks: int = 1
    reasoning: str | None = None
    finish_reason: str = "stop"
    usage: tuple[int, int] | None = (10, 5)
    delay_s: float = 0.0
    model: str | None = None
    together: bool = False


@dataclass(frozen=True, kw_only=True)
class ToolCalls:
    """An assistant turn asking for tool calls: `calls` is a list of (name, arguments)."""

    calls: list[tuple[str, dict[str, Any]]]
    text: str = ""
    usage: tuple[int, int] | None = (10, 5)


@dataclass(frozen=True, kw_only=True)
class Error:
    """An HTTP error with an OpenAI-style body, and a Retry-After header when set (a
    number of seconds, or a str sent as it is: an HTTP date)."""

    status: int = 500
    message: str = "scripted failure"
    code: str | None = None
    type: str = "server_error"
    retry_after: float | str | None = None


@dataclass(frozen=True, kw_only=True)
class Hang:
    """Send stream headers, then nothing until the client disconnects or the server stops."""


@dataclass(frozen=True, kw_only=True)
class Drop:
    """Stream `text` as `after_chunks` content deltas, then close the TCP connection."""

    after_chunks: int = 1
    text: str = "partial text here"


@dataclass(frozen=True, kw_only=True)
class StreamError:
    """Stream `text` as `chunks` content deltas, then an error event (`data:
    {"error": ...}`, as servers report a generation that failed), all in one write."""

    text: str = "partial"
    chunks: int = 2
    message: str = "generation failed"


Reply = Text | ToolCalls | Error | Hang | Drop | StreamError


def Slow(text: str = "ok", chunks: int = 5, delay_s: float = 0.2) -> Text:
    """A `Text` reply streamed slowly: `chunks` pieces, `delay_s` apart."""
    return Text(text=text, chunks=chunks, delay_s=delay_s)


EMBEDDING_DIMENSION = 32


def bag_of_words(text: str) -> list[float]:
    """The scripted server's embedding: each word adds 1 to a dimension chosen by its
    letters (stable across processes, unlike hash())."""
    vector = [0.0] * EMBEDDING_DIMENSION
    for word in text.lower().split():
        word = word.strip(".,;:!?'\"")
        if word:
            vector[sum(map(ord, word)) % EMBEDDING_DIMENSION] += 1.0
    vector[0] += 0.01  # never all zeros
    return vector


def _split(text: str, parts: int) -> list[str]:
    """`text` in `parts` roughly equal non-empty pieces (fewer if `text` is shorter)."""
    if not text:
        return []
    parts = max(1, min(parts, len(text)))
    size = len(text) / parts
    bounds = [round(i * size) for i in range(parts + 1)]
    return [text[bounds[i] : bounds[i + 1]] for i in range(parts)]


def _usage(usage: tuple[int, int]) -> dict[str, int]:
    prompt, completion = usage
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


class _ClientGone(Exception):
    """The client closed the connection while a response was being produced."""


class _Stopping(Exception):
    """The server is stopping while a response was being produced."""


class ScriptedModel:
    """A scripted OpenAI-compatible chat-completions server on 127.0.0.1 (see module doc)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._fifo: deque[Reply] = deque()
        self._default: Reply | None = None
        self._stopping = threading.Event()
        self._connections: set[socket.socket] = set()
        self._call_ids = 0
        self._response_ids = 0
        self._thread: threading.Thread | None = None
        self._stopped = False
        self.requests: list[dict[str, Any]] = []
        #: The HTTP headers of each request in ``requests``, names in lower case.
        self.headers: list[dict[str, str]] = []
        #: The client's port for each request: the same port, the same connection.
        self.ports: list[int] = []
        #: Model names for ollama's ``GET /api/tags``; None: 404, as a server that is not ollama.
        self.tags: list[str] | None = None
        #: ollama's ``POST /api/show`` answer (any model asked); None: 404.
        self.show: dict[str, Any] | None = None
        #: llama.cpp's ``GET /props`` answer; None: 404.
        self.props: dict[str, Any] | None = None
        #: The entries of ``GET /v1/models``.
        self.listed: list[dict[str, Any]] = [{"id": "scripted", "object": "model"}]
        #: The paths of requests other than chat completions, in order ("POST /api/show").
        self.asked: list[str] = []
        #: ``POST /v1/embeddings``: the inputs asked for, in order; ``embedding_status``
        #: other than 200 answers every one with that error.
        self.embedded: list[str] = []
        self.embedding_status = 200
        self.disconnects = 0
        self.errors: list[BaseException] = []  # unexpected handler failures, kept quiet
        self._server = _Server(self)
        host, port = self._server.server_address[:2]
        self.base_url = f"http://{host}:{port}/v1"

    def use_tls(self, context: ssl.SSLContext) -> None:
        """Serve HTTPS from now on, with ``context``'s certificate (for localhost)."""
        self._server.tls = context
        self.base_url = f"https://localhost:{self._server.server_port}/v1"

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> ScriptedModel:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._server.serve_forever,
                kwargs={"poll_interval": _POLL_S},
                name="scripted-model",
                daemon=True,
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        self._stopping.set()
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=1.0)
        with self._changed:
            for conn in self._connections:
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
            deadline = time.monotonic() + _STOP_GRACE_S
            while self._connections and (left := deadline - time.monotonic()) > 0:
                self._changed.wait(left)
        self._server.server_close()

    def __enter__(self) -> ScriptedModel:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- scripting -----------------------------------------------------------------------

    def script(self, *replies: Reply) -> None:
        with self._lock:
            self._fifo.extend(replies)

    def set_default(self, reply: Reply | None) -> None:
        with self._lock:
            self._default = reply

    def wait_for_requests(self, n: int, timeout: float = 15.0) -> None:
        self._wait(lambda: len(self.requests) >= n, timeout, f"{n} requests")

    def wait_for_disconnects(self, n: int, timeout: float = 5.0) -> None:
        self._wait(lambda: self.disconnects >= n, timeout, f"{n} disconnects")

    def _wait(self, done: Any, timeout: float, what: str) -> None:
        with self._changed:
            if not self._changed.wait_for(done, timeout):
                raise TimeoutError(
                    f"waited {timeout}s for {what}; have {len(self.requests)} requests "
                    f"and {self.disconnects} disconnects"
                )

    # -- called from handler threads -----------------------------------------------------

    def _record(self, body: dict[str, Any], headers: dict[str, str], port: int) -> Reply | None:
        """Record a chat-completions request, then take the reply for it."""
        with self._changed:
            self.requests.append(body)
            self.headers.append(headers)
            self.ports.append(port)
            self._changed.notify_all()
            return self._fifo.popleft() if self._fifo else self._default

    def _count_disconnect(self) -> None:
        with self._changed:
            self.disconnects += 1
            self._changed.notify_all()

    def _next_call_id(self) -> str:
        with self._lock:
            self._call_ids += 1
            return f"call_{self._call_ids}"

    def _next_response_id(self) -> str:
        with self._lock:
            self._response_ids += 1
            return f"chatcmpl-scripted-{self._response_ids}"

    def _track(self, conn: socket.socket, live: bool) -> None:
        with self._changed:
            if live:
                self._connections.add(conn)
            else:
                self._connections.discard(conn)
            self._changed.notify_all()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 64

    def __init__(self, model: ScriptedModel) -> None:
        self.model = model
        self.tls: ssl.SSLContext | None = None
        super().__init__(("127.0.0.1", 0), _Handler)

    def get_request(self) -> tuple[Any, Any]:
        connection, address = super().get_request()
        if self.tls is not None:  # a client that refuses the certificate fails here
            connection = self.tls.wrap_socket(connection, server_side=True)
        return connection, address

    def server_bind(self) -> None:
        # HTTPServer.server_bind calls socket.getfqdn(), a reverse DNS lookup: skip it.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name = str(host)
        self.server_port = int(port)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Never print tracebacks; keep unexpected failures for tests to inspect.
        exc = sys.exc_info()[1]
        if exc is not None and not isinstance(exc, ConnectionError | TimeoutError):
            self.model.errors.append(exc)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # else small writes stall ~40 ms on delayed ACKs
    server: _Server

    # -- plumbing ------------------------------------------------------------------------

    def setup(self) -> None:
        super().setup()
        self.server.model._track(self.connection, live=True)
        if self.server.model._stopping.is_set():  # accepted just as stop() began
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.model._track(self.connection, live=False)

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def handle(self) -> None:
        try:
            super().handle()
        except ConnectionError:
            self.close_connection = True

    @property
    def _model(self) -> ScriptedModel:
        return self.server.model

    def _path(self) -> str:
        return self.path.split("?", 1)[0].rstrip("/")

    def _send_json(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _client_gone(self, timeout: float) -> bool:
        """Wait up to `timeout` for the client to close its end; True if it did."""
        try:
            readable, _, _ = select.select([self.connection], [], [], timeout)
            if not readable:
                return False
            if self.connection.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b"":
                return True
        except (BlockingIOError, InterruptedError):
            return False
        except (OSError, ValueError):
            return True
        # The client sent bytes mid-response (unexpected): don't spin on them.
        time.sleep(timeout)
        return False

    def _pause(self, seconds: float) -> None:
        """Sleep `seconds` (at least one poll), raising if the client leaves or we stop."""
        deadline = time.monotonic() + seconds
        while True:
            if self._model._stopping.is_set():
                raise _Stopping
            left = deadline - time.monotonic()
            if self._client_gone(max(0.0, min(left, _POLL_S))):
                raise _ClientGone
            if left <= _POLL_S:
                return

    # -- routes --------------------------------------------------------------------------

    def do_GET(self) -> None:
        model = self._model
        model.asked.append(f"GET {self._path()}")
        if self._path() == "/api/tags" and model.tags is not None:
            self._send_json(200, {"models": [{"name": name} for name in model.tags]})
        elif self._path() == "/v1/models":
            self._send_json(200, {"object": "list", "data": model.listed})
        elif self._path() == "/props" and model.props is not None:
            self._send_json(200, model.props)
        else:
            self._not_found()

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if self._path() == "/api/show":
            self._model.asked.append("POST /api/show")
            if self._model.show is None:
                self._not_found()
            else:
                self._send_json(200, self._model.show)
            return
        if self._path() == "/v1/embeddings":
            self._embeddings(raw)
            return
        if self._path() not in ("/v1/chat/completions", "/chat/completions"):
            self._not_found()
            return
        try:
            body = json.loads(raw)
            if not isinstance(body, dict):
                raise ValueError("not an object")
        except ValueError as exc:
            self._error(Error(status=400, message=f"bad JSON body: {exc}", type="invalid_request"))
            return
        headers = {name.lower(): value for name, value in self.headers.items()}
        reply = self._model._record(body, headers, self.client_address[1])
        if reply is None:
            self._send_json(500, {"error": {"message": "no scripted reply"}})
            return
        try:
            self._reply(reply, body)
        except (_ClientGone, BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
            self.close_connection = True
            if not self._model._stopping.is_set():  # stop() shuts sockets down too
                self._model._count_disconnect()
        except _Stopping:
            self.close_connection = True

    def _embeddings(self, raw: bytes) -> None:
        """Bag-of-words vectors: texts sharing words are near, others orthogonal."""
        model = self._model
        body = json.loads(raw)
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        model.asked.append("POST /v1/embeddings")
        if model.embedding_status != 200:
            message = {"message": "embeddings are down", "type": "server_error", "code": None}
            self._send_json(model.embedding_status, {"error": message})
            return
        model.embedded.extend(texts)
        data = [
            {"object": "embedding", "index": i, "embedding": bag_of_words(text)}
            for i, text in enumerate(texts)
        ]
        usage = {"prompt_tokens": 1, "total_tokens": 1}
        self._send_json(
            200, {"object": "list", "data": data, "model": body.get("model"), "usage": usage}
        )

    def _not_found(self) -> None:
        self._send_json(
            404,
            {"error": {"message": f"no route for {self.path}", "type": "not_found", "code": None}},
        )

    def _error(self, reply: Error) -> None:
        headers = {}
        ra = reply.retry_after
        if isinstance(ra, str):
            headers["Retry-After"] = ra
        elif ra is not None:
            headers["Retry-After"] = str(int(ra)) if float(ra).is_integer() else str(ra)
        body = {"error": {"message": reply.message, "type": reply.type, "code": reply.code}}
        self._send_json(reply.status, body, headers)

    def _reply(self, reply: Reply, body: dict[str, Any]) -> None:
        stream = bool(body.get("stream"))
        if isinstance(reply, Error):
            self._error(reply)
        elif isinstance(reply, Hang):
            self._hang()
        elif stream:
            self._stream(reply, body)
        else:
            self._complete(reply, body)

    # -- non-streamed --------------------------------------------------------------------

    def _complete(self, reply: Text | ToolCalls | Drop, body: dict[str, Any]) -> None:
        message: dict[str, Any] = {"role": "assistant"}
        usage: tuple[int, int] | None = None
        if isinstance(reply, ToolCalls):
            message["content"] = reply.text or None
            message["tool_calls"] = [
                {
                    "id": self._model._next_call_id(),
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(args)},
                }
                for name, args in reply.calls
            ]
            finish, usage, model = "tool_calls", reply.usage, None
        elif isinstance(reply, Text):
            message["content"] = reply.text
            if reply.reasoning:
                message["reasoning_content"] = reply.reasoning
            finish, usage, model = reply.finish_reason, reply.usage, reply.model
        else:
            message["content"] = reply.text
            finish, model = "stop", None
        result: dict[str, Any] = {
            "id": self._model._next_response_id(),
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model or body.get("model") or "scripted",
            "choices": [
                {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
            ],
        }
        if usage is not None:
            result["usage"] = _usage(usage)
        if isinstance(reply, Drop):
            # Promise the whole body, send half of it, then close.
            data = json.dumps(result).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data[: len(data) // 2])
            self.close_connection = True
            return
        self._send_json(200, result)

    # -- streamed ------------------------------------------------------------------------

    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")

    def _hang(self) -> None:
        self._start_stream()
        while True:
            self._pause(math.inf)

    def _stream(self, reply: Text | ToolCalls | Drop | StreamError, body: dict[str, Any]) -> None:
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        model = (reply.model if isinstance(reply, Text) else None) or body.get("model")
        base = {
            "id": self._model._next_response_id(),
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": model or "scripted",
        }
        delay = reply.delay_s if isinstance(reply, Text) else 0.0
        sent = 0

        def send(delta: dict[str, Any] | None, finish: str | None = None, **extra: Any) -> None:
            nonlocal sent
            if sent and delay > 0:
                self._pause(delay)
            elif self._client_gone(0):
                raise _ClientGone
            if self._model._stopping.is_set():
                raise _Stopping
            event = dict(base)
            if delta is None:
                event["choices"] = []
            else:
                choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
                event["choices"] = [choice]
            if include_usage:
                event["usage"] = None
            event.update(extra)
            data = b"data: " + json.dumps(event).encode() + b"\n\n"
            if held is None:
                self._write_chunk(data)
            else:
                held.append(data)
            sent += 1

        together = isinstance(reply, StreamError) or (isinstance(reply, Text) and reply.together)
        held: list[bytes] | None = [] if together else None

        self._start_stream()
        send({"role": "assistant"})
        if isinstance(reply, Drop):
            for piece in _split(reply.text, reply.after_chunks):
                send({"content": piece})
            self.close_connection = True  # no [DONE], no last chunk: an incomplete body
            return
        if isinstance(reply, StreamError):
            for piece in _split(reply.text, reply.chunks):
                send({"content": piece})
            assert held is not None
            failure = {"error": {"message": reply.message, "type": "server_error"}}
            self._write_chunk(b"".join(held) + b"data: " + json.dumps(failure).encode() + b"\n\n")
            self.close_connection = True
            return
        if isinstance(reply, Text):
            for piece in _split(reply.reasoning or "", reply.chunks):
                send({"reasoning_content": piece})
            for piece in _split(reply.text, reply.chunks):
                send({"content": piece})
            finish, usage = reply.finish_reason, reply.usage
        else:
            if reply.text:
                send({"content": reply.text})
            for index, (name, args) in enumerate(reply.calls):
                first, *rest = _split(json.dumps(args), 2)
                call = {
                    "index": index,
                    "id": self._model._next_call_id(),
                    "type": "function",
                    "function": {"name": name, "arguments": first},
                }
                send({"tool_calls": [call]})
                for piece in rest:
                    send({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
            finish, usage = "tool_calls", reply.usage
        send({}, finish)
        if usage is not None and include_usage:
            send(None, usage=_usage(usage))
        self._write_chunk(b"".join(held or []) + b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")


@pytest.fixture
def scripted_model() -> Iterator[ScriptedModel]:
    """A started ScriptedModel, stopped after the test."""
    with ScriptedModel() as model:
        yield model
