"""The one trust source of every HTTPS (and wss) client in Crow.

Model calls (aiohttp), discovery, MCP servers over HTTP, ``fetch`` and the ACP
HTTP client (httpx2), the ACP WebSocket client (websockets) and the embedder
(openai) each had their own default: behind a corporate CA one of them could
verify a server and another not.  They all take ``client_context()`` now: the
operating system's trust store, through ``truststore`` (Keychain on macOS, the
certificate store on Windows, so a CA that IT installed is trusted).

On Linux truststore reads OpenSSL's system store (``SSL_CERT_FILE`` and
``SSL_CERT_DIR`` first, then the distribution's bundle) again at every handshake,
which OpenSSL before 3.4 accumulates (truststore issue 212; httpx2 avoids it the
same way): there the same store is loaded once, as truststore would find it.

The context is made once per process (loading a CA bundle takes ~10 ms) and shared:
every client here speaks HTTP/1.1, so the ALPN a client sets on it is the same.
"""

from __future__ import annotations

import os
import re
import ssl
import sys

__all__ = ["client_context"]

#: Where distributions keep their CA bundle, for an OpenSSL built with other paths
#: (truststore's own list, by its Linux backend).
CA_FILES = (
    "/etc/ssl/cert.pem",  # Alpine, Arch, Fedora 34+, BSD
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",  # Fedora 44+, RHEL 11+
    "/etc/pki/tls/cert.pem",  # older Fedora, RHEL, CentOS
    "/etc/ssl/certs/ca-certificates.crt",  # Debian, Ubuntu
    "/etc/ssl/ca-bundle.pem",  # SUSE
)
_HASHED = re.compile(r"^[0-9a-fA-F]{8}\.\d$")


_context: ssl.SSLContext | None = None  # made on first use


def client_context() -> ssl.SSLContext:
    """The SSLContext that verifies the servers Crow's clients reach."""
    global _context
    if _context is None:
        _context = _made()
    return _context


def _made() -> ssl.SSLContext:
    if sys.platform.startswith("linux"):
        context = _system_store()
    else:
        import truststore  # the OS trust store off Linux; Linux reads its files

        context = truststore.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.set_alpn_protocols(["http/1.1"])
    return context


def _system_store() -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies certificates and names
    defaults = ssl.get_default_verify_paths()  # SSL_CERT_FILE / SSL_CERT_DIR included
    if defaults.cafile or (defaults.capath and _holds_certificates(defaults.capath)):
        context.load_verify_locations(defaults.cafile, defaults.capath)
    else:
        found = next((path for path in CA_FILES if os.path.isfile(path)), None)
        if found is not None:
            context.load_verify_locations(found)
    return context


def _holds_certificates(capath: str) -> bool:
    try:
        return any(_HASHED.match(name) for name in os.listdir(capath))
    except OSError:
        return False
