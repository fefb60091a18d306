"""Writes the grant verification vectors, conformance/grants/*.json (format: docs/verify.md).

Deterministic: the keys come from fixed seeds, Ed25519 signatures are deterministic
(RFC 8032) and every payload is RFC 8785 JSON, so running this again writes the same
bytes (tests/verify/test_conformance.py checks that the files in the repository are
what this script writes). Run it after changing a vector:

    python conformance/generate_grants.py
"""

from __future__ import annotations

import base64
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from interlock.verify.binding import http_binding
from interlock.verify.tokens import GrantClaims, b64url, public_jwk, sign_grant, sign_jws

HERE = Path(__file__).resolve().parent / "grants"
NOW = 1_767_225_600  # 2026-01-01T00:00:00Z
AUDIENCE = "shop"
LEEWAY = 30


def seeded(label: str) -> Ed25519PrivateKey:
    """The private key whose 32-byte seed is SHA-256(label)."""
    return Ed25519PrivateKey.from_private_bytes(hashlib.sha256(label.encode()).digest())


CURRENT = seeded("interlock conformance key k1")
RETIRED = seeded("interlock conformance key k0 (retired)")
STRANGER = seeded("a key nobody published")
JWKS = {"keys": [public_jwk("k1", CURRENT.public_key())]}

REQUEST: dict[str, Any] = {
    "method": "POST",
    "target": "/refunds?order=42&note=late",
    "body": b'{"amount": 500, "currency": "EUR"}',
    "idempotency_key": "refund-42-1",
}


def claims(name: str, **changes: Any) -> GrantClaims:
    request = {**REQUEST, **changes.pop("request", {})}
    audience = changes.get("audience", AUDIENCE)
    base = GrantClaims(
        grant_id=f"g_{name}",
        issuer="interlock",
        audience=audience,
        tenant="acme",
        agent="support-bot",
        intent_hash="sha256:" + hashlib.sha256(b"intent " + name.encode()).hexdigest(),
        binding=http_binding(
            request["method"],
            request["target"],
            request["body"],
            request["idempotency_key"],
            audience=audience,
        ),
        issued_at=NOW - 10,
        expires_at=NOW + 50,
    )
    fields = {**base.as_dict(), **changes}
    return GrantClaims(**fields)


def token(name: str, key: Ed25519PrivateKey = CURRENT, kid: str = "k1", **changes: Any) -> str:
    return sign_grant(claims(name, **changes), key, kid=kid)


def refuse(code: str, status: int) -> dict[str, Any]:
    return {"result": "refuse", "code": code, "status": status}


def accept(name: str, **changes: Any) -> dict[str, Any]:
    granted = claims(name, **changes)
    return {
        "result": "accept",
        "grant_id": granted.grant_id,
        "kid": "k1",
        "binding": granted.binding,
        "claims": granted.to_payload(),
    }


def _flip_last(text: str) -> str:
    return text[:-2] + ("A" if text[-2] != "A" else "B") + text[-1]


def _tampered_payload() -> str:
    head, _, signature = token("tampered_payload").split(".")
    payload = claims("tampered_payload").to_payload() | {"aud": "bank"}
    return f"{head}.{b64url(json.dumps(payload, sort_keys=True).encode())}.{signature}"


def _alg_none() -> str:
    header = b64url(json.dumps({"alg": "none", "kid": "k1", "typ": "interlock-grant+jws"}).encode())
    payload = b64url(json.dumps(claims("alg_none").to_payload(), sort_keys=True).encode())
    return f"{header}.{payload}."


