"""Request bindings: the digest of the exact HTTP request a grant is for.

The caller's effect adapter computes it before the request leaves (``prepare``); the
provider recomputes it from what arrived. Equal digests mean the same method, the same
path and query, the same body bytes, the same idempotency key and the same audience —
anything else (a changed amount, another order id in the path, a replayed body under a
new key, ``post`` for ``POST`` — methods are case-sensitive, RFC 9110 §9.1) is a different
request and the grant does not cover it.

The digest is SHA-256 over the RFC 8785 JSON of::

    {"v": 1, "audience": ..., "method": "POST", "target": "/refunds?x=1",
     "body": "sha256:<hex of the body bytes>", "idempotency_key": "..." | null}

``target`` is the request target as sent (path and query, RFC 9110 origin-form), not a
full URL: the provider sees its own path behind proxies and hosts, not the caller's
base URL. Its path is compared byte for byte: a caller and a provider that normalise
paths differently disagree, which fails closed.

Example::

    from interlock.verify.binding import http_binding

    a = http_binding("POST", "/refunds", b'{"amount": 5}', "key-1", audience="shop")
    b = http_binding("POST", "/refunds", b'{"amount": 6}', "key-1", audience="shop")
    assert a != b and a.startswith("sha256:")
"""

from __future__ import annotations

import hashlib
import string
from typing import Any, Final

import rfc8785

from interlock.errors import GrantInvalid

__all__ = ["IDEMPOTENCY_HEADER", "http_binding"]

IDEMPOTENCY_HEADER: Final = "Idempotency-Key"
_TOKEN_CHARS: Final = frozenset("!#$%&'*+-.^_`|~" + string.digits + string.ascii_letters)


def http_binding(
    method: str, target: str, body: bytes, idempotency_key: str | None, *, audience: str
) -> str:
    """``sha256:<hex>`` binding one HTTP request to a grant (see the module)."""
    if not method or not set(method) <= _TOKEN_CHARS:
        raise GrantInvalid(f"{method!r} is not an HTTP method")
    if not target.startswith("/") or any(c in target for c in " \r\n\t#"):
        raise GrantInvalid(f"{target!r} is not a request target (a path and query)")
    document: dict[str, Any] = {
        "v": 1,
        "audience": audience,
        "method": method,
        "target": target,
        "body": "sha256:" + hashlib.sha256(body).hexdigest(),
        "idempotency_key": idempotency_key,
    }
    return "sha256:" + hashlib.sha256(rfc8785.dumps(document)).hexdigest()
