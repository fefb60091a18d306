"""Grant tokens: the wire form of a grant, signed with Ed25519, and its public keys.

A grant token is a JWS in compact serialisation (RFC 7515) with one fixed profile, so
that any JOSE library can read it and no verifier has an algorithm to choose:

- protected header ``{"alg": "EdDSA", "kid": <key id>, "typ": "interlock-grant+jws"}``
  (RFC 8037); any other ``alg``, a missing ``kid`` or another ``typ`` is refused;
- payload: the claims of :class:`GrantClaims` as a JSON object, canonical (RFC 8785);
- signature: Ed25519 over ``base64url(header) + "." + base64url(payload)``.

Public keys travel as a JWK set (RFC 7517/8037: ``kty`` ``OKP``, ``crv`` ``Ed25519``,
``x``, ``kid``, ``use`` ``sig``, ``alg`` ``EdDSA``).

Signing and reading a token is all this module does: whether a grant is *good for this
request* (its audience, its expiry, its binding, a replay) is the verifier's
(:mod:`interlock.verify`), and issuing and claiming one is the authority's.

Example::

    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from interlock.verify.tokens import GrantClaims, public_jwk, read_grant, sign_grant

    key = Ed25519PrivateKey.generate()
    claims = GrantClaims(
        grant_id="g_1", issuer="interlock", audience="shopify", tenant="acme",
        agent="support-bot", intent_hash="sha256:" + "0" * 64, binding=None,
        issued_at=1_700_000_000, expires_at=1_700_000_060,
    )
    token = sign_grant(claims, key, kid="k1")
    assert read_grant(token, {"k1": key.public_key()}) == claims
    assert public_jwk("k1", key.public_key())["crv"] == "Ed25519"
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Final

import rfc8785

from interlock.errors import GrantInvalid

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
        Ed25519PublicKey,
    )

__all__ = [
    "GRANT_TYPE",
    "GrantClaims",
    "b64url",
    "b64url_decode",
    "keys_from_jwks",
    "public_jwk",
    "read_grant",
    "read_header",
    "sign_grant",
    "sign_jws",
    "verify_jws",
]

GRANT_TYPE: Final = "interlock-grant+jws"
_ALG: Final = "EdDSA"
_DIGEST: Final = re.compile(r"sha256:[0-9a-f]{64}")
_MAX_TOKEN: Final = 8192


def b64url(data: bytes) -> str:
    """base64url without padding (RFC 7515 §2)."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_decode(text: str, *, what: str) -> bytes:
    """The bytes of unpadded base64url ``text``; :class:`GrantInvalid` naming ``what``."""
    if not re.fullmatch(r"[A-Za-z0-9_-]*", text) or len(text) % 4 == 1:
        raise GrantInvalid(f"the {what} is not base64url")
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError) as exc:  # pragma: no cover - the regex guards it
        raise GrantInvalid(f"the {what} is not base64url") from exc


