"""What a request to the ACP endpoint must carry, and the refusals it gets: which
``POST`` must name its session in ``Acp-Session-Id`` (as the TS SDK 2.4.0 asks), a body
read up to a limit, and error responses as JSON (an upgrade refused with its own status
where the server can send one).
"""

from __future__ import annotations

import contextlib
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket

from .http_connection import HttpTransport, session_of

__all__ = [
    "ATTACH_METHODS",
    "CONNECTION_HEADER",
    "SESSION_HEADER",
    "SESSION_METHODS",
    "http_error",
    "is_id",
    "read_body",
    "refuse_websocket",
    "reply",
    "rpc_error",
    "session_route",
]

CONNECTION_HEADER = "acp-connection-id"
SESSION_HEADER = "acp-session-id"
#: Methods that concern one session: their POST needs ``Acp-Session-Id`` (TS SDK 2.4.0).
SESSION_METHODS = frozenset(
    {
        "session/cancel",
        "session/close",
        "session/delete",
        "session/fork",
        "session/load",
        "session/prompt",
        "session/resume",
        "session/set_config_option",
        "session/set_mode",
        "session/set_model",
    }
)

#: Session methods that may come without ``Acp-Session-Id``: they (re)attach a session,
#: and the Python SDK's client (agent-client-protocol 0.12) sends them on the connection.
ATTACH_METHODS = frozenset({"session/load", "session/resume"})


def session_route(
    transport: HttpTransport, message: dict[str, Any], header: str | None
) -> str | Response | None:
    """The session a POST concerns (None: the connection), or why it is refused.

    A session the agent does not know is not refused here: the agent answers the
    request with -32002, on that session's stream (ACP-V2.md §11, as the TS SDK)."""
    if "method" not in message:  # a response to the agent: routed by its id
        return header or None
    named = session_of(message)
    if not header:
        if message["method"] in ATTACH_METHODS:
            stream = transport.streams.get(named) if named is not None else None
            if named is not None and (stream is None or not stream.reader):
                transport.unopened.add(named)  # answered on the connection's stream
            return None
        if named is not None or message["method"] in SESSION_METHODS:
            return http_error(
                400, f"missing Acp-Session-Id header: {message['method']} concerns a session"
            )
        return None
    if named is not None and named != header:
        return http_error(400, "mismatched Acp-Session-Id: the header and params.sessionId differ")
    return header


def is_id(value: Any) -> bool:
    return isinstance(value, (str, int)) and not isinstance(value, bool)


async def read_body(request: Request, limit: int) -> bytes | None:
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def http_error(status: int, message: str) -> Response:
    return JSONResponse({"error": message}, status_code=status)


def rpc_error(status: int, code: int, message: str) -> Response:
    return JSONResponse(
        {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}, status
    )


async def reply(scope: Scope, receive: Receive, send: Send, response: Response) -> None:
    if scope["type"] == "websocket":
        await refuse_websocket(WebSocket(scope, receive, send), response)
        return
    await response(scope, receive, send)


async def refuse_websocket(websocket: WebSocket, response: Response) -> None:
    """Refuse an upgrade with the refusal's own status (401, 403, 404, 503) and body,
    where the server can send them; else close with its reason (a bare 403)."""
    if "websocket.http.response" in websocket.scope.get("extensions", {}):
        await websocket.send_denial_response(response)
        return
    code = 1013 if response.status_code == 503 else 1008  # 1013: try again later
    await websocket.close(code=code, reason=_reason(response))


def _reason(response: Response) -> str:
    with contextlib.suppress(Exception):
        return str(orjson.loads(response.body).get("error", ""))[:120]
    return ""
