"""Credentials are masked in log text: the patterns, registered secrets, the logging filter."""

from __future__ import annotations

import io
import logging
import sys

import pytest

from crow import redact as redact_module
from crow.config import Paths, load_config
from crow.config.secrets import register_config_secrets
from crow.redact import (
    MASK,
    RedactingFilter,
    redact,
    redact_url,
    register_secret,
)


@pytest.fixture(autouse=True)
def no_secrets(monkeypatch):
    """Each test starts with no registered secret and leaves none behind."""
    monkeypatch.setattr(redact_module, "_secrets", set())
    monkeypatch.setattr(redact_module, "_secret_pattern", None)


MASKED = [  # (text, expected)
    # URL userinfo
    (
        'HTTP Request: POST http://user:secret@127.0.0.1:8000/v1/chat "HTTP/1.1 200 OK"',
        'HTTP Request: POST http://***@127.0.0.1:8000/v1/chat "HTTP/1.1 200 OK"',
    ),
    ("https://user:p@ss@host/v1", "https://***@host/v1"),  # an unescaped "@" in the password
    ("redis://:hunter2@cache:6379/0", "redis://***@cache:6379/0"),
    ("git+ssh://git@github.com/o/r", "git+ssh://***@github.com/o/r"),
    ("base_url='http://u:pw@h/v1'", "base_url='http://***@h/v1'"),
    # Authorization and bearer tokens
    ("Authorization: Bearer abc.DEF-123", "Authorization: Bearer ***"),
    ("{'authorization': 'Bearer abcdef123'}", "{'authorization': 'Bearer ***'}"),
    ('"Authorization":"Basic dXNlcjpwYXNz"', '"Authorization":"Basic ***"'),
    ("Proxy-Authorization: s3cr3t", "Proxy-Authorization: ***"),
    ("sent Bearer eyJhbGciOiJIUzI1NiJ9.e30.sig", "sent Bearer ***"),
    # credential query parameters
    ("GET /search?q=crow&api_key=hunter2&page=1", "GET /search?q=crow&api_key=***&page=1"),
    ("https://h/x?token=abc#top", "https://h/x?token=***#top"),
    ("https://h/x?key=abc&monkey=ok", "https://h/x?key=***&monkey=ok"),
    ("https://h/x?apikey=a&access_token=b", "https://h/x?apikey=***&access_token=***"),
    ("https://h/x?PASSWORD=a;secret=b", "https://h/x?PASSWORD=***;secret=***"),
    # assignments and headers
    ("password=hunter", "password=***"),
    ('env={"GITHUB_TOKEN": "abc123"}', 'env={"GITHUB_TOKEN": "***"}'),
    ("OPENAI_API_KEY=abc123 crow serve", "OPENAI_API_KEY=*** crow serve"),
    ("x-api-key: AbC123", "x-api-key: ***"),
    ("client_secret = 'xyz'", "client_secret = '***'"),
    # keys with a well-known prefix
    ("key sk-proj-abcdefghijklmnop1234 used", "key sk-proj-*** used"),
    ("sk-abcdefghijklmnopqrstuvwx", "sk-***"),
    ("token ghp_abcdefghijklmnopqrstuv0123", "token ghp_***"),
    ("hf_abcdefghijklmnopqrstuvwxyz", "hf_***"),
]

KEPT = [  # ordinary log lines that must come out as they went in
    "contact me@example.com",
    '{"url":"http://host/v1","email":"a@b.c"}',
    "send the bearer token in the header",
    "server.token: expected a non-empty string",
    "secret: none given",
    "max_tokens=4096 prompt_tokens=10 completion_tokens=5",
    "token_count=5, tokens: 500",
    "task-abcdefghijklmnopqrstuv finished",
    "model main: retry 1 in 0.5s",
    "http://127.0.0.1:8000/v1/chat/completions",
]


@pytest.mark.parametrize(("text", "expected"), MASKED)
def test_credentials_are_masked(text, expected):
    assert redact(text) == expected


@pytest.mark.parametrize("text", KEPT)
def test_ordinary_text_is_kept(text):
    assert redact(text) == text


@pytest.mark.parametrize("text", [t for t, _ in MASKED] + KEPT)
def test_masking_is_idempotent(text):
    assert redact(redact(text)) == redact(text)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://user:secret@host:8000/v1", "http://***@host:8000/v1"),
        ("https://host/v1?api_key=k&model=m", "https://host/v1?api_key=***&model=m"),
        ("http://localhost:11434/v1", "http://localhost:11434/v1"),
    ],
)
def test_redact_url(url, expected):
    assert redact_url(url) == expected


