"""The sans-I/O JSON-RPC core of one ACP connection.

``Connection`` owns the bookkeeping of a connection and nothing else: it turns an
inbound frame (the bytes of one message) into events, mints ids for outbound
requests and matches their responses, remembers which inbound requests still owe
a reply, and enforces the initialize gate.  It never reads, writes, sleeps or
spawns; the async ``Peer`` in ``jsonrpc.py`` adds tasks and a transport.

Bad input never raises out of ``receive``: it becomes a ``Send`` event carrying
the error reply (ACP-V2.md §2.3), and the connection stays usable.

Requests written right behind ``initialize`` (pipelined, before its reply) are
held while it is in flight and handled in order once it is answered, exactly as
if they had arrived after the reply: ``release()`` hands them back.

``params`` must be an object: an array (JSON-RPC's by-position form, which ACP
never uses) is ``-32602``, any other value ``-32600``.  ``$/cancel_request``
sent with an id still cancels, and is answered ``{}``.

``decode`` raises nothing but ValueError (JSON nested past the parser's depth
included) and ``encode`` writes every value a peer can send, lone surrogates
included; both are safe for any transport.

Batches (§2.4): by default a JSON array gets one ``-32600`` with ``id: null``
and none of its entries run, as the TS SDK 2.4.0 revision says ("ACP does not
use JSON-RPC batches").  With ``accept_batches=True`` the spec repository's rule
applies instead: the entries are handled as one ``Batch`` whose replies go back
as one array.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from typing import Any, TypeAlias, TypeGuard

import orjson

from .errors import (
    AcpError,
    AcpUsageError,
    InvalidParams,
    InvalidRequest,
    MessageTooLarge,
    ParseError,
)

__all__ = [
    "Batch",
    "CancelRequest",
    "Connection",
    "Event",
    "Notification",
    "Request",
    "RequestId",
    "Response",
    "Send",
    "decode",
    "encode",
]

log = logging.getLogger("crow.acp")

RequestId: TypeAlias = int | str
CANCEL_REQUEST = "$/cancel_request"
INITIALIZE = "initialize"
#: Messages held behind an in-flight initialize past which requests are refused.
MAX_HELD = 1024


# --- events ------------------------------------------------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class Request:
    """An inbound request: answer it with ``Connection.result`` or ``.error``."""

    id: RequestId
    method: str
    params: dict[str, Any] | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Notification:
    """An inbound notification (never answered)."""

    method: str
    params: dict[str, Any] | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Response:
    """The reply to one of our requests: ``error`` is None on success."""

    id: RequestId
    method: str
    result: Any = None
    error: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class CancelRequest:
    """The peer withdrew one of its in-flight requests (``$/cancel_request``)."""

    id: RequestId


@dataclass(frozen=True, slots=True, kw_only=True)
class Send:
    """A message the connection produced by itself (an error reply): write it."""

    message: dict[str, Any] | list[dict[str, Any]]


@dataclass(frozen=True, slots=True, kw_only=True)
class Batch:
    """The requests and notifications of one inbound JSON array.

    ``errors`` are the replies already owed for invalid entries; the replies to
    ``requests`` join them, and all go back as one array.
    """

    requests: tuple[Request, ...]
    notifications: tuple[Notification, ...]
    errors: tuple[dict[str, Any], ...] = field(default=())


Event: TypeAlias = Request | Notification | Response | CancelRequest | Send | Batch


class EncodeError(ValueError):
    """A message that cannot be written as JSON at all (nested too deeply, or
    holding a value JSON has no form for)."""


def encode(message: Any) -> bytes:
    """Compact JSON, one line: a message never contains a raw newline (§2).

    orjson refuses lone surrogates (an id or method echoed from a peer that sent
    ``"\\ud800"``), integers past 64 bits and nesting past 254 levels; the
    stdlib then writes them, escaping every non-ASCII character, so the reply
    is still valid JSON carrying the same values.  Raises ``EncodeError``
    (a ValueError) only when neither can.
    """
    try:
        return orjson.dumps(message)
    except TypeError:
        pass
    try:
        return json.dumps(message, separators=(",", ":"), allow_nan=False).encode()
    except (TypeError, ValueError, RecursionError) as exc:
        raise EncodeError(f"cannot encode the message as JSON: {exc}") from None


class TooDeep(ValueError):
    """Valid JSON nested past what the parser accepts."""


def decode(frame: bytes) -> Any:
    """Parse one frame.  Raises ValueError (and nothing else) for anything that
    is not JSON, or JSON nested too deeply to parse safely."""
    try:
        message = orjson.loads(frame)
    except orjson.JSONDecodeError:
        pass
    else:
        # orjson reads an integer past 64 bits as a float: an id must come back
        # exactly as it was sent, so such a message is read again by the stdlib.
        if not (isinstance(message, dict) and type(message.get("id")) is float):
            return message
    # orjson refuses some valid JSON (lone surrogate escapes, nesting past 1024
    # levels, where the stdlib's recursion would blow the stack): ask the stdlib
    # before calling the frame unparsable.
    try:
        return json.loads(frame)
    except RecursionError:
        raise TooDeep("Parse error: the message is nested too deeply") from None
    except ValueError:
        raise
    except Exception as exc:  # anything else the parser throws is still bad input
        raise ValueError(f"unparsable message: {exc}") from None


def _id_key(value: RequestId) -> str:
    # "7" and 7 name the same request when matching (MCP's coerce_request_id);
    # replies still echo the id exactly as it came.
    return str(value)


_ID_PREFIX = re.compile(rb'"id"\s*:\s*(-?\d{1,18}|"(?:[^"\\]|\\.){0,200}")')


class Connection:
    """JSON-RPC state of one connection, for either role.

    ``require_initialize``: the agent side answers every request but
    ``initialize`` with ``-32600`` (and drops notifications other than
    ``$/cancel_request``) until ``initialize`` succeeds (§3.4): ``initialized()``
    or a ``result()`` for it.  While it is in flight later messages are held;
    after its reply is written, ``release()`` returns them as events.
    """

    def __init__(
        self,
        *,
        require_initialize: bool = False,
        accept_batches: bool = False,
        id_prefix: str | None = None,
    ) -> None:
        self.require_initialize = require_initialize
        self.accept_batches = accept_batches
        # Outbound ids are integers, or "<prefix><n>" strings: a relay (the conductor)
        # names each hop's ids so that no two hops of one request share an id.
        self.id_prefix = id_prefix
        self.is_initialized = not require_initialize
        self._next_id = 0
        self._outbound: dict[str, str] = {}  # id key -> method, awaiting a reply
        self._inbound: dict[str, RequestId] = {}  # id key -> id, owing a reply
        # An initialize in flight (its id key) holds later messages until released.
        self._initializing: str | None = None
        self._init_answered = False
        self._held: list[Any] = []  # decoded messages, in arrival order

    # ---- inbound ------------------------------------------------------------
    def receive(self, frame: bytes) -> list[Event]:
        """Parse one frame into events.  Never raises for bad input."""
        try:
            message = decode(frame)
        except TooDeep as exc:
            return [Send(message=_error_message(None, ParseError(str(exc))))]
        except ValueError:
            if not frame.strip():
                return []  # blank lines are tolerated (§2)
            return [Send(message=_error_message(None, ParseError()))]
        if self._initializing is not None and not self._passes_hold(message):
            return self._hold(message)
        return self._receive_message(message)

    def _receive_message(self, message: Any) -> list[Event]:
        if isinstance(message, list):
            return self._receive_batch(message)
        event = self._classify(message)
        if isinstance(event, list):
            return event
        if isinstance(event, dict):
            return [Send(message=event)]
        return [event] if event is not None else []

    # ---- requests pipelined behind initialize ----------------------------------
    def _passes_hold(self, message: Any) -> bool:
        """Only a withdrawal of the initialize itself overtakes the held messages."""
        if not (isinstance(message, dict) and message.get("method") == CANCEL_REQUEST):
            return False
        params = message.get("params")
        target = params.get("requestId") if isinstance(params, dict) else None
        return isinstance(target, (int, str)) and _id_key(target) == self._initializing

    def _hold(self, message: Any) -> list[Event]:
        if len(self._held) < MAX_HELD:
            self._held.append(message)
            return []
        rid = message.get("id") if isinstance(message, dict) and "method" in message else None
        if not _is_id(rid):
            return []
        err = InvalidRequest("Too many requests before initialize was answered: wait for it")
        return [Send(message=_error_message(rid, err))]

    def release(self) -> list[Event]:
        """The held messages as events, once the initialize they wait for is answered.

        They are classified now, as if they had just arrived: after a success they
        run; after a failure requests get ``-32600`` (and a held ``initialize``
        becomes the one in flight, holding the rest again).
        """
        if self._initializing is None or not self._init_answered:
            return []
        held, self._held = self._held, []
        self._initializing, self._init_answered = None, False
        events: list[Event] = []
        for message in held:
            if self._initializing is not None:
                self._held.append(message)
            else:
                events += self._receive_message(message)
        return events

    def receive_oversized(self, prefix: bytes) -> list[Event]:
        """A frame past the size limit was discarded; ``prefix`` is its start."""
        match = _ID_PREFIX.search(prefix)
        rid: RequestId | None = None
        if match:
            try:
                rid = decode(match.group(1))
            except ValueError:  # a bad escape inside the id: answer with id null
                rid = None
        err = MessageTooLarge("Message too large: it exceeds this connection's size limit")
        if rid is not None and b'"method"' not in prefix and _id_key(rid) in self._outbound:
            # The reply to one of our requests (it names no method): that request
            # fails here, or its caller would wait forever for a reply now discarded.
            method = self._outbound.pop(_id_key(rid))
            return [Response(id=rid, method=method, error=err.to_error())]
        if rid is not None:
            self._inbound.pop(_id_key(rid), None)
        return [Send(message=_error_message(rid, err))]

    def _receive_batch(self, entries: list[Any]) -> list[Event]:
        if not entries:
            return [Send(message=_error_message(None, InvalidRequest("Empty batch")))]
        if not self.accept_batches:
            err = InvalidRequest("JSON-RPC batches are not supported: send one message per line")
            return [Send(message=_error_message(None, err))]
        requests: list[Request] = []
        notifications: list[Notification] = []
        errors: list[dict[str, Any]] = []
        others: list[Event] = []
        for entry in entries:
            event = self._classify(entry)
            if isinstance(event, list):
                others += event
            elif isinstance(event, dict):
                errors.append(event)
            elif isinstance(event, Request):
                requests.append(event)
            elif isinstance(event, Notification):
                notifications.append(event)
            elif event is not None:
                others.append(event)  # responses and cancels inside a batch
        if not requests and not notifications and not errors:
            return others
        batch = Batch(
            requests=tuple(requests), notifications=tuple(notifications), errors=tuple(errors)
        )
        return [*others, batch]

    def _classify(self, msg: Any) -> Event | list[Event] | dict[str, Any] | None:
        """An event (or several), an error reply owed (a dict), or None to ignore."""
        if not isinstance(msg, dict):
            return _error_message(None, InvalidRequest("A message must be a JSON object"))
        has_id = "id" in msg
        rid = msg.get("id")
        id_ok = _is_id(rid)
        if "method" not in msg and has_id and ("result" in msg or "error" in msg):
            return self._classify_response(msg, rid if id_ok else None)
        if msg.get("jsonrpc") != "2.0" or not isinstance(msg.get("method"), str):
            if not has_id:
                return None  # a malformed notification: nothing to answer
            return _error_message(
                rid if id_ok else None,
                InvalidRequest(
                    'Not a JSON-RPC 2.0 request: it needs "jsonrpc": "2.0" and a string "method"'
                ),
            )
        params = msg.get("params")
        if params is not None and not isinstance(params, dict):
            if not has_id:
                return None
            # By-position params are JSON-RPC, but ACP names every param: -32602.
            # Anything else is not a structured value at all: not a request.
            err: AcpError = (
                InvalidParams("params must be an object (ACP names its params), not an array")
                if isinstance(params, list)
                else InvalidRequest("params must be an object")
            )
            return _error_message(rid if id_ok else None, err)
        method: str = msg["method"]
        if not has_id:
            return self._classify_notification(method, params)
        if not id_ok:
            return _error_message(
                None, InvalidRequest("A request id must be a string or an integer")
            )
        assert isinstance(rid, (int, str))
        return self._classify_request(rid, method, params)

    def _classify_request(
        self, rid: RequestId, method: str, params: dict[str, Any] | None
    ) -> Event | list[Event] | dict[str, Any]:
        if method == CANCEL_REQUEST:
            return self._cancel_as_request(rid, params)
        if self.require_initialize:
            if not self.is_initialized and method != INITIALIZE:
                return _error_message(
                    rid, InvalidRequest(f"{method} before initialize: send initialize first")
                )
            if self.is_initialized and method == INITIALIZE:
                return _error_message(rid, InvalidRequest("The connection is already initialized"))
        key = _id_key(rid)
        if key in self._inbound:
            return _error_message(
                rid, InvalidRequest(f"Request id {rid!r} is still in use by an earlier request")
            )
        self._inbound[key] = rid
        if self.require_initialize and method == INITIALIZE:
            self._initializing = key  # hold what follows until it is answered
        return Request(id=rid, method=method, params=params)

    def _cancel_as_request(self, rid: RequestId, params: dict[str, Any] | None) -> list[Event]:
        """``$/cancel_request`` sent with an id: it still cancels, and is answered ``{}``."""
        events: list[Event] = []
        cancel = self._classify_notification(CANCEL_REQUEST, params)
        if cancel is not None:
            events.append(cancel)
        events.append(Send(message={"jsonrpc": "2.0", "id": rid, "result": {}}))
        return events

    def _classify_notification(self, method: str, params: dict[str, Any] | None) -> Event | None:
        if method == CANCEL_REQUEST:
            rid = (params or {}).get("requestId")
            if _is_id(rid):
                return CancelRequest(id=rid)
            return None
        if not self.is_initialized:
            return None  # dropped before initialize (§3.4)
        return Notification(method=method, params=params)

    def _classify_response(self, msg: dict[str, Any], rid: RequestId | None) -> Event | None:
        method = self._outbound.pop(_id_key(rid), None) if rid is not None else None
        if method is None:
            log.debug("ignoring a response to unknown request id %r", rid)
            return None
        error = msg.get("error")
        if "error" in msg and not isinstance(error, dict):
            error = {"code": -32603, "message": "Malformed error object", "data": error}
        assert rid is not None
        return Response(id=rid, method=method, result=msg.get("result"), error=error)

    # ---- outbound -----------------------------------------------------------
    def request(
        self, method: str, params: dict[str, Any] | None
    ) -> tuple[RequestId, dict[str, Any]]:
        """Mint an id for a new outbound request; returns (id, message)."""
        n = self._next_id
        self._next_id += 1
        rid: RequestId = n if self.id_prefix is None else f"{self.id_prefix}{n}"
        self._outbound[_id_key(rid)] = method
        msg: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            msg["params"] = params
        return rid, msg

    def forget_request(self, rid: RequestId) -> dict[str, Any] | None:
        """Stop waiting for ``rid``; returns the ``$/cancel_request`` to send, if any."""
        if self._outbound.pop(_id_key(rid), None) is None:
            return None
        return self.notification(CANCEL_REQUEST, {"requestId": rid})

    @staticmethod
    def notification(method: str, params: dict[str, Any] | None) -> dict[str, Any]:
        msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        return msg

    def result(self, rid: RequestId, result: Any) -> dict[str, Any]:
        """The reply to inbound request ``rid``.  Raises AcpUsageError if already answered."""
        self._settle(rid, ok=True)
        return {"jsonrpc": "2.0", "id": rid, "result": result}

    def error(self, rid: RequestId, err: AcpError) -> dict[str, Any]:
        """The error reply to inbound request ``rid``."""
        self._settle(rid, ok=False)
        return _error_message(rid, err)

    def relay_error(self, rid: RequestId, error: dict[str, Any]) -> dict[str, Any]:
        """The reply to ``rid`` carrying an error object received from another peer,
        unchanged (a relay passes code, message and data through as they came)."""
        self._settle(rid, ok=False)
        return {"jsonrpc": "2.0", "id": rid, "error": error}

    def _settle(self, rid: RequestId, *, ok: bool) -> None:
        key = _id_key(rid)
        if self._inbound.pop(key, None) is None:
            raise AcpUsageError(f"request {rid!r} is not awaiting a reply (answered twice?)")
        if key == self._initializing:
            self._init_answered = True
            if ok:
                self.is_initialized = True

    def initialized(self) -> None:
        """Open the initialize gate: ``initialize`` was answered successfully."""
        self.is_initialized = True

    def owes_reply(self, rid: RequestId) -> bool:
        return _id_key(rid) in self._inbound

    def owed(self) -> list[RequestId]:
        """The inbound requests still waiting for a reply, oldest first."""
        return list(self._inbound.values())


def _is_id(value: Any) -> TypeGuard[RequestId]:
    return isinstance(value, (int, str)) and not isinstance(value, bool)


def _error_message(rid: RequestId | None, err: AcpError) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "error": err.to_error()}
