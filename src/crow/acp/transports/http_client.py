"""ACP over streamable HTTP + SSE and WebSocket, client side (ACP-V2.md §11).

``connect_url(url)`` picks the transport from the scheme: ``ws://``/``wss://``
is a WebSocket (one text frame per message); ``http://``/``https://`` is
streamable HTTP: the ``initialize`` POST opens the connection, every later
message is POSTed with its ``Acp-Connection-Id`` (and ``Acp-Session-Id`` when it
concerns a session), and what the agent sends arrives on SSE streams — the
connection's, opened after initialize, and one per session, opened the first
time a message names that session.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Sequence
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import orjson

__all__ = ["HttpClientTransport", "WebSocketClientTransport", "connect_url", "split_token"]

log = logging.getLogger("crow.acp.http")

#: Seconds to connect and to wait for a POST's answer (SSE reads have no limit).
REQUEST_TIMEOUT_S = 30.0
#: The largest event an SSE stream may carry: one message, as large as the server takes.
MAX_EVENT_BYTES = 64 * 1024 * 1024


async def connect_url(
    url: str, *, token: str | None = None, tls: ssl.SSLContext | None = None
) -> Any:
    """A transport to the ACP endpoint at ``url``.  Raises ConnectionError.

    A ``token`` query parameter in ``url`` (the URL ``crow serve --http`` prints) is
    used when ``token`` is not given; either way it travels only as a bearer header.
    ``tls``: what verifies an https:// or wss:// server (default: the libraries')."""
    url, in_url = split_token(url)
    token = token or in_url
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    if url.startswith(("ws://", "wss://")):
        return await WebSocketClientTransport.open(url, headers, tls=tls)
    if url.startswith(("http://", "https://")):
        return HttpClientTransport(url, headers, tls=tls)
    raise ConnectionError(f"{url!r} is not an http(s):// or ws(s):// URL")


