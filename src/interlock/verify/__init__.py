"""Provider-side verification of Interlock grants (no server, no store of Interlock's).

A downstream service checks by itself that a request carries a valid grant for exactly
that request. The token format and keys are in :mod:`interlock.verify.tokens`; the
request binding in :mod:`interlock.verify.binding`.
"""

from __future__ import annotations

from interlock.verify.binding import IDEMPOTENCY_HEADER, http_binding
from interlock.verify.tokens import (
    GRANT_TYPE,
    GrantClaims,
    keys_from_jwks,
    public_jwk,
    read_grant,
    sign_grant,
)

__all__ = [
    "GRANT_TYPE",
    "IDEMPOTENCY_HEADER",
    "GrantClaims",
    "http_binding",
    "keys_from_jwks",
    "public_jwk",
    "read_grant",
    "sign_grant",
]