def vectors() -> dict[str, dict[str, Any]]:
    """Every vector by name: (description, token, request changes, state, expected)."""
    rows: list[tuple[str, str, str, dict[str, Any], dict[str, Any], dict[str, Any]]] = [
        # name, description, token, request changes, verifier changes, expected
        ("valid", "A grant for exactly this request, in time, never used.",
         token("valid"), {}, {}, accept("valid")),
        ("valid_within_leeway", "Expired 20 s ago: inside the 30 s leeway, accepted.",
         token("valid_within_leeway", issued_at=NOW - 80, expires_at=NOW - 20), {}, {},
         accept("valid_within_leeway", issued_at=NOW - 80, expires_at=NOW - 20)),
        ("tampered_payload", "The payload's audience changed after signing.",
         _tampered_payload(), {}, {}, refuse("bad_signature", 401)),
        ("tampered_signature", "One character of the signature changed.",
         _flip_last(token("tampered_signature")), {}, {}, refuse("bad_signature", 401)),
        ("expired", "Expired 31 s ago: past the 30 s leeway.",
         token("expired", issued_at=NOW - 91, expires_at=NOW - 31), {}, {},
         refuse("grant_expired", 401)),
        ("not_yet_valid", "Issued 31 s in the verifier's future: past the leeway.",
         token("not_yet_valid", issued_at=NOW + 31, expires_at=NOW + 91), {}, {},
         refuse("grant_expired", 401)),
        ("replayed", "Its grant id was consumed by an earlier request.",
         token("replayed"), {}, {"consumed": ["g_replayed"]}, refuse("grant_replayed", 409)),
        ("wrong_audience", "Issued for another provider (bank), bound to the same request.",
         token("wrong_audience", audience="bank"), {}, {}, refuse("wrong_audience", 403)),
        ("unknown_key", "Signed by a key whose id the JWK set does not list.",
         token("unknown_key", key=STRANGER, kid="k9"), {}, {}, refuse("unknown_key", 401)),
        ("retired_key", "Signed by the previous key k0, retired: absent from the JWK set.",
         token("retired_key", key=RETIRED, kid="k0"), {}, {}, refuse("unknown_key", 401)),
        ("other_key_same_kid", "Signed by another key under the published key's id.",
         token("other_key_same_kid", key=STRANGER), {}, {}, refuse("bad_signature", 401)),
        ("wrong_binding", "The request's body differs from the one granted (amount 5000).",
         token("wrong_binding"), {"body": b'{"amount": 5000, "currency": "EUR"}'}, {},
         refuse("binding_mismatch", 403)),
        ("wrong_binding_query_order", "The same query parameters in another order.",
         token("wrong_binding_query_order"), {"target": "/refunds?note=late&order=42"}, {},
         refuse("binding_mismatch", 403)),
        ("wrong_binding_idempotency_key", "Another Idempotency-Key than the one granted.",
         token("wrong_binding_idempotency_key"), {"idempotency_key": "refund-42-2"}, {},
         refuse("binding_mismatch", 403)),
        ("intent_only_refused", "A grant that binds no request, to a verifier that needs one.",
         token("intent_only_refused", binding=None), {}, {}, refuse("binding_mismatch", 403)),
        ("intent_only_allowed", "A grant that binds no request, allowed explicitly.",
         token("intent_only_allowed", binding=None), {}, {"allow_intent_only": True},
         accept("intent_only_allowed", binding=None)),
        ("alg_none", "An unsigned token (alg none).", _alg_none(), {}, {},
         refuse("grant_invalid", 401)),
        ("wrong_typ", "A correctly signed receipt presented as a grant (typ).",
         sign_jws(claims("wrong_typ").to_payload(), CURRENT, kid="k1",
                  typ="interlock-receipt+jws"), {}, {}, refuse("grant_invalid", 401)),
        ("malformed", "Not a compact JWS (two parts).", "eyJhbGciOiJFZERTQSJ9.e30", {}, {},
         refuse("grant_invalid", 401)),
        ("malformed_claims", "Signed, but the claims lack 'exp'.",
         sign_jws({k: v for k, v in claims("malformed_claims").to_payload().items()
                   if k != "exp"}, CURRENT, kid="k1", typ="interlock-grant+jws"), {}, {},
         refuse("grant_invalid", 401)),
    ]  # fmt: skip
    out: dict[str, dict[str, Any]] = {}
    for name, description, grant, request_changes, state, expected in rows:
        request = {**REQUEST, **request_changes}
        out[name] = {
            "version": 1,
            "name": name,
            "description": description,
            "jwks": JWKS,
            "verifier": {
                "audience": AUDIENCE,
                "leeway": LEEWAY,
                "now": NOW,
                "allow_intent_only": state.get("allow_intent_only", False),
            },
            "consumed": state.get("consumed", []),
            "request": {
                "method": request["method"],
                "target": request["target"],
                "body_base64": base64.b64encode(request["body"]).decode("ascii"),
                "idempotency_key": request["idempotency_key"],
            },
            "token": grant,
            "expected": expected,
        }
    return out


def render(vector: dict[str, Any]) -> str:
    return json.dumps(vector, indent=2, sort_keys=True) + "\n"


def main(directory: Path = HERE) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name, vector in vectors().items():
        (directory / f"{name}.json").write_text(render(vector))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)
