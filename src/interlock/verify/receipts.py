"""Receipts: the provider's own signed statement of what it did with a granted request.

A receipt is a compact JWS of the grant profile's shape (header ``{"alg": "EdDSA",
"kid": ..., "typ": "interlock-receipt+jws"}``, RFC 8785 payload, Ed25519) signed with
the *provider's* key, never Interlock's. Its claims (:class:`ReceiptClaims`) name the
grant it answers, the binding of the request it served, the HTTP status it answered
and the SHA-256 of the response body it sent, and when. The caller checks it against
the grant it sent and the answer it got (:func:`check_receipt`) and keeps it as
evidence of the effect.

Example::

    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from interlock.verify.receipts import ReceiptClaims, body_digest, read_receipt, sign_receipt

    provider_key = Ed25519PrivateKey.generate()
    claims = ReceiptClaims(
        grant_id="g_1", issuer="shop", binding="sha256:" + "b" * 64,
        intent_hash="sha256:" + "a" * 64, status=201,
        body_digest=body_digest(b'{"id": "r_1"}'), issued_at=1_700_000_001,
    )
    token = sign_receipt(claims, provider_key, kid="shop-1")
    assert read_receipt(token, {"shop-1": provider_key.public_key()}) == claims
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Final

from interlock.errors import GrantError, ReceiptError
from interlock.verify.tokens import keys_from_jwks, sign_jws, verify_jws

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
        Ed25519PublicKey,
    )

    from interlock.verify.tokens import GrantClaims

__all__ = [
    "RECEIPT_HEADER",
    "RECEIPT_TYPE",
    "ReceiptClaims",
    "body_digest",
    "check_receipt",
    "read_receipt",
    "sign_receipt",
]

RECEIPT_TYPE: Final = "interlock-receipt+jws"
RECEIPT_HEADER: Final = "Interlock-Receipt"
_DIGEST: Final = re.compile(r"sha256:[0-9a-f]{64}")
_CLAIMS: Final = frozenset({"v", "grant", "iss", "bind", "intent", "status", "body", "iat"})


def body_digest(body: bytes) -> str:
    """``sha256:<hex>`` of a response body's bytes (as sent, before any decoding)."""
    return "sha256:" + hashlib.sha256(body).hexdigest()


@dataclass(frozen=True, slots=True)
class ReceiptClaims:
    """What a receipt says: the provider (``issuer``, the grant's audience) served the
    request of ``grant_id`` — whose binding and intent hash it repeats — and answered
    ``status`` with a body whose digest is ``body_digest``, at ``issued_at`` (whole
    seconds since the epoch, the provider's clock)."""

    grant_id: str
    issuer: str
    binding: str | None
    intent_hash: str
    status: int
    body_digest: str
    issued_at: int

    def to_payload(self) -> dict[str, Any]:
        """The JSON payload."""
        return {
            "v": 1,
            "grant": self.grant_id,
            "iss": self.issuer,
            "bind": self.binding,
            "intent": self.intent_hash,
            "status": self.status,
            "body": self.body_digest,
            "iat": self.issued_at,
        }

    @classmethod
    def from_payload(cls, payload: object) -> ReceiptClaims:
        """Claims from a decoded payload, every field checked (:class:`ReceiptError`
        naming the first that is missing or malformed)."""
        if not isinstance(payload, dict) or payload.get("v") != 1:
            raise ReceiptError("the receipt's payload is not a version 1 JSON object")
        if unknown := sorted(set(payload) - _CLAIMS):
            raise ReceiptError(f"the receipt carries unknown claims: {', '.join(unknown)}")
        for name in ("grant", "iss"):
            if not isinstance(payload.get(name), str) or not payload[name]:
                raise ReceiptError(f"the receipt's {name!r} claim is missing or not a string")
        for name, nullable in (("bind", True), ("intent", False), ("body", False)):
            value = payload.get(name)
            if not (nullable and value is None) and not (
                isinstance(value, str) and _DIGEST.fullmatch(value)
            ):
                raise ReceiptError(f"the receipt's {name!r} claim is not a sha256: digest")
        status, issued = payload.get("status"), payload.get("iat")
        if not isinstance(status, int) or isinstance(status, bool) or not 100 <= status <= 599:
            raise ReceiptError("the receipt's 'status' claim is not an HTTP status")
        if not isinstance(issued, int) or isinstance(issued, bool) or issued < 0:
            raise ReceiptError("the receipt's 'iat' claim is not a time in seconds")
        return cls(
            grant_id=payload["grant"],
            issuer=payload["iss"],
            binding=payload["bind"],
            intent_hash=payload["intent"],
            status=status,
            body_digest=payload["body"],
            issued_at=issued,
        )

    def as_dict(self) -> dict[str, Any]:
        """The claims under their Python names (for records and JSON answers)."""
        return asdict(self)


def sign_receipt(claims: ReceiptClaims, key: Ed25519PrivateKey, *, kid: str) -> str:
    """The receipt token of ``claims``, signed with the provider's ``key``."""
    ReceiptClaims.from_payload(claims.to_payload())  # never sign what no caller reads
    return sign_jws(claims.to_payload(), key, kid=kid, typ=RECEIPT_TYPE)


def read_receipt(
    token: str, provider_keys: Mapping[str, Ed25519PublicKey] | Mapping[str, Any]
) -> ReceiptClaims:
    """The claims of a receipt whose signature verifies under one of the provider's
    keys (a mapping of key ids to keys, or the provider's JWK set). Checks the profile,
    the signature and the claims' form; :class:`ReceiptError` otherwise. Whether it
    answers *this* request is :func:`check_receipt`'s."""
    try:
        keys = keys_from_jwks(provider_keys) if "keys" in provider_keys else provider_keys
        _, payload = verify_jws(token, keys, typ=RECEIPT_TYPE)
    except GrantError as exc:
        raise ReceiptError(f"the provider's receipt does not verify: {exc}") from exc
    return ReceiptClaims.from_payload(payload)


def check_receipt(
    token: str,
    provider_keys: Mapping[str, Ed25519PublicKey] | Mapping[str, Any],
    *,
    grant: GrantClaims,
    status: int,
    body: bytes,
    issuer: str | None = None,
) -> ReceiptClaims:
    """:func:`read_receipt`, then that it answers ``grant`` (its id, binding and intent
    hash) from its audience (or ``issuer``) with this ``status`` and ``body``.
    :class:`ReceiptError` naming the first claim that differs."""
    claims = read_receipt(token, provider_keys)
    expected = {
        "grant_id": grant.grant_id,
        "issuer": issuer if issuer is not None else grant.audience,
        "intent_hash": grant.intent_hash,
        "status": status,
        "body_digest": body_digest(body),
    }
    if grant.binding is not None:
        expected["binding"] = grant.binding
    for name, value in expected.items():
        if getattr(claims, name) != value:
            raise ReceiptError(
                f"the provider's receipt is not for this answer: its {name} is "
                f"{getattr(claims, name)!r}, expected {value!r}",
                status=status,
            )
    return claims