@dataclass(frozen=True, slots=True)
class GrantClaims:
    """What a grant says. ``grant_id`` is also its nonce (JWT ``jti``): a verifier
    refuses a second request carrying it. ``binding`` is the digest of the exact request
    the grant is for (an effect adapter's ``prepare`` computes it; ``None`` when the
    grant binds the intent only). Times are whole seconds since the epoch."""

    grant_id: str
    issuer: str
    audience: str
    tenant: str
    agent: str | None
    intent_hash: str
    binding: str | None
    issued_at: int
    expires_at: int

    def to_payload(self) -> dict[str, Any]:
        """The JSON payload (JWT claim names where one exists)."""
        return {
            "v": 1,
            "jti": self.grant_id,
            "iss": self.issuer,
            "aud": self.audience,
            "tenant": self.tenant,
            "sub": self.agent,
            "intent": self.intent_hash,
            "bind": self.binding,
            "iat": self.issued_at,
            "exp": self.expires_at,
        }

    @classmethod
    def from_payload(cls, payload: object) -> GrantClaims:
        """Claims from a decoded payload, every field checked; :class:`GrantInvalid`
        naming the first field that is missing or malformed."""
        if not isinstance(payload, dict):
            raise GrantInvalid("the grant's payload is not a JSON object")
        if payload.get("v") != 1:
            raise GrantInvalid(f"the grant's version {payload.get('v')!r} is not 1")
        expected = {"v", "jti", "iss", "aud", "tenant", "sub", "intent", "bind", "iat", "exp"}
        if unknown := sorted(set(payload) - expected):
            raise GrantInvalid(f"the grant carries unknown claims: {', '.join(unknown)}")
        strings = {"jti": False, "iss": False, "aud": False, "tenant": False, "sub": True}
        for name, nullable in strings.items():
            value = payload.get(name)
            if not (isinstance(value, str) and value) and not (nullable and value is None):
                raise GrantInvalid(f"the grant's {name!r} claim is missing or not a string")
        for name, nullable in (("intent", False), ("bind", True)):
            value = payload.get(name)
            if value is None and nullable:
                continue
            if not (isinstance(value, str) and _DIGEST.fullmatch(value)):
                raise GrantInvalid(f"the grant's {name!r} claim is not a sha256: digest")
        for name in ("iat", "exp"):
            value = payload.get(name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise GrantInvalid(f"the grant's {name!r} claim is not a time in seconds")
        if payload["exp"] <= payload["iat"]:
            raise GrantInvalid("the grant expires before it is issued")
        return cls(
            grant_id=payload["jti"],
            issuer=payload["iss"],
            audience=payload["aud"],
            tenant=payload["tenant"],
            agent=payload["sub"],
            intent_hash=payload["intent"],
            binding=payload["bind"],
            issued_at=payload["iat"],
            expires_at=payload["exp"],
        )

    def as_dict(self) -> dict[str, Any]:
        """The claims under their Python names (for records and JSON answers)."""
        return asdict(self)


def sign_jws(payload: Mapping[str, Any], key: Ed25519PrivateKey, *, kid: str, typ: str) -> str:
    """A compact JWS of ``payload`` (RFC 8785 JSON) signed with ``key``."""
    header = {"alg": _ALG, "kid": kid, "typ": typ}
    signing_input = b64url(rfc8785.dumps(header)) + "." + b64url(rfc8785.dumps(dict(payload)))
    signature = key.sign(signing_input.encode("ascii"))
    return signing_input + "." + b64url(signature)


def read_header(token: str, *, typ: str) -> dict[str, Any]:
    """The protected header of a compact JWS, checked against the profile (``EdDSA``, a
    ``kid``, this ``typ``) — before any key is looked up. Not a verification."""
    if not isinstance(token, str) or len(token) > _MAX_TOKEN:
        raise GrantInvalid("the token is not a string of at most 8 KiB")
    parts = token.split(".")
    if len(parts) != 3:
        raise GrantInvalid("the token is not a compact JWS (three dot-separated parts)")
    try:
        header = json.loads(b64url_decode(parts[0], what="token's header"))
    except ValueError as exc:
        raise GrantInvalid("the token's header is not JSON") from exc
    if not isinstance(header, dict):
        raise GrantInvalid("the token's header is not a JSON object")
    if header.get("alg") != _ALG:
        raise GrantInvalid(f"the token's algorithm {header.get('alg')!r} is not EdDSA")
    if header.get("typ") != typ:
        raise GrantInvalid(f"the token's type {header.get('typ')!r} is not {typ!r}")
    if not isinstance(header.get("kid"), str) or not header["kid"]:
        raise GrantInvalid("the token names no key (kid)")
    if set(header) - {"alg", "kid", "typ"}:
        raise GrantInvalid("the token's header carries unknown parameters (crit, jwk, ...)")
    return header


def verify_jws(
    token: str, keys: Mapping[str, Ed25519PublicKey], *, typ: str
) -> tuple[str, dict[str, Any]]:
    """``(kid, payload)`` of a compact JWS whose signature verifies under the key its
    ``kid`` names in ``keys``. Raises :class:`GrantInvalid` (``UnknownKey`` for a key
    not in ``keys``, ``BadSignature`` for a signature that does not verify)."""
    from cryptography.exceptions import InvalidSignature

    from interlock.errors import BadSignature, UnknownKey

    header = read_header(token, typ=typ)
    kid = header["kid"]
    key = keys.get(kid)
    if key is None:
        raise UnknownKey(f"the token is signed with key {kid!r}, which is not a known key")
    head, body, signature = token.split(".")
    try:
        key.verify(b64url_decode(signature, what="token's signature"), f"{head}.{body}".encode())
    except InvalidSignature as exc:
        raise BadSignature(f"the token's signature does not verify under key {kid!r}") from exc
    try:
        payload = json.loads(b64url_decode(body, what="token's payload"))
    except ValueError as exc:
        raise GrantInvalid("the token's payload is not JSON") from exc
    return kid, payload


def sign_grant(claims: GrantClaims, key: Ed25519PrivateKey, *, kid: str) -> str:
    """The grant token of ``claims``, signed with ``key`` under the id ``kid``."""
    GrantClaims.from_payload(claims.to_payload())  # never sign what no verifier reads
    return sign_jws(claims.to_payload(), key, kid=kid, typ=GRANT_TYPE)


def read_grant(token: str, keys: Mapping[str, Ed25519PublicKey]) -> GrantClaims:
    """The claims of a grant token whose signature verifies under one of ``keys``.
    Checks the signature and the claims' form only: not the time, the audience, the
    binding or a replay (see :mod:`interlock.verify`)."""
    _, payload = verify_jws(token, keys, typ=GRANT_TYPE)
    return GrantClaims.from_payload(payload)


def public_jwk(kid: str, key: Ed25519PublicKey) -> dict[str, str]:
    """The JWK (RFC 8037) of an Ed25519 public key."""
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    raw = key.public_bytes(Encoding.Raw, PublicFormat.Raw)
    return {"kty": "OKP", "crv": "Ed25519", "x": b64url(raw), "kid": kid, "use": "sig", "alg": _ALG}


def keys_from_jwks(document: Mapping[str, Any]) -> dict[str, Ed25519PublicKey]:
    """The Ed25519 signing keys of a JWK set, by ``kid``. Keys of another type or use
    are skipped; a malformed Ed25519 key or a repeated ``kid`` is :class:`GrantInvalid`."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    entries = document.get("keys")
    if not isinstance(entries, list):
        raise GrantInvalid("the JWK set has no 'keys' list")
    keys: dict[str, Ed25519PublicKey] = {}
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict) or entry.get("kty") != "OKP":
            continue
        if entry.get("crv") != "Ed25519" or entry.get("use", "sig") != "sig":
            continue
        kid, x = entry.get("kid"), entry.get("x")
        if not isinstance(kid, str) or not kid or not isinstance(x, str):
            raise GrantInvalid(f"the JWK set's key {index} has no kid or no x")
        if kid in keys:
            raise GrantInvalid(f"the JWK set names key {kid!r} twice")
        raw = b64url_decode(x, what=f"JWK set's key {kid!r}")
        if len(raw) != 32:
            raise GrantInvalid(f"the JWK set's key {kid!r} is not 32 bytes")
        keys[kid] = Ed25519PublicKey.from_public_bytes(raw)
    return keys
