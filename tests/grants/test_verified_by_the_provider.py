"""The whole loop of a grant: a guard issues it bound to one HTTP request, the provider
checks it with nothing but the guard's published JWK set (``interlock.verify``), and the
grant is good for exactly that request, once — before and after a key rotation."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from interlock import Action, Context, Guard
from interlock.core.action import Downstream
from interlock.errors import BindingMismatch, GrantReplayed, UnknownKey, WrongAudience
from interlock.store import SqlStore
from interlock.store.grant_keys import rotate_key_ring
from interlock.verify import http_binding
from interlock.verify.nonces import MemoryNonceStore
from interlock.verify.verifier import Verifier

ALLOW_ALL: dict[str, Any] = {"version": 1, "default": "allow"}
BODY = b'{"order_id": 42, "amount": 250}'
KEY = "refund-42-v1"


def refund(key: str = KEY) -> Action:
    return Action.tool(
        "refund_order",
        {"order_id": 42, "amount": 250},
        target="shopify:order:42",
        context=Context(
            tenant="acme",
            agent="support-bot",
            downstream=Downstream("shopify", "refund", "POST /refunds"),
            idempotency_key=key,
        ),
    )


@pytest.fixture
def guard(store: SqlStore) -> Iterator[Guard]:
    with Guard(ALLOW_ALL, store=store, reap_interval=None) as opened:
        yield opened


def granted(guard: Guard, key: str = KEY) -> str:
    decision = guard.check(refund(key))
    binding = http_binding("POST", "/refunds", BODY, key, audience="shopify")
    return guard.issue_grant(decision, binding=binding).token


def test_the_provider_accepts_the_granted_request_once(guard: Guard) -> None:
    provider = Verifier(guard.grant_jwks(), audience="shopify", nonces=MemoryNonceStore())
    token = granted(guard)
    verified = provider.verify(
        token, method="POST", target="/refunds", body=BODY, idempotency_key=KEY
    )
    assert (verified.claims.tenant, verified.claims.agent) == ("acme", "support-bot")
    with pytest.raises(GrantReplayed):
        provider.verify(token, method="POST", target="/refunds", body=BODY, idempotency_key=KEY)


@pytest.mark.parametrize(
    ("method", "target", "body", "key"),
    [
        ("POST", "/refunds", b'{"order_id": 42, "amount": 2500}', KEY),  # a changed amount
        ("POST", "/refunds?order_id=43", BODY, KEY),  # another target
        ("PUT", "/refunds", BODY, KEY),
        ("POST", "/refunds", BODY, "refund-42-v2"),  # another retry identity
    ],
)
def test_any_other_request_is_not_covered_and_spends_nothing(
    guard: Guard, method: str, target: str, body: bytes, key: str
) -> None:
    provider = Verifier(guard.grant_jwks(), audience="shopify", nonces=MemoryNonceStore())
    token = granted(guard)
    with pytest.raises(BindingMismatch):
        provider.verify(token, method=method, target=target, body=body, idempotency_key=key)
    # the refusal burnt no nonce: the request the grant is for still goes through
    provider.verify(token, method="POST", target="/refunds", body=BODY, idempotency_key=KEY)


def test_another_downstream_refuses_the_grant(guard: Guard) -> None:
    bank = Verifier(guard.grant_jwks(), audience="bank", nonces=MemoryNonceStore())
    with pytest.raises(WrongAudience):
        bank.verify(
            granted(guard), method="POST", target="/refunds", body=BODY, idempotency_key=KEY
        )


def test_after_a_rotation_old_grants_verify_and_new_ones_need_the_new_set(
    guard: Guard, grant_key_ring: Path
) -> None:
    before = guard.grant_jwks()
    old = granted(guard)
    rotate_key_ring(grant_key_ring)
    after = guard.grant_jwks()
    assert {k["kid"] for k in before["keys"]} < {k["kid"] for k in after["keys"]}
    new = granted(guard, "refund-42-v2")
    # a provider with the set published before the rotation: the old grant verifies,
    # the new one is signed by a key it does not know
    stale = Verifier(before, audience="shopify", nonces=MemoryNonceStore())
    stale.verify(old, method="POST", target="/refunds", body=BODY, idempotency_key=KEY)
    with pytest.raises(UnknownKey):
        stale.verify(
            new, method="POST", target="/refunds", body=BODY, idempotency_key="refund-42-v2"
        )
    # with the set published now, both (the retired key verifies until its grants expire)
    fresh = Verifier(after, audience="shopify", nonces=MemoryNonceStore())
    fresh.verify(old, method="POST", target="/refunds", body=BODY, idempotency_key=KEY)
    fresh.verify(new, method="POST", target="/refunds", body=BODY, idempotency_key="refund-42-v2")
