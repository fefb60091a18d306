"""What the effect tests and their agent processes share: the policy, the action,
the budget read-out, the provider's grant check."""

from __future__ import annotations

from typing import Any

from interlock import Action, Context, Downstream
from interlock.store.sql import SqlStore

POLICY: dict[str, Any] = {
    "version": 1,
    "default": "deny",
    "budgets": [
        {
            "id": "refunds",
            "limit": 100,
            "unit": "USD",
            "scope": "tenant",
            "window": "day",
            "name": "refund",
            "default_estimate": 10,
        }
    ],
    "rules": [
        {"id": "refunds", "decision": "allow", "reason": "refunds are fine", "name": "refund"},
        {"id": "no-wipe", "decision": "deny", "reason": "never", "name": "wipe"},
    ],
}

REFUNDS = Downstream("shop", "refund", "POST /orders/{order}/refunds")
CONTEXT = Context(tenant="acme", agent="support-bot", downstream=REFUNDS)


def refund(order: int | str = 42, amount: int = 5, **more: Any) -> Action:
    return Action.tool("refund", {"order": order, "amount": amount, **more}, context=CONTEXT)


def spent(store: SqlStore) -> tuple[int, int]:
    """(spent, reserved) of the refunds budget, in units (0, 0 before any)."""
    rows = store.budget_rows(tenant="acme", budget_id="refunds")
    return (sum(r.spent for r in rows), sum(r.reserved for r in rows))
