"""The verifier: is this token a good grant for exactly this request, seen once?

:meth:`Verifier.verify` checks, in this order, and stops at the first failure:

1. **profile** — a compact JWS with the fixed header (``EdDSA``, a ``kid``, the grant
   ``typ``) — :class:`~interlock.errors.GrantInvalid`;
2. **key** — the ``kid`` is one of the verifier's keys (a fetched JWK set is fetched
   again once, rate limited) — :class:`~interlock.errors.UnknownKey`
   (:class:`~interlock.errors.KeysUnavailable` when no key set could be had);
3. **signature** — :class:`~interlock.errors.BadSignature`;
4. **claims** — every claim present and well formed (and the issuer, when the verifier
   names one) — :class:`~interlock.errors.GrantInvalid`;
5. **audience** — the grant is for this provider — :class:`~interlock.errors.WrongAudience`;
6. **time** — issued no later than now + leeway, expiring after now − leeway —
   :class:`~interlock.errors.GrantExpired`;
7. **binding** — the digest of the request that arrived (recomputed with
   :func:`~interlock.verify.binding.http_binding`) equals the grant's; a grant that
   binds no request is refused unless the verifier allows intent-only grants —
   :class:`~interlock.errors.BindingMismatch`;
8. **nonce**, last — the grant id is consumed in the nonce store, atomically; a second
   request with it is :class:`~interlock.errors.GrantReplayed`. Nothing refused before
   this step burns the nonce: a caller whose request was refused for its binding can
   still send the right request with the same grant.

Example::

    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from interlock.errors import GrantReplayed
    from interlock.verify import GrantClaims, Verifier, http_binding, sign_grant

    key = Ed25519PrivateKey.generate()
    binding = http_binding("POST", "/refunds", b'{"amount": 5}', "k-1", audience="shop")
    token = sign_grant(GrantClaims(
        grant_id="g_1", issuer="interlock", audience="shop", tenant="acme", agent="bot",
        intent_hash="sha256:" + "a" * 64, binding=binding,
        issued_at=1_700_000_000, expires_at=1_700_000_060,
    ), key, kid="k1")

    verifier = Verifier({"k1": key.public_key()}, audience="shop", clock=lambda: 1_700_000_010)
    request = dict(method="POST", target="/refunds", body=b'{"amount": 5}', idempotency_key="k-1")
    assert verifier.verify(token, **request).claims.grant_id == "g_1"
    try:
        verifier.verify(token, **request)
    except GrantReplayed as exc:
        assert exc.code == "grant_replayed"
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from interlock.errors import (
    BindingMismatch,
    GrantExpired,
    GrantInvalid,
    GrantReplayed,
    UnknownKey,
    WrongAudience,
)
from interlock.verify.binding import http_binding
from interlock.verify.keys import (
    DEFAULT_MAX_AGE,
    DEFAULT_REFETCH_INTERVAL,
    FetchedKeys,
    Keys,
    key_source,
)
from interlock.verify.nonces import MemoryNonceStore, NonceStore
from interlock.verify.tokens import GRANT_TYPE, GrantClaims, read_header, verify_jws

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

__all__ = ["DEFAULT_LEEWAY", "VerifiedGrant", "Verifier"]

DEFAULT_LEEWAY: Final = 30


@dataclass(frozen=True, slots=True)
class VerifiedGrant:
    """A grant that passed every check, its nonce now consumed. ``binding`` is the
    digest of the request it was verified against (``None`` for an intent-only grant
    accepted as such); ``verified_at`` the verifier's clock, in seconds."""

    claims: GrantClaims
    kid: str
    binding: str | None
    verified_at: float

    @property
    def grant_id(self) -> str:
        return self.claims.grant_id


