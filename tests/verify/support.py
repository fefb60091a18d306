"""What the verify tests share: fixed keys, a clock that moves when told, and grants
bound to a request."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from interlock.verify.binding import http_binding
from interlock.verify.tokens import GrantClaims, public_jwk, sign_grant

__all__ = [
    "AUDIENCE",
    "INTERLOCK_KEY",
    "JWKS",
    "NOW",
    "PROVIDER_JWKS",
    "PROVIDER_KEY",
    "Clock",
    "Req",
    "grant_for",
    "seeded_key",
]

NOW = 1_700_000_000
AUDIENCE = "shop"


def seeded_key(label: str) -> Ed25519PrivateKey:
    """An Ed25519 key derived from ``label`` (the same in every run)."""
    return Ed25519PrivateKey.from_private_bytes(hashlib.sha256(label.encode()).digest())


INTERLOCK_KEY = seeded_key("interlock test key 1")
PROVIDER_KEY = seeded_key("provider test key 1")
JWKS: dict[str, Any] = {"keys": [public_jwk("k1", INTERLOCK_KEY.public_key())]}
PROVIDER_JWKS: dict[str, Any] = {"keys": [public_jwk("shop-1", PROVIDER_KEY.public_key())]}


class Clock:
    """Seconds since the epoch; moves only when told."""

    def __init__(self, now: float = NOW + 5) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@dataclass(frozen=True)
class Req:
    """One HTTP request, as the caller binds it and the provider sees it."""

    method: str = "POST"
    target: str = "/refunds?order=42"
    body: bytes = b'{"amount": 500, "currency": "EUR"}'
    idempotency_key: str | None = "refund-42-1"

    def kwargs(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "target": self.target,
            "body": self.body,
            "idempotency_key": self.idempotency_key,
        }

    def binding(self, audience: str = AUDIENCE) -> str:
        return http_binding(
            self.method, self.target, self.body, self.idempotency_key, audience=audience
        )


def grant_for(
    request: Req | None = None,
    *,
    key: Ed25519PrivateKey = INTERLOCK_KEY,
    kid: str = "k1",
    **changes: Any,
) -> str:
    """A grant token for ``request`` (bound to it unless ``binding`` is changed)."""
    request = request or Req()
    claims = GrantClaims(
        grant_id=f"g_{hashlib.sha256(repr((request, kid, changes)).encode()).hexdigest()[:16]}",
        issuer="interlock",
        audience=AUDIENCE,
        tenant="acme",
        agent="support-bot",
        intent_hash="sha256:" + "a" * 64,
        binding=request.binding(changes.get("audience", AUDIENCE)),
        issued_at=NOW,
        expires_at=NOW + 60,
    )
    return sign_grant(replace(claims, **changes), key, kid=kid)
