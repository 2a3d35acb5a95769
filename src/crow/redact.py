"""Credentials never reach Crow's logs: what is masked, and the filter that masks it.

``crow serve`` logs to stderr and to ``$CROW_HOME/logs/crow.log``, and the
libraries under it log too (httpx writes every request's URL at INFO, userinfo
included).  ``RedactingFilter`` sits on both handlers and masks, in the final
message, the traceback and the stack text:

- URL userinfo: ``https://user:pass@host`` → ``https://***@host``;
- ``Authorization: <scheme> <credentials>`` and ``Bearer <token>``;
- credential query parameters (``?api_key=``, ``&token=``, ...) and
  assignments (``password=...``, ``"api_key": "..."``, ``GITHUB_TOKEN=...``);
- API keys with a well-known prefix (``sk-...``, ``ghp_...``, ``hf_...``);
- the exact values registered with ``register_secret`` (the server token, the
  providers' API keys), wherever they appear.

The patterns are a net, not a proof: a credential with no telltale shape that
was never registered can still slip through, so values Crow knows are
registered at start-up (``crow.config.secrets``).  Masking is idempotent
(masked text masks to itself) and errs towards masking too much.

This module owns what counts as a credential in text; where logs go is
``crow.cli``'s business.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterable
from urllib.parse import quote, unquote, urlsplit

__all__ = [
    "MASK",
    "RedactingFilter",
    "redact",
    "redact_url",
    "register_named",
    "register_secret",
    "url_password",
]

MASK = "***"
#: Registered values shorter than this are ignored: masking every "abc" in the
#: logs would hide more than it protects (such a value is no secret anyway).
MIN_SECRET_CHARS = 6

# scheme://userinfo@ — up to the last "@" before the path (a password may hold an "@").
_USERINFO = re.compile(r"\b([a-zA-Z][a-zA-Z0-9+.-]*://)[^\s/?#@'\"<>]*(?:@[^\s/?#@'\"<>]*)*@")
# Authorization: Bearer x / Basic x / x  (headers, dict reprs, JSON).
_AUTHORIZATION = re.compile(
    r"(?i)\b((?:proxy-)?authorization['\"]?\s*[:=]\s*['\"]?)"
    r"(?:(bearer|basic|token|digest)\s+)?([^\s'\",;}]+)"
)
# "Bearer <token>" anywhere; the lookahead keeps prose ("a bearer token") readable:
# a token has a digit, a capital or a symbol.
_BEARER = re.compile(r"\b([Bb]earer|BEARER)\s+(?=[\w.~+/=-]*[0-9A-Z.~+/=-])[\w.~+/=-]+")
# Names whose value is a credential: api_key, x-api-key, GITHUB_TOKEN, password, ...
_CREDENTIAL_NAMES = (
    r"(?i:[\w-]*(?:api[-_]?key|apikey|access[-_]?token|refresh[-_]?token|auth[-_]?token"
    r"|password|passwd|passphrase|secret|credentials?|token))"
)
# ?api_key=x &token=x ;key=x (query strings, form bodies).
_QUERY = re.compile(r"([?&;](?i:key|sig|signature|" + _CREDENTIAL_NAMES + r")=)[^&;#\s'\"<>]+")
# password=x, GITHUB_TOKEN=x, "api_key": "x" (an assignment: always a value).
_ASSIGNMENT = re.compile(
    r"(\b" + _CREDENTIAL_NAMES + r"(?:['\"]?\s*=\s*|['\"]\s*:\s*)['\"]?)[^\s'\",;&}*]+"
)
# x-api-key: x (a header); the lookahead keeps prose ("secret: none given") readable.
_HEADER = re.compile(
    r"(\b" + _CREDENTIAL_NAMES + r":[ \t]*)(?=[^\s'\",;&}*]*[0-9A-Z_.~+/=-])[^\s'\",;&}*]+"
)
# Provider keys by their prefix: OpenAI/Anthropic, GitHub, GitLab, Hugging Face, Slack.
_PREFIXED_KEY = re.compile(
    r"\b(sk-(?:ant-|proj-)?|sk_live_|ghp_|gho_|ghu_|ghs_|ghr_|github_pat_|glpat-|hf_"
    r"|xox[abprs]-)[A-Za-z0-9_-]{12,}"
)

_lock = threading.Lock()
_secrets: set[str] = set()
_secret_pattern: re.Pattern[str] | None = None  # rebuilt on registration; read without the lock


def register_secret(value: str | None) -> None:
    """Mask ``value`` (and its URL-encoded form) wherever it appears in a log line.

    ``None``, empty and very short values are ignored (``MIN_SECRET_CHARS``).
    """
    global _secret_pattern
    if not value or len(value.strip()) < MIN_SECRET_CHARS:
        return
    forms = {value, quote(value, safe=""), quote(value)}
    with _lock:
        if forms <= _secrets:
            return
        _secrets.update(forms)
        longest_first = sorted(_secrets, key=len, reverse=True)
        _secret_pattern = re.compile("|".join(map(re.escape, longest_first)))


def register_named(pairs: Iterable[tuple[str, str]]) -> None:
    """Register the values of ``pairs`` (headers, an environment) whose name says
    they hold a credential; of ``Bearer x``, ``x`` alone too."""
    for name, value in pairs:
        if _NAMED_CREDENTIAL.search(name):
            register_secret(value)
            register_secret(value.partition(" ")[2])


_NAMED_CREDENTIAL = re.compile(r"(?i)authorization|key|token|secret|password|passwd|cookie")


def url_password(url: str | None) -> str | None:
    """The password in ``url``'s userinfo (decoded), or None."""
    try:
        password = urlsplit(url).password if url else None
    except ValueError:
        return None
    return unquote(password) if password else None


def redact_url(url: str) -> str:
    """``url`` without its userinfo and with credential query values masked."""
    return _QUERY.sub(rf"\1{MASK}", _USERINFO.sub(rf"\1{MASK}@", url))


def redact(text: str) -> str:
    """``text`` with every credential this module recognises masked (see the module doc)."""
    pattern = _secret_pattern
    if pattern is not None:
        text = pattern.sub(MASK, text)
    text = _USERINFO.sub(rf"\1{MASK}@", text)
    text = _AUTHORIZATION.sub(_authorization, text)
    text = _BEARER.sub(rf"\1 {MASK}", text)
    text = _QUERY.sub(rf"\1{MASK}", text)
    text = _ASSIGNMENT.sub(rf"\1{MASK}", text)
    text = _HEADER.sub(rf"\1{MASK}", text)
    return _PREFIXED_KEY.sub(rf"\1{MASK}", text)


def _authorization(match: re.Match[str]) -> str:
    prefix, scheme, _ = match.groups()
    return f"{prefix}{scheme} {MASK}" if scheme else f"{prefix}{MASK}"


_FORMATTER = logging.Formatter()  # formats tracebacks exactly as the handlers' formatters do


class RedactingFilter(logging.Filter):
    """A handler filter: the record's message, traceback and stack come out masked.

    The message is formatted once here (``msg % args``) and stored back with no
    args, so every handler and formatter after this one sees the masked text;
    the traceback is formatted into ``exc_text``, which formatters use as is.
    A record whose arguments do not fit its format is passed on untouched, for
    logging to report the way it always does.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:
            return True
        record.msg, record.args = redact(message), ()
        if record.exc_info and not record.exc_text:
            record.exc_text = _FORMATTER.formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True
