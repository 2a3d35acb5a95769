"""Verdict proofs (crow.verdict_proof): what a client checks before it believes a verdict."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from crow.extensions import VERDICT, VERIFY
from crow.verdict_proof import key_handout, new_key, proof, proven_verdict, sign

VERDICT_FIELDS = {
    "verdict": "pass",
    "reasons": ["tests pass"],
    "verifier": "crow serve",
    "turnMessageId": "msg_1",
    "round": 1,
    "maxRounds": 2,
    "final": True,
}
TEXT = "✓ verified: tests pass\nsecond line"


def test_a_signed_verdict_is_proven_with_its_key_only():
    key = new_key()
    meta = {VERDICT: sign(key, "sess_1", VERDICT_FIELDS, TEXT)}
    assert proven_verdict(key, "sess_1", meta, TEXT) == meta[VERDICT]
    assert proven_verdict(new_key(), "sess_1", meta, TEXT) is None
    assert proven_verdict(None, "sess_1", meta, TEXT) is None
    assert proven_verdict(key, "sess_2", meta, TEXT) is None  # another session's
    assert proven_verdict(key, "sess_1", meta, TEXT + ".") is None


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("verdict", "fail"),
        ("verifier", "crow judge"),
        ("turnMessageId", "msg_2"),
        ("round", 2),
        ("maxRounds", 3),
        ("final", False),
    ],
)
def test_changing_any_bound_field_breaks_the_proof(field, value):
    key = new_key()
    signed = sign(key, "sess_1", VERDICT_FIELDS, TEXT)
    assert proven_verdict(key, "sess_1", {VERDICT: {**signed, field: value}}, TEXT) is None


def test_the_proof_is_the_documented_hmac():
    """What another client would compute, from the module's docstring alone."""
    key = new_key()
    message = "\n".join(
        ["crow-verdict/1", "sess_1", "crow serve", "msg_1", "pass", "1", "2", "true", TEXT]
    )
    raw_key = base64.urlsafe_b64decode(key + "=" * (-len(key) % 4))
    digest = hmac.new(raw_key, message.encode(), hashlib.sha256).digest()
    expected = base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
    assert proof(key, "sess_1", VERDICT_FIELDS, TEXT) == expected


@pytest.mark.parametrize(
    "meta",
    [
        None,
        {},
        {VERDICT: "pass"},
        {VERDICT: {**VERDICT_FIELDS}},  # no proof
        {VERDICT: {**VERDICT_FIELDS, "proof": 7}},
        {VERDICT: {**VERDICT_FIELDS, "proof": "not-it"}},
    ],
)
def test_anything_else_is_no_verdict(meta):
    assert proven_verdict(new_key(), "sess_1", meta, TEXT) is None


@pytest.mark.parametrize(
    ("value", "usable"),
    [
        ({"verifier": "crow serve", "key": new_key()}, True),
        ({"verifier": "crow serve", "key": "c2hvcnQ"}, False),  # 5 bytes
        ({"verifier": "crow serve", "key": "!!" * 22}, False),  # not base64url
        ({"key": new_key()}, False),
        (True, False),
    ],
)
def test_a_key_handout_is_taken_only_whole(value, usable):
    assert (key_handout({VERIFY: value}) is not None) is usable
