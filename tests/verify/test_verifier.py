"""The verifier: every check, in its order; a refusal never burns the nonce; keys from
a mapping, a JWK set, a file or a fetch (cached, refetched at most once per interval)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from interlock.errors import (
    BadSignature,
    BindingMismatch,
    GrantError,
    GrantExpired,
    GrantInvalid,
    GrantReplayed,
    KeysUnavailable,
    UnknownKey,
    WrongAudience,
)
from interlock.verify import Verifier
from interlock.verify.nonces import MemoryNonceStore
from interlock.verify.tokens import b64url, public_jwk, sign_jws

from .support import AUDIENCE, INTERLOCK_KEY, JWKS, NOW, Clock, Req, grant_for, seeded_key

OTHER_KEY = seeded_key("another key")


def verifier(clock: Clock | None = None, **options: Any) -> Verifier:
    options.setdefault("audience", AUDIENCE)
    return Verifier(options.pop("keys", JWKS), clock=clock or Clock(), **options)


def test_a_good_grant_for_this_request_is_accepted_once() -> None:
    v = verifier()
    token = grant_for()
    verified = v.verify(token, **Req().kwargs())
    assert verified.kid == "k1"
    assert verified.binding == Req().binding()
    assert verified.claims.audience == AUDIENCE
    with pytest.raises(GrantReplayed):
        v.verify(token, **Req().kwargs())


# Each row: what is wrong, and the error (the first check that fails names it).
REFUSALS: list[tuple[str, dict[str, Any], Req, type[GrantError]]] = [
    ("wrong audience", {"audience": "bank"}, Req(), WrongAudience),
    ("expired", {"issued_at": NOW - 200, "expires_at": NOW - 100}, Req(), GrantExpired),
    ("not yet valid", {"issued_at": NOW + 100, "expires_at": NOW + 160}, Req(), GrantExpired),
    ("changed body", {}, Req(body=b'{"amount": 5000, "currency": "EUR"}'), BindingMismatch),
    ("changed query", {}, Req(target="/refunds?order=43"), BindingMismatch),
    ("changed method", {}, Req(method="PUT"), BindingMismatch),
    ("changed key", {}, Req(idempotency_key="refund-42-2"), BindingMismatch),
    ("no key", {}, Req(idempotency_key=None), BindingMismatch),
    ("intent only", {"binding": None}, Req(), BindingMismatch),
    ("unknown kid", {"kid": "k9"}, Req(), UnknownKey),
    ("another key under k1", {"key": OTHER_KEY}, Req(), BadSignature),
]


@pytest.mark.parametrize(
    ("changes", "request_", "error"), [r[1:] for r in REFUSALS], ids=[r[0] for r in REFUSALS]
)
def test_a_bad_grant_is_refused_and_its_nonce_is_not_burnt(
    changes: dict[str, Any], request_: Req, error: type[GrantError]
) -> None:
    clock = Clock()
    v = verifier(clock)
    token = grant_for(**changes)
    with pytest.raises(error) as refused:
        v.verify(token, **request_.kwargs())
    assert type(refused.value) is error
    assert isinstance(v.nonces, MemoryNonceStore) and len(v.nonces) == 0


def test_a_grant_refused_for_its_binding_still_serves_the_right_request() -> None:
    v = verifier()
    token = grant_for()
    with pytest.raises(BindingMismatch):
        v.verify(token, **Req(body=b"{}").kwargs())
    assert v.verify(token, **Req().kwargs()).claims.grant_id


def test_the_leeway_bounds_both_ends() -> None:
    clock = Clock(NOW + 60 + 29)  # 29 s past expiry: inside the 30 s leeway
    v = verifier(clock)
    v.verify(grant_for(), **Req().kwargs())
    clock.now = NOW + 60 + 30  # at expiry + leeway: refused
    with pytest.raises(GrantExpired):
        v.verify(grant_for(grant_id="g_late"), **Req().kwargs())
    clock.now = NOW - 30  # issued 30 s "in the future": inside the leeway
    v.verify(grant_for(grant_id="g_early"), **Req().kwargs())
    clock.now = NOW - 31
    with pytest.raises(GrantExpired):
        v.verify(grant_for(grant_id="g_earlier"), **Req().kwargs())


def test_an_intent_only_grant_passes_only_when_allowed() -> None:
    v = verifier(allow_intent_only=True)
    verified = v.verify(grant_for(binding=None), **Req(body=b"anything").kwargs())
    assert verified.binding is None and verified.claims.binding is None


def test_another_issuer_is_refused_when_the_verifier_names_one() -> None:
    with pytest.raises(GrantInvalid, match="issued by 'interlock', not 'other'"):
        verifier(issuer="other").verify(grant_for(), **Req().kwargs())
    assert verifier(issuer="interlock").verify(grant_for(), **Req().kwargs())


def test_the_profile_is_checked_before_any_key_is_looked_up() -> None:
    asked: list[int] = []

    def fetch() -> dict[str, Any]:
        asked.append(1)
        return JWKS

    header = {"alg": "none", "kid": "k1", "typ": "interlock-grant+jws"}
    token = b64url(json.dumps(header).encode()) + "." + grant_for().split(".")[1] + "."
    with pytest.raises(GrantInvalid, match="algorithm"):
        verifier(keys=fetch).verify(token, **Req().kwargs())
    assert asked == []


def test_a_receipt_is_not_a_grant() -> None:
    receipt = sign_jws({"v": 1}, INTERLOCK_KEY, kid="k1", typ="interlock-receipt+jws")
    with pytest.raises(GrantInvalid, match="type"):
        verifier().verify(receipt, **Req().kwargs())


def test_a_target_that_is_no_request_target_is_a_binding_mismatch() -> None:
    with pytest.raises(BindingMismatch, match="cannot be bound"):
        verifier().verify(grant_for(), **Req(target="refunds").kwargs())


# -- keys -------------------------------------------------------------------------------


def test_keys_from_a_mapping_a_jwk_set_and_a_file(tmp_path: Path) -> None:
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps(JWKS))
    for keys in ({"k1": INTERLOCK_KEY.public_key()}, JWKS, path, str(path)):
        assert verifier(keys=keys).verify(grant_for(), **Req().kwargs())


def test_a_mapping_of_something_else_than_keys_is_refused() -> None:
    with pytest.raises(TypeError, match="Ed25519PublicKey"):
        verifier(keys={"k1": "not a key"})


class Fetcher:
    def __init__(self, *documents: dict[str, Any] | Exception) -> None:
        self.documents = list(documents)
        self.calls = 0

    def __call__(self) -> dict[str, Any]:
        self.calls += 1
        document = self.documents[min(self.calls, len(self.documents)) - 1]
        if isinstance(document, Exception):
            raise document
        return document


def test_an_unknown_kid_refetches_at_most_once_per_interval() -> None:
    clock = Clock()
    rotated = {"keys": [*JWKS["keys"], public_jwk("k2", OTHER_KEY.public_key())]}
    fetch = Fetcher(JWKS, rotated)
    v = verifier(clock, keys=fetch, refetch_interval=30)
    v.verify(grant_for(), **Req().kwargs())
    assert fetch.calls == 1
    clock.now += 1  # a rotation right after the first fetch: too soon to refetch
    with pytest.raises(UnknownKey):
        v.verify(grant_for(key=OTHER_KEY, kid="k2"), **Req().kwargs())
    with pytest.raises(UnknownKey):
        v.verify(grant_for(key=OTHER_KEY, kid="k3"), **Req().kwargs())
    assert fetch.calls == 1
    clock.now += 30
    assert v.verify(grant_for(key=OTHER_KEY, kid="k2"), **Req().kwargs())
    assert fetch.calls == 2
    for kid in ("k3", "k4", "k5"):  # made-up kids do not turn into fetches
        with pytest.raises(UnknownKey):
            v.verify(grant_for(key=OTHER_KEY, kid=kid), **Req().kwargs())
    assert fetch.calls == 2


def test_a_retired_key_stops_verifying_once_the_set_is_older_than_max_age() -> None:
    clock = Clock()
    fetch = Fetcher(JWKS, {"keys": []})
    v = verifier(clock, keys=fetch, max_age=60)
    v.verify(grant_for(), **Req().kwargs())
    clock.now += 61
    with pytest.raises(UnknownKey):
        v.verify(grant_for(grant_id="g_2", expires_at=NOW + 600), **Req().kwargs())
    assert fetch.calls == 2


def test_a_set_that_cannot_be_fetched_fails_closed_and_keeps_the_last_good_one() -> None:
    clock = Clock()
    fetch = Fetcher(OSError("connection refused"))
    v = verifier(clock, keys=fetch)
    with pytest.raises(KeysUnavailable, match="connection refused"):
        v.verify(grant_for(), **Req().kwargs())
    fetch.documents, fetch.calls = [JWKS, OSError("down again")], 0
    clock.now += 31
    assert v.verify(grant_for(), **Req().kwargs())
    clock.now += 400  # stale, and the refetch fails: the last good set still verifies
    assert v.verify(grant_for(grant_id="g_2", expires_at=NOW + 900), **Req().kwargs())


def test_a_malformed_set_is_a_failed_fetch() -> None:
    with pytest.raises(KeysUnavailable, match="no 'keys' list"):
        verifier(keys=Fetcher({"not": "a set"})).verify(grant_for(), **Req().kwargs())


# -- async --------------------------------------------------------------------------------


async def test_averify_checks_the_same_and_consumes_once() -> None:
    v = verifier(keys=Fetcher(JWKS))
    token = grant_for()
    results = await asyncio.gather(
        *(v.averify(token, **Req().kwargs()) for _ in range(10)), return_exceptions=True
    )
    accepted = [r for r in results if not isinstance(r, BaseException)]
    assert len(accepted) == 1
    assert all(isinstance(r, GrantReplayed) for r in results if r not in accepted)
    with pytest.raises(WrongAudience):
        await v.averify(grant_for(audience="bank"), **Req().kwargs())
