"""Protocol errors: one root, ``AcpError``, carrying the JSON-RPC code (ACP-V2.md §2.2).

    AcpError                      (peer-visible; to_error() / from_error())
    ├── ParseError                -32700  the line is not JSON
    ├── InvalidRequest            -32600  not a JSON-RPC request, or not allowed now
    ├── MethodNotFound            -32601
    ├── InvalidParams             -32602  data carries the validation detail
    ├── InternalError             -32603
    ├── RequestCancelled          -32800  $/cancel_request, or aborted internally
    ├── AuthRequired              -32000
    ├── ResourceNotFound          -32002
    │   └── SessionNotFound       -32002  data: {"sessionId": ...}
    ├── UnsupportedProtocolVersion -32022  data: {"requested": n, "supported": [...]}
    └── MessageTooLarge           -32600  a frame past the size limit

    ConnectionClosed              the peer went away while a request was pending

    AcpUsageError(RuntimeError)   misuse of Crow's own API: our bug, not the peer's

A handler raises an ``AcpError`` subclass and the peer's request runner turns it
into the error reply; ``from_error`` turns a received error object back into the
most specific class, so callers can ``except SessionNotFound``.
"""

from __future__ import annotations

from typing import Any, ClassVar

__all__ = [
    "AUTH_REQUIRED",
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "METHOD_NOT_FOUND",
    "PARSE_ERROR",
    "REQUEST_CANCELLED",
    "RESOURCE_NOT_FOUND",
    "UNSUPPORTED_PROTOCOL_VERSION",
    "AcpError",
    "AcpUsageError",
    "AuthRequired",
    "ConnectionClosed",
    "InternalError",
    "InvalidParams",
    "InvalidRequest",
    "MessageTooLarge",
    "MethodNotFound",
    "ParseError",
    "RequestCancelled",
    "ResourceNotFound",
    "SessionNotFound",
    "UnsupportedProtocolVersion",
]

PARSE_ERROR = -32700
"""The line is not valid JSON; answered with ``id: null``."""
INVALID_REQUEST = -32600
"""Valid JSON that is not a JSON-RPC request, or a request not allowed now."""
METHOD_NOT_FOUND = -32601
"""No such method, or a method of a surface that was not advertised."""
INVALID_PARAMS = -32602
"""The params fail validation, or name something the receiver rejects."""
INTERNAL_ERROR = -32603
"""The handler failed unexpectedly."""
REQUEST_CANCELLED = -32800
"""The request was aborted by ``$/cancel_request`` or internally."""
AUTH_REQUIRED = -32000
"""The operation needs ``auth/login`` first."""
RESOURCE_NOT_FOUND = -32002
"""An unknown resource; for sessions ``data.sessionId`` names it."""
UNSUPPORTED_PROTOCOL_VERSION = -32022
"""No supported protocol version is at or below the requested one."""


class AcpError(Exception):
    """An error the peer sees as a JSON-RPC error object."""

    code: ClassVar[int] = INTERNAL_ERROR
    default_message: ClassVar[str] = "Internal error"

    def __init__(self, message: str | None = None, *, data: Any = None) -> None:
        self.message = message or self.default_message
        self.data = data
        super().__init__(self.message)

    def to_error(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error

    @staticmethod
    def from_error(error: dict[str, Any]) -> AcpError:
        """The most specific ``AcpError`` for a received error object."""
        code = error.get("code")
        message = str(error.get("message") or "")
        data = error.get("data")
        if code == RESOURCE_NOT_FOUND and isinstance(data, dict) and "sessionId" in data:
            return SessionNotFound(str(data["sessionId"]), message=message, data=data)
        cls = _BY_CODE.get(code) if isinstance(code, int) else None
        if cls is None:
            err = AcpError(message, data=data)
            err.code = code if isinstance(code, int) else INTERNAL_ERROR  # type: ignore[misc]
            return err
        return cls(message, data=data)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(code={self.code}, message={self.message!r}, data={self.data!r})"
        )


class ParseError(AcpError):
    code = PARSE_ERROR
    default_message = "Parse error: the message is not valid JSON"


class InvalidRequest(AcpError):
    code = INVALID_REQUEST
    default_message = "Invalid request"


class MethodNotFound(AcpError):
    code = METHOD_NOT_FOUND
    default_message = "Method not found"

    @classmethod
    def for_method(cls, method: str) -> MethodNotFound:
        return cls(f"Method not found: {method}", data={"method": method})


class InvalidParams(AcpError):
    code = INVALID_PARAMS
    default_message = "Invalid params"


class InternalError(AcpError):
    code = INTERNAL_ERROR
    default_message = "Internal error"


class RequestCancelled(AcpError):
    code = REQUEST_CANCELLED
    default_message = "Request cancelled"


class AuthRequired(AcpError):
    code = AUTH_REQUIRED
    default_message = "Authentication required"


class ResourceNotFound(AcpError):
    code = RESOURCE_NOT_FOUND
    default_message = "Resource not found"


class SessionNotFound(ResourceNotFound):
    """``-32002`` with ``data.sessionId``: the session is unknown or no longer active."""

    def __init__(self, session_id: str, *, message: str | None = None, data: Any = None) -> None:
        self.session_id = session_id
        super().__init__(
            message or f"Session not found: {session_id}",
            data=data if data is not None else {"sessionId": session_id},
        )


class UnsupportedProtocolVersion(AcpError):
    code = UNSUPPORTED_PROTOCOL_VERSION
    default_message = "Unsupported protocol version"

    @classmethod
    def for_versions(cls, requested: Any, supported: list[int]) -> UnsupportedProtocolVersion:
        return cls(
            f"Protocol version {requested} is not supported; this agent speaks {supported}",
            data={"requested": requested, "supported": supported},
        )


class MessageTooLarge(InvalidRequest):
    default_message = "Message too large"


_BY_CODE: dict[int, type[AcpError]] = {
    cls.code: cls
    for cls in (
        ParseError,
        InvalidRequest,
        MethodNotFound,
        InvalidParams,
        InternalError,
        RequestCancelled,
        AuthRequired,
        ResourceNotFound,
        UnsupportedProtocolVersion,
    )
}


class ConnectionClosed(ConnectionError):
    """The connection closed while a request was waiting for its response."""


class AcpUsageError(RuntimeError):
    """Crow's own API was misused (answering twice, sending after close): a bug here."""
