"""Verdict proofs: a verdict only the verifier a client asked for can give.

A judge's verdict reaches clients as an ``agent_message`` with
``_meta["crow/verdict"]``.  Anything on the path could write such a message: the
agent being judged most of all.  So a verifier (crow serve's judge, ``crow proxy
judge``) hands each client that has a session verified a per-session key, in
the answer to ``session/new``, ``session/load`` or ``session/resume``:

    "_meta": {"crow/verify": {"verifier": "crow serve", "key": "<base64url, 32 bytes>"}}

and signs every verdict it gives with it: ``_meta["crow/verdict"]["proof"]`` is
the unpadded base64url HMAC-SHA256, under the key's 32 bytes, of these lines
joined by ``\\n`` (UTF-8)::

    crow-verdict/1
    <sessionId>
    <verifier>            the verdict's own "verifier" field
    <turnMessageId>
    <verdict>             pass | fail | unknown
    <round>               decimal
    <maxRounds>           decimal
    <final>               true | false
    <text>                the message's text, last (it may hold newlines)

A client shows a verdict without a valid proof as an ordinary message.  The key
never goes towards the agent being judged (a judge proxy takes
``_meta["crow/verify"]`` off what it passes on, and crow serve keeps it in the
session's stored settings, which no client or model is shown), so whatever that
agent writes, it cannot make a proof.  HMAC rather than a signature: a client
that can check could also sign, but no client can put a message into the stream
of another (crow serve takes verdicts only from the judge it registered), and
any ACP client can check an HMAC with its platform's standard library.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from typing import Any

from .extensions import VERDICT, VERIFY

__all__ = ["KeyHandout", "key_handout", "new_key", "proof", "proven_verdict", "sign"]

SCHEME = "crow-verdict/1"
KEY_BYTES = 32


def new_key() -> str:
    """A fresh per-session key, as it is handed out (unpadded base64url)."""
    return _b64(secrets.token_bytes(KEY_BYTES))


def proof(key: str, session_id: str, verdict: dict[str, Any], text: str) -> str:
    """The proof of ``verdict`` (a ``_meta["crow/verdict"]``) in message ``text``."""
    final = verdict.get("final", True)
    lines = [
        SCHEME,
        session_id,
        str(verdict.get("verifier", "")),
        str(verdict.get("turnMessageId", "")),
        str(verdict.get("verdict", "")),
        str(verdict.get("round", "")),
        str(verdict.get("maxRounds", "")),
        "true" if final is True else "false",
        text,
    ]
    digest = hmac.new(_key_bytes(key), "\n".join(lines).encode(), hashlib.sha256).digest()
    return _b64(digest)


def sign(key: str, session_id: str, verdict: dict[str, Any], text: str) -> dict[str, Any]:
    """``verdict`` with its ``proof``."""
    unsigned = {k: v for k, v in verdict.items() if k != "proof"}
    return {**unsigned, "proof": proof(key, session_id, unsigned, text)}


def proven_verdict(key: str | None, session_id: str, meta: Any, text: str) -> dict[str, Any] | None:
    """The ``_meta["crow/verdict"]`` of a message if ``key`` proves it, else None."""
    verdict = meta.get(VERDICT) if isinstance(meta, dict) else None
    if key is None or not isinstance(verdict, dict):
        return None
    given = verdict.get("proof")
    if not isinstance(given, str):
        return None
    try:
        expected = proof(key, session_id, verdict, text)
    except ValueError:
        return None  # a key that is not base64url: nothing it could prove
    return verdict if hmac.compare_digest(given, expected) else None


class KeyHandout:
    """What a verifier handed out for a session: its name and the key."""

    __slots__ = ("key", "verifier")

    def __init__(self, verifier: str, key: str) -> None:
        self.verifier, self.key = verifier, key

    def to_meta(self) -> dict[str, Any]:
        return {VERIFY: {"verifier": self.verifier, "key": self.key}}


def key_handout(meta: Any) -> KeyHandout | None:
    """The key an answer's ``_meta["crow/verify"]`` hands out, if it holds one."""
    value = meta.get(VERIFY) if isinstance(meta, dict) else None
    if not isinstance(value, dict):
        return None
    verifier, key = value.get("verifier"), value.get("key")
    if not isinstance(verifier, str) or not isinstance(key, str):
        return None
    try:
        if len(_key_bytes(key)) != KEY_BYTES:
            return None
    except ValueError:
        return None
    return KeyHandout(verifier, key)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _key_bytes(key: str) -> bytes:
    try:
        return base64.b64decode(key + "=" * (-len(key) % 4), altchars=b"-_", validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError("not a base64url key") from exc
