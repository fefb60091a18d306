"""Provider-side verification of Interlock grants (no server, no store of Interlock's).

A downstream service checks by itself that a request carries a valid grant for exactly
that request, refuses a replay, and signs a receipt of what it did. The token format
and keys are in :mod:`interlock.verify.tokens`; the request binding in
:mod:`interlock.verify.binding`; the checks in :mod:`interlock.verify.verifier`; the
nonce stores in :mod:`interlock.verify.nonces`; receipts in
:mod:`interlock.verify.receipts`; the ASGI middleware in :mod:`interlock.verify.asgi`;
the caller's httpx hooks in :mod:`interlock.verify.httpx_hooks` (which needs httpx).
A provider installs ``interlock`` and imports only this package: it loads neither
Interlock's server, nor its store, nor its guard (a test pins it).

Example::

    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from interlock.verify import GrantMiddleware, SqliteNonceStore, Verifier

    async def provider_app(scope, receive, send): ...

    interlock_jwks = {"keys": []}  # Interlock's /v1/keys/jwks.json, or a callable fetching it
    verifier = Verifier(interlock_jwks, audience="shop", nonces=SqliteNonceStore("nonces.db"))
    app = GrantMiddleware(provider_app, verifier)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from interlock._lazy import lazy_attributes
from interlock.verify.binding import IDEMPOTENCY_HEADER, http_binding
from interlock.verify.tokens import (
    GRANT_TYPE,
    GrantClaims,
    keys_from_jwks,
    public_jwk,
    read_grant,
    sign_grant,
)

if TYPE_CHECKING:
    from interlock.verify.asgi import GRANT_HEADER, GrantMiddleware
    from interlock.verify.httpx_hooks import GrantAuth, areceipt_hook, receipt_hook
    from interlock.verify.keys import jwks_file, jwks_url
    from interlock.verify.nonces import (
        MemoryNonceStore,
        NonceStore,
        PostgresNonceStore,
        SqliteNonceStore,
    )
    from interlock.verify.receipts import (
        RECEIPT_HEADER,
        RECEIPT_TYPE,
        ReceiptClaims,
        check_receipt,
        read_receipt,
        sign_receipt,
    )
    from interlock.verify.verifier import VerifiedGrant, Verifier

__all__ = [
    "GRANT_HEADER",
    "GRANT_TYPE",
    "IDEMPOTENCY_HEADER",
    "RECEIPT_HEADER",
    "RECEIPT_TYPE",
    "GrantAuth",
    "GrantClaims",
    "GrantMiddleware",
    "MemoryNonceStore",
    "NonceStore",
    "PostgresNonceStore",
    "ReceiptClaims",
    "SqliteNonceStore",
    "VerifiedGrant",
    "Verifier",
    "areceipt_hook",
    "check_receipt",
    "http_binding",
    "jwks_file",
    "jwks_url",
    "keys_from_jwks",
    "public_jwk",
    "read_grant",
    "read_receipt",
    "receipt_hook",
    "sign_grant",
    "sign_receipt",
]

_LAZY: dict[str, str] = {
    "GRANT_HEADER": "interlock.verify.asgi",
    "GrantMiddleware": "interlock.verify.asgi",
    "GrantAuth": "interlock.verify.httpx_hooks",
    "areceipt_hook": "interlock.verify.httpx_hooks",
    "receipt_hook": "interlock.verify.httpx_hooks",
    "jwks_file": "interlock.verify.keys",
    "jwks_url": "interlock.verify.keys",
    "MemoryNonceStore": "interlock.verify.nonces",
    "NonceStore": "interlock.verify.nonces",
    "PostgresNonceStore": "interlock.verify.nonces",
    "SqliteNonceStore": "interlock.verify.nonces",
    "RECEIPT_HEADER": "interlock.verify.receipts",
    "RECEIPT_TYPE": "interlock.verify.receipts",
    "ReceiptClaims": "interlock.verify.receipts",
    "check_receipt": "interlock.verify.receipts",
    "read_receipt": "interlock.verify.receipts",
    "sign_receipt": "interlock.verify.receipts",
    "VerifiedGrant": "interlock.verify.verifier",
    "Verifier": "interlock.verify.verifier",
}

__getattr__, __dir__ = lazy_attributes(__name__, globals(), _LAZY)
