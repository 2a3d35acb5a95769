"""The entries of ``web.allow_hosts``: the non-public hosts the web server's ``fetch`` may reach.

One parser for two readers: ``crow.config`` checks each entry when config.toml loads (an
entry the web server would refuse fails there, with the key named), and the fetch guard
(``crow.servers._web_guard``) matches connections against the rules.  It sits on the
bottom floor so that config need not import the servers above it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_network

__all__ = ["AllowRule", "IPAddress", "parse_allow_host"]

IPAddress = IPv4Address | IPv6Address


@dataclass(frozen=True, kw_only=True)
class AllowRule:
    """One ``web.allow_hosts`` entry: a host name or an IP network, on one port or any."""

    name: str | None = None  # lower case, no trailing dot; matches the URL's host only
    network: IPv4Network | IPv6Network | None = None  # matches the resolved address
    port: int | None = None  # None: any port

    def allows(self, host: str, port: int, address: IPAddress) -> bool:
        if self.port is not None and port != self.port:
            return False
        if self.name is not None:
            return host.lower().removesuffix(".") == self.name
        return self.network is not None and address in self.network


_ENTRY = re.compile(  # [IPv6 or range]:port, or host-or-IPv4-or-range:port
    r"\[(?P<bracketed>[^\]]+)\](?::(?P<port6>\d+))?|(?P<host>[^:\[\]]+)(?::(?P<port>\d+))?"
)
_LABEL = re.compile(r"(?!-)[a-z0-9_-]{1,63}(?<!-)")


def parse_allow_host(entry: str) -> AllowRule:
    """``host``, ``host:port``, an IP, ``[IPv6]:port`` or a CIDR range (``10.0.0.0/8``).

    Raises ValueError for anything else: a URL, an empty string, a bad port or host name.
    """
    text = entry.strip().lower()
    bad = ValueError(f"{entry!r} is not a host name or IP with an optional :port, or a range")
    try:  # a bare IPv6 address or range has colons of its own
        return AllowRule(network=ip_network(text, strict=False))
    except ValueError:
        pass
    if (found := _ENTRY.fullmatch(text)) is None:
        raise bad
    port = int(port_text) if (port_text := found["port6"] or found["port"]) else None
    if port is not None and not 0 < port < 65536:
        raise bad
    host = found["bracketed"] or found["host"]
    try:
        return AllowRule(network=ip_network(host, strict=False), port=port)
    except ValueError:
        pass
    name = host.removesuffix(".")
    if found["bracketed"] or not all(_LABEL.fullmatch(label) for label in name.split(".")):
        raise bad
    return AllowRule(name=name, port=port)