def test_a_registered_secret_is_masked_anywhere_in_any_form():
    register_secret("plain-looking-value")
    register_secret("p@ss word")
    assert redact("key=x plain-looking-value!") == f"key=x {MASK}!"
    assert redact("pw p@ss word and p%40ss%20word") == f"pw {MASK} and {MASK}"


@pytest.mark.parametrize("value", [None, "", "short", "     "])
def test_empty_and_short_values_are_not_registered(value):
    register_secret(value)
    assert redact("short words stay") == "short words stay"


def test_the_longest_secret_wins():
    register_secret("abcdef")
    register_secret("abcdefghij")
    assert redact("abcdefghij") == MASK


def test_config_secrets_are_registered(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "openai-key-value")
    monkeypatch.setenv("VLLM_KEY", "vllm-key-value")
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(
        """
[providers.vllm]
base_url = "http://bob:url%2Dpassword@gpu:8000/v1"
api_key_env = "VLLM_KEY"
[models.m]
provider = "vllm"
[server]
token = "server-token-value"
[mcp.servers.gh]
command = "gh-mcp"
env = { GH_TOKEN = "gh-token-value", DEBUG = "verbose" }
[mcp.servers.remote]
url = "https://mcp.example/mcp"
headers = { Authorization = "Bearer header-token-value" }
"""
    )
    register_config_secrets(load_config(Paths(home=home)))
    for value in (
        "openai-key-value",
        "vllm-key-value",
        "url-password",
        "server-token-value",
        "gh-token-value",
        "header-token-value",
    ):
        assert redact(f"saw {value}.") == f"saw {MASK}.", value
    assert redact("verbose") == "verbose"  # not a credential's name


# ---- the logging filter ---------------------------------------------------------------


@pytest.fixture
def logger():
    """A logger with one handler carrying the filter; yields (logger, output)."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    handler.addFilter(RedactingFilter())
    # Not from logging.getLogger: pytest 9.2 adds its own (raising) handler to every
    # registered logger that does not propagate, and this one must be alone.
    log = logging.Logger("crow.test_redact", logging.DEBUG)
    log.addHandler(handler)
    log.propagate = False
    yield log, out


def test_the_filter_masks_the_formatted_message(logger):
    log, out = logger
    log.info("calling %s with %r", "http://u:secret@h/v1", {"api_key": "abc"})
    assert out.getvalue() == "INFO calling http://***@h/v1 with {'api_key': '***'}\n"


def test_the_filter_masks_a_message_that_is_not_a_string(logger):
    log, out = logger
    log.warning(ValueError("cannot reach http://u:secret@h/v1"))
    assert "secret" not in out.getvalue() and "http://***@h/v1" in out.getvalue()


def test_the_filter_masks_the_traceback(logger):
    log, out = logger
    try:
        try:
            raise OSError("connect to http://u:secret@h/v1 failed")
        except OSError as exc:
            raise RuntimeError("Authorization: Bearer Abc123") from exc
    except RuntimeError:
        log.exception("model call failed")
    text = out.getvalue()
    assert "secret" not in text and "Abc123" not in text
    assert "Traceback" in text and "http://***@h/v1" in text and "Bearer ***" in text


def test_the_filter_masks_the_stack(logger):
    log, out = logger
    register_secret("stack-secret-value")
    stack_secret_value = "stack-secret-value"  # noqa: F841  (shown in the stack's source line)
    log.info("here", stack_info=True)
    assert "Stack (most recent call last)" in out.getvalue()
    assert "stack-secret-value" not in out.getvalue()


def test_every_handler_sees_the_masked_record(logger):
    log, out = logger
    second = io.StringIO()
    handler = logging.StreamHandler(second)
    handler.addFilter(RedactingFilter())
    log.addHandler(handler)
    try:
        try:
            raise OSError("http://u:secret@h")
        except OSError:
            log.error("failed for %s", "token=abc", exc_info=True)
    finally:
        log.removeHandler(handler)
    for text in (out.getvalue(), second.getvalue()):
        assert "secret" not in text and "token=***" in text


def test_a_record_with_bad_arguments_still_goes_to_logging(logger, monkeypatch):
    log, out = logger
    errors = io.StringIO()
    monkeypatch.setattr(sys, "stderr", errors)  # where logging reports a bad record
    monkeypatch.setattr(logging, "raiseExceptions", True)
    log.info("two %s %s", "args?")
    assert out.getvalue() == ""
    assert "not enough arguments" in errors.getvalue()