def split_token(url: str) -> tuple[str, str | None]:
    """``url`` without its ``token`` query parameter, and that token (None without one).

    Taken out so that it is never logged or shown in an error with the URL."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    tokens = [value for name, value in query if name == "token"]
    if not tokens:
        return url, None
    rest = urlencode([(name, value) for name, value in query if name != "token"])
    return urlunsplit(parts._replace(query=rest)), tokens[0]


class HttpClientTransport:
    def __init__(
        self, url: str, headers: dict[str, str], *, tls: ssl.SSLContext | None = None
    ) -> None:
        import httpx2  # ~100 ms: paid by HTTP clients only, not by stdio or WebSocket ones

        self.url = url
        self.client = httpx2.AsyncClient(
            headers=headers,
            timeout=httpx2.Timeout(REQUEST_TIMEOUT_S, read=None),
            verify=tls if tls is not None else True,
        )
        self.connection_id: str | None = None
        self.inbound: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.streams: dict[str | None, asyncio.Task[None]] = {}
        self.request_sessions: dict[Any, str] = {}  # the agent's request id -> session
        self.closed = False
        self.failure: str | None = None  # why the connection could not open, for people

    async def read_frame(self) -> bytes | None:
        return await self.inbound.get()

    async def write_frames(self, frames: Sequence[bytes]) -> None:
        for frame in frames:
            await self._post(frame)

    async def _post(self, frame: bytes) -> None:
        if self.closed:
            raise ConnectionError("the HTTP connection is closed")
        message = orjson.loads(frame)
        if self.connection_id is None:
            await self._initialize(frame)
            return
        session = self._session_of(message)
        headers = {"Content-Type": "application/json", "Acp-Connection-Id": self.connection_id}
        if session is not None:
            headers["Acp-Session-Id"] = session
            self._open_stream(session)
        response = await self._send("POST", content=frame, headers=headers)
        if response.status_code in (200, 202):
            return
        refusal = _refusal(message, session, response.status_code, response.text)
        if refusal is None:  # the connection is gone, or what failed needs no answer
            raise ConnectionError(
                f"the agent refused a message: HTTP {response.status_code} {response.text[:200]}"
            )
        self.inbound.put_nowait(orjson.dumps(refusal))

    async def _initialize(self, frame: bytes) -> None:
        response = await self._send(
            "POST", content=frame, headers={"Content-Type": "application/json"}
        )
        if response.status_code != 200:
            self.failure = refused(self.url, response.status_code, response.text)
            raise ConnectionError(self.failure)
        self.connection_id = response.headers.get("acp-connection-id")
        self.inbound.put_nowait(response.content)
        if self.connection_id is not None:
            self._open_stream(None)

    async def _send(self, method: str, **kwargs: Any) -> Any:
        import httpx2  # loaded already (__init__): its errors, without a module-level import

        try:
            return await self.client.request(method, self.url, **kwargs)
        except httpx2.ConnectError as exc:
            self.failure = f"nothing is listening at {self.url} ({exc})"
            raise ConnectionError(self.failure) from exc
        except httpx2.HTTPError as exc:
            raise ConnectionError(f"cannot reach {self.url}: {exc}") from exc

    def _session_of(self, message: Any) -> str | None:
        if not isinstance(message, dict):
            return None
        if "method" in message:
            session = (message.get("params") or {}).get("sessionId")
            return session if isinstance(session, str) else None
        return self.request_sessions.pop(_key(message.get("id")), None)

    def _open_stream(self, session: str | None) -> None:
        if session not in self.streams:
            self.streams[session] = asyncio.create_task(self._read_stream(session))

    async def _read_stream(self, session: str | None) -> None:
        import httpx2  # loaded already (__init__): its SSE parser and errors

        assert self.connection_id is not None
        headers = {"Accept": "text/event-stream", "Acp-Connection-Id": self.connection_id}
        if session is not None:
            headers["Acp-Session-Id"] = session
        try:
            async with self.client.stream("GET", self.url, headers=headers) as response:
                if response.status_code != 200:
                    log.warning("SSE stream refused: HTTP %s", response.status_code)
                    if session is not None:
                        self.streams.pop(session, None)  # the next message tries again
                    return
                # httpx2's SSE parser: an event may span several data: lines (joined
                # with newlines), carry other fields, end in CRLF; comments are skipped.
                # Its event name is not read, as in the TS SDK: every event is a message.
                events = httpx2.EventSource(response, max_event_size=MAX_EVENT_BYTES)
                async for event in events:
                    if event.data:
                        self._deliver(event.data.encode(), session)
        except httpx2.HTTPError as exc:
            log.info("SSE stream ended: %s", exc)
        finally:
            if session is None:  # the connection's own stream: the connection is gone
                self.closed = True
                self.inbound.put_nowait(None)

    def _deliver(self, frame: bytes, session: str | None) -> None:
        if session is not None:
            with contextlib.suppress(orjson.JSONDecodeError):
                message = orjson.loads(frame)
                if isinstance(message, dict) and "method" in message and "id" in message:
                    self.request_sessions[_key(message["id"])] = session
        self.inbound.put_nowait(frame)

    async def aclose(self) -> None:
        if self.connection_id is not None and not self.closed:
            with contextlib.suppress(Exception):
                await self.client.request(
                    "DELETE", self.url, headers={"Acp-Connection-Id": self.connection_id}
                )
        self.closed = True
        for task in self.streams.values():
            task.cancel()
        self.inbound.put_nowait(None)
        await self.client.aclose()


class WebSocketClientTransport:
    def __init__(self, socket: Any) -> None:
        self.socket = socket

    @classmethod
    async def open(
        cls, url: str, headers: dict[str, str], *, tls: ssl.SSLContext | None = None
    ) -> WebSocketClientTransport:
        # websockets (~50 ms): paid by WebSocket clients only.
        from websockets.asyncio.client import connect
        from websockets.exceptions import InvalidStatus, WebSocketException

        secure = tls if tls is not None and url.startswith("wss://") else None
        try:
            socket = await connect(url, additional_headers=headers, max_size=None, ssl=secure)
        except InvalidStatus as exc:
            body = exc.response.body.decode("utf-8", "replace") if exc.response.body else ""
            raise ConnectionError(refused(url, exc.response.status_code, body)) from exc
        except ConnectionRefusedError as exc:
            raise ConnectionError(f"nothing is listening at {url} ({exc})") from exc
        except (OSError, WebSocketException) as exc:
            raise ConnectionError(f"cannot reach {url}: {exc}") from exc
        return cls(socket)

    async def read_frame(self) -> bytes | None:
        from websockets.exceptions import ConnectionClosed  # loaded already (open)

        while True:
            try:
                message = await self.socket.recv()
            except ConnectionClosed:
                return None
            if isinstance(message, str):
                return message.encode()

    async def write_frames(self, frames: Sequence[bytes]) -> None:
        from websockets.exceptions import ConnectionClosed  # loaded already (open)

        try:
            for frame in frames:
                await self.socket.send(frame.decode())
        except ConnectionClosed as exc:
            raise ConnectionError("the WebSocket closed") from exc

    async def aclose(self) -> None:
        await self.socket.close()


#: Statuses that mean the whole connection is unusable (as the TS SDK's client reads them).
CONNECTION_GONE = frozenset({401, 403, 410})


def refused(url: str, status: int, body: str) -> str:
    """Why a server refused to open an ACP connection, and what to do, in one line."""
    if status == 401:
        return (
            f"{url} refused the token (HTTP 401): pass the server's token with --token or "
            "CROW_TOKEN, or use the URL with ?token= that crow serve --http printed"
        )
    if status == 404:
        return f"nothing serves ACP at {url} (HTTP 404): crow serve --http serves the path /acp"
    return f"{url} refused the connection: HTTP {status} {body.strip()[:200]}".rstrip()


def _refusal(message: Any, session: str | None, status: int, body: str) -> Any:
    """The JSON-RPC error that answers a request whose POST was refused, or None
    when the connection itself is gone or the message was not a request."""
    if not (isinstance(message, dict) and "method" in message and "id" in message):
        return None
    # Older Crow servers answered an unknown session 404 (now: -32002 on its stream).
    unknown_session = status == 404 and "Acp-Session-Id" in body
    if status in CONNECTION_GONE or (status == 404 and not unknown_session):
        return None
    if unknown_session:
        error = {"code": -32002, "message": "Session not found", "data": {"sessionId": session}}
    else:
        error = {
            "code": -32600,
            "message": f"the agent refused the request: HTTP {status}",
            "data": {"status": status, "body": body[:8192]},
        }
    return {"jsonrpc": "2.0", "id": message["id"], "error": error}


def _key(value: Any) -> Any:
    return str(value) if isinstance(value, (int, str)) else value
