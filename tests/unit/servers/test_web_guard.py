"""fetch's address guard (issue #11): classification, allow-list entries, the guarded connect."""

from __future__ import annotations

import asyncio
import datetime
import socket
import ssl
import threading
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from ipaddress import ip_address, ip_network
from pathlib import Path
from typing import Any

import anyio
import httpcore2
import httpx2
import pytest

from crow import tls as crow_tls
from crow.allow_hosts import AllowRule, parse_allow_host
from crow.servers._web_guard import (
    GuardedBackend,
    GuardedTransport,
    Refused,
    address_kind,
)

ADDRESS_KINDS = [  # (address, kind or None for public)
    ("8.8.8.8", None),
    ("2606:4700:4700::1111", None),
    ("::ffff:8.8.8.8", None),  # IPv4-mapped public
    ("64:ff9b::808:808", None),  # NAT64 of a public address
    ("127.0.0.1", "loopback"),
    ("127.255.255.254", "loopback"),
    ("::1", "loopback"),
    ("::ffff:127.0.0.1", "loopback"),  # IPv4-mapped
    ("::127.0.0.1", "loopback"),  # IPv4-compatible
    ("64:ff9b::7f00:1", "loopback"),  # NAT64
    ("2002:7f00:1::", "loopback"),  # 6to4
    ("0.0.0.0", "unspecified"),
    ("::", "unspecified"),
    ("10.1.2.3", "private"),
    ("172.16.0.1", "private"),
    ("192.168.1.1", "private"),
    ("100.64.0.1", "private"),  # CGNAT
    ("fc00::1", "private"),
    ("fd12:3456::1", "private"),
    ("fec0::1", "private"),  # site-local
    ("64:ff9b::a00:1", "private"),  # NAT64 of 10.0.0.1
    ("169.254.1.1", "link-local"),
    ("fe80::1", "link-local"),
    ("fe80::1%1", "link-local"),
    ("169.254.169.254", "cloud metadata"),
    ("fd00:ec2::254", "cloud metadata"),
    ("::ffff:169.254.169.254", "cloud metadata"),
    ("224.0.0.1", "multicast"),
    ("ff02::1", "multicast"),
    ("240.0.0.1", "reserved"),
    ("255.255.255.255", "reserved"),
]


@pytest.mark.parametrize(("address", "kind"), ADDRESS_KINDS)
def test_address_kind(address: str, kind: str | None) -> None:
    assert address_kind(ip_address(address)) == kind


@pytest.mark.parametrize("address", ["192.0.2.1", "198.18.0.1", "2001:db8::1", "0.1.2.3"])
def test_documentation_and_test_ranges_are_not_public(address: str) -> None:
    assert address_kind(ip_address(address)) is not None


@pytest.mark.parametrize(
    ("entry", "rule"),
    [
        ("localhost", AllowRule(name="localhost")),
        (" Wiki.Internal.:8080 ", AllowRule(name="wiki.internal", port=8080)),
        ("127.0.0.1", AllowRule(network=ip_network("127.0.0.1/32"))),
        ("127.0.0.1:8080", AllowRule(network=ip_network("127.0.0.1/32"), port=8080)),
        ("10.0.0.0/8", AllowRule(network=ip_network("10.0.0.0/8"))),
        ("10.1.2.3/8", AllowRule(network=ip_network("10.0.0.0/8"))),
        ("::1", AllowRule(network=ip_network("::1/128"))),
        ("[::1]:8080", AllowRule(network=ip_network("::1/128"), port=8080)),
        ("fc00::/7", AllowRule(network=ip_network("fc00::/7"))),
    ],
)
def test_parse_allow_host(entry: str, rule: AllowRule) -> None:
    assert parse_allow_host(entry) == rule


@pytest.mark.parametrize(
    "entry",
    ["", "http://localhost/", "localhost:0", "localhost:65536", "a b", "[wiki]:80", "-x", "a:b"],
)
def test_parse_allow_host_refuses(entry: str) -> None:
    with pytest.raises(ValueError, match="is not a host name or IP"):
        parse_allow_host(entry)


# --- the guarded connect


class _Recorder(httpcore2.AsyncNetworkBackend):
    """Records connections instead of making them; ``failing`` addresses refuse."""

    def __init__(self, failing: Iterable[str] = ()) -> None:
        self.calls: list[tuple[str, int]] = []
        self.failing = set(failing)

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        self.calls.append((host, port))
        if host in self.failing:
            raise httpcore2.ConnectError("connection refused")
        return httpcore2.AsyncMockStream([])


