"""The address guard of the web server's ``fetch``: no loopback, private or metadata hosts.

``fetch`` reads URLs the model chose, so unguarded it reaches whatever this machine can:
services on localhost, the LAN, a cloud's metadata endpoint (issue #11). The guard sits where
connections are made, in an httpcore2 network backend. It resolves the host once, refuses
unless every address is public (or opened by ``web.allow_hosts``), and then connects to those
very addresses, never to the name. So every connection of every redirect hop is checked, and
a DNS answer that changes between the check and the connect (rebinding) cannot get past.

Owns: address classification, the allow-list entries and the guarded transport. Not here: the
request itself (``web.py``) and the search endpoint, which the user configures and is not
guarded.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_address, ip_network

import anyio
import httpcore2
import httpx2

from crow.tls import client_context

__all__ = [
    "AllowRule",
    "GuardedBackend",
    "GuardedTransport",
    "Refused",
    "address_kind",
    "parse_allow_host",
]

IPAddress = IPv4Address | IPv6Address

#: Cloud metadata endpoints (AWS, ECS, Alibaba, AWS over IPv6), named as such in a refusal.
METADATA = frozenset(
    ip_address(a) for a in ("169.254.169.254", "169.254.170.2", "100.100.100.200", "fd00:ec2::254")
)
#: Private ranges that Python 3.11's ``is_private`` misses: CGNAT (RFC 6598), IPv6 site-local.
_ALSO_PRIVATE = (ip_network("100.64.0.0/10"), ip_network("fec0::/10"))
_NAT64 = ip_network("64:ff9b::/96")  # RFC 6052: the low 32 bits are an IPv4 address
_IPV4_COMPATIBLE = ip_network("::/96")  # deprecated ::a.b.c.d


def _embedded_ipv4(ip: IPv6Address) -> IPv4Address | None:
    """The IPv4 address an IPv6 one stands for: mapped, compatible, NAT64 or 6to4."""
    if embedded := ip.ipv4_mapped or ip.sixtofour:
        return embedded
    if ip in _NAT64 or (ip in _IPV4_COMPATIBLE and int(ip) > 1):  # not :: or ::1
        return IPv4Address(int(ip) & 0xFFFF_FFFF)
    return None


def address_kind(ip: IPAddress) -> str | None:
    """Why fetch must not reach ``ip`` ("loopback", "private", ...), or None for a public one."""
    if ip in METADATA:
        return "cloud metadata"
    if isinstance(ip, IPv6Address) and (embedded := _embedded_ipv4(ip)) is not None:
        return address_kind(embedded)
    if ip.is_loopback:
        return "loopback"
    if ip.is_unspecified:
        return "unspecified"
    if ip.is_link_local:
        return "link-local"
    if ip.is_multicast:
        return "multicast"
    if ip.is_reserved:
        return "reserved"
    if ip.is_private or any(ip in net for net in _ALSO_PRIVATE):
        return "private"
    if not ip.is_global:
        return "non-public"
    return None


# ---------------------------------------------------------------------------------------------
# The allow-list


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


# ---------------------------------------------------------------------------------------------
# The guarded connection


class Refused(Exception):
    """A connection fetch must not make: ``host`` resolves to ``address``, of kind ``kind``."""

    def __init__(self, host: str, address: IPAddress, kind: str) -> None:
        mapped = isinstance(address, IPv6Address) and address.ipv4_mapped
        # written ::ffff:127.0.0.1, as people do (Python 3.11 writes ::ffff:7f00:1)
        self.address = f"::ffff:{mapped}" if mapped else str(address)
        self.host, self.kind = host, kind
        self.what = f"{'an' if kind[0] in 'aeiou' else 'a'} {kind} address"
        self.url = ""  # the URL of the request, filled in by GuardedTransport
        super().__init__(f"{host} resolves to {self.address}, {self.what}")


class GuardedBackend(httpcore2.AsyncNetworkBackend):
    """Connects only to public addresses, or to those an ``AllowRule`` opens.

    Raises ``Refused`` before any connection is attempted, and ``httpcore2.ConnectError`` when
    the name does not resolve or no address answers.
    """

    def __init__(
        self, allow: Sequence[AllowRule] = (), inner: httpcore2.AsyncNetworkBackend | None = None
    ) -> None:
        self._allow = tuple(allow)
        self._inner = inner or httpcore2.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore2.SOCKET_OPTION] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        addresses = await _resolve(host, port)
        for address in addresses:  # one bad address refuses them all: the answer is hostile
            kind = address_kind(address)
            if kind and not any(rule.allows(host, port, address) for rule in self._allow):
                raise Refused(host, address, kind)
        failure = httpcore2.ConnectError(f"{host} has no address")
        for address in addresses:  # the checked addresses themselves, never the name again
            try:
                return await self._inner.connect_tcp(
                    str(address),
                    port,
                    timeout=timeout,
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except httpcore2.ConnectError as exc:
                failure = exc
        raise failure

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


async def _resolve(host: str, port: int) -> list[IPAddress]:
    try:
        found = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise httpcore2.ConnectError(f"cannot resolve {host}: {exc}") from exc
    return list(dict.fromkeys(ip_address(sockaddr[0]) for *_, sockaddr in found))


class GuardedTransport(httpx2.AsyncHTTPTransport):
    """httpx2's transport with a ``GuardedBackend`` under its connection pool.

    httpx2 takes no network backend, so this replaces the pool that ``AsyncHTTPTransport``
    builds (without a proxy: fetch uses none) with the same pool over the guard. The web tests
    check the guard is in force.
    """

    def __init__(self, allow: Sequence[AllowRule] = ()) -> None:
        super().__init__()
        self._pool = httpcore2.AsyncConnectionPool(
            ssl_context=client_context(), network_backend=GuardedBackend(allow)
        )

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        try:
            return await super().handle_async_request(request)
        except Refused as exc:
            exc.url = str(request.url)
            raise
