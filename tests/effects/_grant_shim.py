"""TEMPORARY: the grants API (branch `grants`) stood in until it is merged. Removed at
the merge; install() does nothing once Guard has its own issue_grant."""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass
from typing import Any

from interlock.guard import Guard
from interlock.verify.tokens import GrantClaims, public_jwk, sign_grant


@dataclass(frozen=True, slots=True)
class Grant:
    token: str
    claims: GrantClaims
    kid: str


_lock = threading.Lock()
_claimed: set[str] = set()
_key: Any = None


def install() -> None:
    global _key  # noqa: PLW0603 - one key per process, like the real key ring
    if "issue_grant" in Guard.__dict__ and not getattr(Guard.issue_grant, "_shim", False):
        return
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    if _key is None:
        _key = Ed25519PrivateKey.generate()

    def issue_grant(
        self: Guard,
        decision: Any,
        *,
        audience: str | None = None,
        binding: str | None = None,
        ttl: float | None = None,
    ) -> Grant:
        now = int(time.time())
        claims = GrantClaims(
            grant_id="g_" + secrets.token_hex(8),
            issuer="interlock",
            audience=audience or "x",
            tenant="acme",
            agent=None,
            intent_hash="sha256:" + "0" * 64,
            binding=binding,
            issued_at=now,
            expires_at=now + int(ttl or 60) + 1,
        )
        return Grant(sign_grant(claims, _key, kid="k1"), claims, "k1")

    def claim_grant(self: Guard, grant: Grant) -> GrantClaims:
        with _lock:
            if grant.claims.grant_id in _claimed:
                from interlock.errors import GrantReplayed

                raise GrantReplayed("claimed")
            _claimed.add(grant.claims.grant_id)
        return grant.claims

    def grant_jwks(self: Guard) -> dict[str, Any]:
        return {"keys": [public_jwk("k1", _key.public_key())]}

    issue_grant._shim = True  # type: ignore[attr-defined]
    Guard.issue_grant = issue_grant  # type: ignore[attr-defined]
    Guard.claim_grant = claim_grant  # type: ignore[attr-defined]
    Guard.grant_jwks = grant_jwks  # type: ignore[attr-defined]
