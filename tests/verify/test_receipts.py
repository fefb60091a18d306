"""Receipts: what the provider signs, what the caller reads and checks, and what is
refused — a grant presented as a receipt, another key, another answer."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from interlock.errors import ReceiptError
from interlock.verify.receipts import (
    ReceiptClaims,
    body_digest,
    check_receipt,
    read_receipt,
    sign_receipt,
)
from interlock.verify.tokens import GrantClaims, b64url, sign_jws

from .support import INTERLOCK_KEY, PROVIDER_JWKS, PROVIDER_KEY, Req

GRANT = GrantClaims(
    grant_id="g_1",
    issuer="interlock",
    audience="shop",
    tenant="acme",
    agent="bot",
    intent_hash="sha256:" + "a" * 64,
    binding=Req().binding(),
    issued_at=1_700_000_000,
    expires_at=1_700_000_060,
)
BODY = b'{"refund": "r_1"}'
RECEIPT = ReceiptClaims(
    grant_id="g_1",
    issuer="shop",
    binding=GRANT.binding,
    intent_hash=GRANT.intent_hash,
    status=201,
    body_digest=body_digest(BODY),
    issued_at=1_700_000_001,
)
KEYS = {"shop-1": PROVIDER_KEY.public_key()}


def test_a_receipt_reads_back_under_a_mapping_or_a_jwk_set() -> None:
    token = sign_receipt(RECEIPT, PROVIDER_KEY, kid="shop-1")
    assert read_receipt(token, KEYS) == RECEIPT
    assert read_receipt(token, PROVIDER_JWKS) == RECEIPT
    assert check_receipt(token, KEYS, grant=GRANT, status=201, body=BODY) == RECEIPT


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"grant_id": "g_2"}, "grant_id"),
        ({"issuer": "bank"}, "issuer"),
        ({"binding": "sha256:" + "f" * 64}, "binding"),
        ({"intent_hash": "sha256:" + "e" * 64}, "intent_hash"),
        ({"status": 200}, "status"),
        ({"body_digest": body_digest(b"{}")}, "body_digest"),
    ],
)
def test_a_receipt_for_another_answer_names_the_claim_that_differs(
    change: dict[str, Any], field: str
) -> None:
    token = sign_receipt(replace(RECEIPT, **change), PROVIDER_KEY, kid="shop-1")
    with pytest.raises(ReceiptError, match=f"its {field} is") as refused:
        check_receipt(token, KEYS, grant=GRANT, status=201, body=BODY)
    assert refused.value.status == 201


def test_a_receipt_of_an_intent_only_grant_repeats_no_binding() -> None:
    token = sign_receipt(replace(RECEIPT, binding=None), PROVIDER_KEY, kid="shop-1")
    grant = replace(GRANT, binding=None)
    assert check_receipt(token, KEYS, grant=grant, status=201, body=BODY).binding is None


@pytest.mark.parametrize(
    ("token", "message"),
    [
        (sign_receipt(RECEIPT, INTERLOCK_KEY, kid="shop-1"), "signature does not verify"),
        (sign_receipt(RECEIPT, PROVIDER_KEY, kid="shop-2"), "not a known key"),
        (
            sign_jws(RECEIPT.to_payload(), PROVIDER_KEY, kid="shop-1", typ="interlock-grant+jws"),
            "type",
        ),
        (
            sign_jws(
                RECEIPT.to_payload() | {"extra": 1},
                PROVIDER_KEY,
                kid="shop-1",
                typ="interlock-receipt+jws",
            ),
            "unknown claims",
        ),
        (
            sign_jws(
                RECEIPT.to_payload() | {"status": 99},
                PROVIDER_KEY,
                kid="shop-1",
                typ="interlock-receipt+jws",
            ),
            "HTTP status",
        ),
        ("not.a.receipt", "does not verify"),
    ],
    ids=["other key", "unknown kid", "a grant", "extra claim", "bad status", "garbage"],
)
def test_a_receipt_that_does_not_verify_is_refused(token: str, message: str) -> None:
    with pytest.raises(ReceiptError, match=message):
        read_receipt(token, KEYS)


def test_a_tampered_receipt_is_refused() -> None:
    head, _, signature = sign_receipt(RECEIPT, PROVIDER_KEY, kid="shop-1").split(".")
    payload = b64url(json.dumps(RECEIPT.to_payload() | {"status": 200}).encode())
    with pytest.raises(ReceiptError, match="signature"):
        read_receipt(f"{head}.{payload}.{signature}", KEYS)


def test_nothing_unsigned_is_signed() -> None:
    with pytest.raises(ReceiptError):
        sign_receipt(replace(RECEIPT, body_digest="md5:00"), PROVIDER_KEY, kid="shop-1")
