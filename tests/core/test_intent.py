"""Intent hashes: the same call is the same intent; any changed argument is a new one."""

from __future__ import annotations

import pytest

from interlock import Action, Context, Downstream
from interlock.core.intent import canonical_intent, intent_hash

CTX = Context(tenant="acme", agent="support-bot", session_id="s-1", call_id="call-1")


def refund(**arguments: object) -> Action:
    return Action.tool("refund_order", {"order_id": 42, "amount": 250, **arguments}, context=CTX)


def test_key_order_does_not_change_the_intent() -> None:
    a = Action.tool("refund_order", {"order_id": 42, "amount": 250}, context=CTX)
    b = Action.tool("refund_order", {"amount": 250, "order_id": 42}, context=CTX)
    assert intent_hash(a) == intent_hash(b)
    assert intent_hash(a).startswith("sha256:") and len(intent_hash(a)) == 7 + 64


@pytest.mark.parametrize(
    "changed",
    [
        refund(amount=251),
        refund(note="x"),
        Action.tool("refund_order", {"order_id": 42, "amount": 250.5}, context=CTX),
        Action.tool("refund_orders", {"order_id": 42, "amount": 250}, context=CTX),
        Action.tool(
            "refund_order",
            {"order_id": 42, "amount": 250},
            context=Context(tenant="other", agent="support-bot", session_id="s-1"),
        ),
        Action.tool(
            "refund_order", {"order_id": 42, "amount": 250}, target="shop:order:42", context=CTX
        ),
        Action.tool(
            "refund_order",
            {"order_id": 42, "amount": 250},
            context=Context(
                tenant="acme",
                agent="support-bot",
                session_id="s-1",
                downstream=Downstream("shop", "refund"),
            ),
        ),
    ],
)
def test_any_change_is_a_new_intent(changed: Action) -> None:
    assert intent_hash(changed) != intent_hash(refund())


def test_the_framework_call_id_is_not_part_of_the_intent() -> None:
    retry = Action.tool(
        "refund_order",
        {"order_id": 42, "amount": 250},
        context=Context(tenant="acme", agent="support-bot", session_id="s-1", call_id="call-2"),
    )
    assert intent_hash(retry) == intent_hash(refund())


def test_the_canonical_form_is_rfc8785() -> None:
    text = canonical_intent(Action.tool("x", {"b": 1, "a": [1.5, "é"]})).decode()
    assert '"arguments":{"a":[1.5,"é"],"b":1}' in text


@pytest.mark.parametrize("bad", [{"n": float("nan")}, {"n": 2**80}, {"s": {1, 2}}])
def test_a_call_without_a_json_form_cannot_be_bound(bad: dict[str, object]) -> None:
    with pytest.raises((ValueError, TypeError)):
        canonical_intent(Action.tool("x", bad))