class Verifier:
    """Verifies grant tokens for one provider (``audience``) — see the module.

    ``keys``: a mapping of key ids to Ed25519 public keys, a JWK set (dict), a path to
    a JWK set file, or a callable returning a JWK set (see
    :func:`~interlock.verify.keys.key_source`). ``nonces``: where consumed grant ids
    are kept (default: this process's memory — a provider with several workers needs a
    shared store). ``leeway``: the clock skew allowed, in seconds. ``issuer``: when
    set, grants from another issuer are refused. ``allow_intent_only``: accept grants
    that bind no request (only the action's intent). ``clock``: seconds since the
    epoch."""

    def __init__(
        self,
        keys: Keys,
        *,
        audience: str,
        nonces: NonceStore | None = None,
        leeway: int = DEFAULT_LEEWAY,
        issuer: str | None = None,
        allow_intent_only: bool = False,
        clock: Callable[[], float] = time.time,
        refetch_interval: float = DEFAULT_REFETCH_INTERVAL,
        max_age: float = DEFAULT_MAX_AGE,
    ) -> None:
        if not isinstance(audience, str) or not audience:
            raise ValueError("a verifier needs its own audience (the provider's name)")
        if not isinstance(leeway, int) or isinstance(leeway, bool) or not 0 <= leeway <= 600:
            raise ValueError(f"leeway must be whole seconds in 0..600, not {leeway!r}")
        self.audience = audience
        self.leeway = leeway
        self.issuer = issuer
        self.allow_intent_only = allow_intent_only
        self.nonces: NonceStore = nonces if nonces is not None else MemoryNonceStore(margin=leeway)
        self.clock = clock
        self._keys = key_source(
            keys, refetch_interval=refetch_interval, max_age=max_age, clock=clock
        )

    # -- the checks ----------------------------------------------------------------------

    def verify(
        self,
        token: str,
        *,
        method: str,
        target: str,
        body: bytes,
        idempotency_key: str | None,
    ) -> VerifiedGrant:
        """The grant ``token`` checked against the request that arrived (its method,
        target — path and query as sent —, body bytes and ``Idempotency-Key``), its
        nonce consumed. Raises a :class:`~interlock.errors.GrantError` naming why not."""
        kid = self._kid(token)
        claims, now, binding = self._check(
            token, kid, self._keys.key(kid), method, target, body, idempotency_key
        )
        keep_until = claims.expires_at + self.leeway
        if not self.nonces.consume(claims.grant_id, keep_until=keep_until, now=now):
            raise _replayed(claims)
        return VerifiedGrant(claims=claims, kid=kid, binding=binding, verified_at=now)

    async def averify(
        self,
        token: str,
        *,
        method: str,
        target: str,
        body: bytes,
        idempotency_key: str | None,
    ) -> VerifiedGrant:
        """:meth:`verify` for an event loop: a key fetch and the nonce store's write do
        not block it."""
        kid = self._kid(token)
        if not isinstance(self._keys, FetchedKeys):
            key = self._keys.key(kid)
        elif (key := self._keys.cached(kid)) is None:  # a fetch may follow: off the loop
            key = await asyncio.to_thread(self._keys.key, kid)
        claims, now, binding = self._check(token, kid, key, method, target, body, idempotency_key)
        keep_until = claims.expires_at + self.leeway
        if not await self.nonces.aconsume(claims.grant_id, keep_until=keep_until, now=now):
            raise _replayed(claims)
        return VerifiedGrant(claims=claims, kid=kid, binding=binding, verified_at=now)

    def _kid(self, token: str) -> str:
        kid: str = read_header(token, typ=GRANT_TYPE)["kid"]  # 1. the profile
        return kid

    def _check(
        self,
        token: str,
        kid: str,
        key: Ed25519PublicKey | None,
        method: str,
        target: str,
        body: bytes,
        idempotency_key: str | None,
    ) -> tuple[GrantClaims, float, str | None]:
        if key is None:  # 2. the key
            raise UnknownKey(f"the grant is signed with key {kid!r}, which is not a known key")
        _, payload = verify_jws(token, {kid: key}, typ=GRANT_TYPE)  # 3. the signature
        claims = GrantClaims.from_payload(payload)  # 4. the claims
        if self.issuer is not None and claims.issuer != self.issuer:
            raise GrantInvalid(
                f"the grant {claims.grant_id!r} is issued by {claims.issuer!r}, not {self.issuer!r}"
            )
        if claims.audience != self.audience:  # 5. the audience
            raise WrongAudience(
                f"the grant {claims.grant_id!r} is for {claims.audience!r}, not {self.audience!r}"
            )
        now = self.clock()  # 6. the time
        if now >= claims.expires_at + self.leeway:
            raise GrantExpired(
                f"the grant {claims.grant_id!r} expired at {claims.expires_at} "
                f"(now {int(now)}, leeway {self.leeway} s)"
            )
        if claims.issued_at > now + self.leeway:
            raise GrantExpired(
                f"the grant {claims.grant_id!r} is not valid before {claims.issued_at} "
                f"(now {int(now)}, leeway {self.leeway} s)"
            )
        return claims, now, self._binding(claims, method, target, body, idempotency_key)

    def _binding(  # 7. the binding
        self,
        claims: GrantClaims,
        method: str,
        target: str,
        body: bytes,
        idempotency_key: str | None,
    ) -> str | None:
        if claims.binding is None:
            if self.allow_intent_only:
                return None
            raise BindingMismatch(
                f"the grant {claims.grant_id!r} binds no request (intent only), and this "
                "verifier accepts only grants bound to the request"
            )
        try:
            arrived = http_binding(method, target, body, idempotency_key, audience=self.audience)
        except GrantInvalid as exc:
            raise BindingMismatch(f"the request cannot be bound: {exc}") from exc
        if arrived != claims.binding:
            raise BindingMismatch(
                f"the request is not the one the grant {claims.grant_id!r} was issued for "
                f"(its method, target, body or Idempotency-Key differ: binding {arrived}, "
                f"granted {claims.binding})"
            )
        return arrived


def _replayed(claims: GrantClaims) -> GrantReplayed:
    return GrantReplayed(
        f"the grant {claims.grant_id!r} was used before (its nonce is consumed): a grant "
        "is good for one request"
    )
