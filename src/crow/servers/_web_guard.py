"""The address guard of the web server's ``fetch``: no loopback, private or metadata hosts.

``fetch`` reads URLs the model chose, so unguarded it reaches whatever this machine can:
services on localhost, the LAN, a cloud's metadata endpoint (issue #11). The guard sits where
connections are made, in an httpcore2 network backend. It resolves the host once, refuses
unless every address is public (or opened by ``web.allow_hosts``), and then connects to those
very addresses, never to the name. So every connection of every redirect hop is checked, and
a DNS answer that changes between the check and the connect (rebinding) cannot get past.

Owns: address classification and the guarded transport. Not here: the allow-list entries
(``crow.allow_hosts``, which config reads too), the request itself (``web.py``) and the search
endpoint, which the user configures and is not guarded.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable, Sequence
from ipaddress import IPv4Address, IPv6Address, ip_address, ip_network

import anyio
import httpcore2
import httpx2

from crow.allow_hosts import AllowRule, IPAddress, parse_allow_host
from crow.tls import client_context

__all__ = [  # AllowRule and parse_allow_host live in crow.allow_hosts; web.py takes them here
    "AllowRule",
    "GuardedBackend",
    "GuardedTransport",
    "Refused",
    "address_kind",
    "parse_allow_host",
]

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
