"""crow.acp: the Agent Client Protocol v2 in Python, both roles.

Layers, bottom up: ``schema`` (generated wire models), ``frames`` (the bytes of a
``session/update`` as sent, for encode-once senders and routing), ``connection`` (the
sans-I/O JSON-RPC core), ``jsonrpc`` (the async peer), ``transports`` (stdio),
``agent`` / ``client`` (the two roles), ``projection`` (what a client knows
of a session), ``router`` (the v1|v2 choice on a connection's first
``initialize``) and ``v1_client`` (the client's v1 dialect, for an agent that
answers 1).  Nothing here imports the rest of Crow.
"""

from . import frames, schema
from .agent import PROTOCOL_VERSION, AgentSide
from .client import ClientSide, Session
from .connection import Connection
from .errors import (
    AcpError,
    AcpUsageError,
    AuthRequired,
    ConnectionClosed,
    InternalError,
    InvalidParams,
    InvalidRequest,
    MessageTooLarge,
    MethodNotFound,
    ParseError,
    RequestCancelled,
    ResourceNotFound,
    SessionNotFound,
    UnsupportedProtocolVersion,
)
from .jsonrpc import Peer, Transport
from .projection import Message, SessionProjection, Terminal, ToolCall, Turn
from .router import MessageTransport, ProtocolRouter
from .transports.stdio import StdioTransport, open_stdio, spawn

__all__ = [
    "PROTOCOL_VERSION",
    "AcpError",
    "AcpUsageError",
    "AgentSide",
    "AuthRequired",
    "ClientSide",
    "Connection",
    "ConnectionClosed",
    "InternalError",
    "InvalidParams",
    "InvalidRequest",
    "Message",
    "MessageTooLarge",
    "MessageTransport",
    "MethodNotFound",
    "ParseError",
    "Peer",
    "ProtocolRouter",
    "RequestCancelled",
    "ResourceNotFound",
    "Session",
    "SessionNotFound",
    "SessionProjection",
    "StdioTransport",
    "Terminal",
    "ToolCall",
    "Transport",
    "Turn",
    "UnsupportedProtocolVersion",
    "frames",
    "open_stdio",
    "schema",
    "spawn",
]