def _dns(monkeypatch: pytest.MonkeyPatch, *answers: list[str]) -> list[str]:
    """Answer each lookup with the next list of addresses; returns the names looked up."""
    asked: list[str] = []

    async def getaddrinfo(host: str, port: int, **_: Any) -> list[Any]:
        asked.append(host)
        found = answers[min(len(asked), len(answers)) - 1]
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port)) for a in found]

    monkeypatch.setattr(anyio, "getaddrinfo", getaddrinfo)
    return asked


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1",
        "localhost",
        "2130706433",
        "0x7f.1",
        "127.1",
        "0",
        "::1",
        "::ffff:127.0.0.1",
        "169.254.169.254",
        "fd00:ec2::254",
        "10.0.0.1",
    ],
)
async def test_refused_before_any_connection(host: str) -> None:
    inner = _Recorder()
    with pytest.raises(Refused) as refused:
        await GuardedBackend(inner=inner).connect_tcp(host, 80)
    assert refused.value.host == host
    assert inner.calls == []


async def test_connects_to_the_checked_address_not_the_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A rebinding DNS server answers a public address first, then loopback: the guard asks
    # once and connects to what it checked.
    asked = _dns(monkeypatch, ["93.184.215.14"], ["127.0.0.1"])
    inner = _Recorder()
    await GuardedBackend(inner=inner).connect_tcp("rebind.example", 80)
    assert asked == ["rebind.example"]
    assert inner.calls == [("93.184.215.14", 80)]


async def test_one_private_answer_refuses_the_name(monkeypatch: pytest.MonkeyPatch) -> None:
    _dns(monkeypatch, ["93.184.215.14", "10.0.0.1"])
    inner = _Recorder()
    with pytest.raises(Refused, match=r"mixed\.example resolves to 10\.0\.0\.1, a private"):
        await GuardedBackend(inner=inner).connect_tcp("mixed.example", 443)
    assert inner.calls == []


async def test_tries_the_next_checked_address(monkeypatch: pytest.MonkeyPatch) -> None:
    _dns(monkeypatch, ["93.184.215.14", "93.184.215.15"])
    inner = _Recorder(failing=["93.184.215.14"])
    await GuardedBackend(inner=inner).connect_tcp("two.example", 80)
    assert inner.calls == [("93.184.215.14", 80), ("93.184.215.15", 80)]


@pytest.mark.parametrize(
    ("allow", "host", "port", "opened"),
    [
        ("wiki.internal:8080", "wiki.internal", 8080, True),
        ("wiki.internal:8080", "WIKI.internal.", 8080, True),
        ("wiki.internal:8080", "wiki.internal", 8081, False),
        ("wiki.internal", "other.internal", 8080, False),
        ("10.0.0.0/8", "other.internal", 8080, True),  # a range opens the addresses in it
        ("10.0.0.0/8:443", "other.internal", 8080, False),
    ],
)
async def test_allow_rules(
    monkeypatch: pytest.MonkeyPatch, allow: str, host: str, port: int, opened: bool
) -> None:
    _dns(monkeypatch, ["10.0.0.7"])
    inner = _Recorder()
    backend = GuardedBackend([parse_allow_host(allow)], inner=inner)
    if opened:
        await backend.connect_tcp(host, port)
        assert inner.calls == [("10.0.0.7", port)]
    else:
        with pytest.raises(Refused):
            await backend.connect_tcp(host, port)
        assert inner.calls == []


async def test_a_name_that_does_not_resolve_is_a_connect_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def getaddrinfo(host: str, port: int, **_: Any) -> list[Any]:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(anyio, "getaddrinfo", getaddrinfo)
    with pytest.raises(httpcore2.ConnectError, match=r"cannot resolve nowhere\.example"):
        await GuardedBackend(inner=_Recorder()).connect_tcp("nowhere.example", 80)


# --- TLS: connecting to the checked address still verifies the certificate for the name


def _self_signed(tmp_path: Path) -> tuple[Path, Path]:
    """A certificate for ``localhost`` (no IP in it) that is its own CA, and its key."""
    x509 = pytest.importorskip("cryptography.x509")
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file


class _Hello(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "5")
        self.end_headers()
        self.wfile.write(b"hello")


async def test_https_verifies_the_name_while_connecting_to_the_address(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cert_file, key_file = _self_signed(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert_file))  # read by Crow's trust source...
    monkeypatch.setattr(crow_tls, "_context", None)  # ... when it is made (once per process)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert_file, key_file)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    server.daemon_threads = True
    server.socket = tls.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    port = server.server_address[1]
    try:
        async with asyncio.timeout(10):
            by_name = GuardedTransport([parse_allow_host(f"localhost:{port}")])
            async with httpx2.AsyncClient(transport=by_name) as client:
                response = await client.get(f"https://localhost:{port}/")
            assert (response.status_code, response.text) == (200, "hello")
            by_address = GuardedTransport([parse_allow_host(f"127.0.0.1:{port}")])
            async with httpx2.AsyncClient(transport=by_address) as client:
                with pytest.raises(httpx2.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                    await client.get(f"https://127.0.0.1:{port}/")  # the name is not 127.0.0.1
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
