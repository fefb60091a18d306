"""The grant token's profile: what signs, what reads, and what is refused before any
key is trusted."""

from __future__ import annotations

import json

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from interlock.errors import BadSignature, GrantInvalid, UnknownKey
from interlock.verify.binding import http_binding
from interlock.verify.tokens import (
    GrantClaims,
    b64url,
    keys_from_jwks,
    public_jwk,
    read_grant,
    sign_grant,
    sign_jws,
)

KEY = Ed25519PrivateKey.generate()
KEYS = {"k1": KEY.public_key()}
CLAIMS = GrantClaims(
    grant_id="g_1",
    issuer="interlock",
    audience="shop",
    tenant="acme",
    agent="bot",
    intent_hash="sha256:" + "a" * 64,
    binding="sha256:" + "b" * 64,
    issued_at=1_700_000_000,
    expires_at=1_700_000_060,
)


def _forge(header: dict[str, object], payload: dict[str, object]) -> str:
    head = b64url(json.dumps(header).encode()) + "." + b64url(json.dumps(payload).encode())
    return head + "." + b64url(KEY.sign(head.encode()))


def test_a_signed_grant_reads_back_to_its_claims() -> None:
    assert read_grant(sign_grant(CLAIMS, KEY, kid="k1"), KEYS) == CLAIMS


def test_a_grant_read_through_its_jwk_set_verifies() -> None:
    keys = keys_from_jwks({"keys": [public_jwk("k1", KEY.public_key())]})
    assert read_grant(sign_grant(CLAIMS, KEY, kid="k1"), keys) == CLAIMS


@pytest.mark.parametrize(
    ("header", "error"),
    [
        ({"alg": "none", "kid": "k1", "typ": "interlock-grant+jws"}, GrantInvalid),
        ({"alg": "HS256", "kid": "k1", "typ": "interlock-grant+jws"}, GrantInvalid),
        ({"alg": "EdDSA", "typ": "interlock-grant+jws"}, GrantInvalid),
        ({"alg": "EdDSA", "kid": "k1", "typ": "JWT"}, GrantInvalid),
        ({"alg": "EdDSA", "kid": "k1", "typ": "interlock-receipt+jws"}, GrantInvalid),
        ({"alg": "EdDSA", "kid": "k1", "typ": "interlock-grant+jws", "crit": ["x"]}, GrantInvalid),
        ({"alg": "EdDSA", "kid": "k2", "typ": "interlock-grant+jws"}, UnknownKey),
    ],
)
def test_a_header_outside_the_profile_is_refused(
    header: dict[str, object], error: type[Exception]
) -> None:
    with pytest.raises(error):
        read_grant(_forge(header, CLAIMS.to_payload()), KEYS)


def test_a_changed_claim_breaks_the_signature() -> None:
    head, _body, sig = sign_grant(CLAIMS, KEY, kid="k1").split(".")
    payload = CLAIMS.to_payload() | {"aud": "bank"}
    with pytest.raises(BadSignature):
        read_grant(f"{head}.{b64url(json.dumps(payload).encode())}.{sig}", KEYS)


def test_a_grant_signed_by_another_key_under_a_known_kid_is_refused() -> None:
    other = Ed25519PrivateKey.generate()
    with pytest.raises(BadSignature):
        read_grant(sign_grant(CLAIMS, other, kid="k1"), KEYS)


@pytest.mark.parametrize(
    "change",
    [
        {"v": 2},
        {"jti": ""},
        {"aud": None},
        {"intent": "md5:00"},
        {"bind": "sha256:XYZ"},
        {"iat": "1"},
        {"exp": True},
        {"exp": 1_699_999_999},
        {"extra": 1},
    ],
)
def test_malformed_claims_are_refused_even_when_signed(change: dict[str, object]) -> None:
    token = sign_jws(CLAIMS.to_payload() | change, KEY, kid="k1", typ="interlock-grant+jws")
    with pytest.raises(GrantInvalid):
        read_grant(token, KEYS)


@pytest.mark.parametrize("token", ["", "a.b", "a.b.c.d", "!!.x.y", "x" * 9000])
def test_garbage_is_refused(token: str) -> None:
    with pytest.raises(GrantInvalid):
        read_grant(token, KEYS)


def test_the_binding_changes_with_every_part_of_the_request() -> None:
    base = ("POST", "/refunds?x=1", b'{"a":1}', "k-1")
    digest = http_binding(*base, audience="shop")
    assert digest == http_binding(*base, audience="shop")
    for changed in [
        ("post", *base[1:]),  # methods are case-sensitive: not the request granted
        ("PUT", *base[1:]),
        ("POST", "/refunds?x=2", *base[2:]),
        ("POST", "/refunds", *base[2:]),
        (*base[:2], b'{"a":2}', "k-1"),
        (*base[:3], "k-2"),
        (*base[:3], None),
    ]:
        assert http_binding(*changed, audience="shop") != digest
    assert http_binding(*base, audience="bank") != digest


@pytest.mark.parametrize(
    ("method", "target"), [("", "/x"), ("GE T", "/x"), ("GET", "x"), ("GET", "/x\r\nA: b")]
)
def test_a_binding_of_no_request_is_refused(method: str, target: str) -> None:
    with pytest.raises(GrantInvalid):
        http_binding(method, target, b"", None, audience="shop")
