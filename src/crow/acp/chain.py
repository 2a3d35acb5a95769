"""Proxy chains on the wire: the names and rules the conductor and proxies share.

A chain is ``client → conductor → proxy 0 … proxy N-1 → agent``.  The conductor
gives each proxy its predecessor's messages plain and its successor's wrapped in
``_proxy/successor``; a proxy is initialized with ``_proxy/initialize`` (the
client's ``initialize`` params, unchanged).  Responses are never wrapped.  The
names are the Rust SDK's (``agent-client-protocol-conductor``), the wire truth
where the RFD's drafts differ (PROXY-CHAINS.md §2.3).
"""

from __future__ import annotations

from typing import Any

from .errors import InvalidParams, InvalidRequest

__all__ = [
    "EXPECTED_INITIALIZE",
    "NOT_PROXY_INITIALIZE",
    "ONLY_CONDUCTOR",
    "PROXY_INITIALIZE",
    "PROXY_SUCCESSOR",
    "refusal",
    "select_version",
    "unwrap",
    "wrap",
    "wrap_message",
]

PROXY_INITIALIZE = "_proxy/initialize"
PROXY_SUCCESSOR = "_proxy/successor"

#: The error data the Rust SDK uses for each refusal (clients may match on them).
EXPECTED_INITIALIZE = "expected `initialize` request"
ONLY_CONDUCTOR = "initialize/proxy requests are only sent by the conductor"
NOT_PROXY_INITIALIZE = "proxies must be initialized with `_proxy/initialize`"


def wrap(method: str, params: Any) -> dict[str, Any]:
    """The ``_proxy/successor`` params carrying one message (``params`` always present)."""
    return {"method": method, "params": {} if params is None else params}


def wrap_message(message: dict[str, Any]) -> dict[str, Any]:
    """A whole request or notification, wrapped: the same id (if any), sent on to the successor."""
    wrapped = {k: v for k, v in message.items() if k not in ("method", "params")}
    wrapped["method"] = PROXY_SUCCESSOR
    wrapped["params"] = wrap(message["method"], message.get("params"))
    return wrapped


def unwrap(params: Any) -> tuple[str, Any]:
    """The message inside ``_proxy/successor`` params; raises InvalidParams if there is none.
    The envelope's own ``_meta`` is hop-local and dropped."""
    method = params.get("method") if isinstance(params, dict) else None
    if not isinstance(method, str):
        raise InvalidParams(f"{PROXY_SUCCESSOR} needs the inner message's method")
    return method, params.get("params")


def select_version(params: Any) -> int:
    """The protocol version a chain runs, from ``initialize``'s raw params: 1, or 2 for
    any later version (the chain never runs one it does not know).  Raises the errors
    the Rust conductor answers with."""
    version = params.get("protocolVersion") if isinstance(params, dict) else None
    if type(version) is not int or version < 0:
        raise InvalidParams("initialize.protocolVersion must be a valid ACP protocol version")
    if version == 0:
        raise InvalidRequest("unsupported ACP protocol version 0")
    return min(version, 2)


def refusal(rule: str) -> InvalidRequest:
    """-32600 for breaking one of the chain's rules, worded as the Rust SDK does (the
    rule as the error data, which peers may match on)."""
    return InvalidRequest(f"Invalid request: {rule}", data=rule)
