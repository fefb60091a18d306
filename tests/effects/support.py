"""What the effect tests and their agent processes share: the policy, the action,
the budget read-out, the provider's grant check."""

from __future__ import annotations

from typing import Any

from interlock import Action, Context, Downstream, Guard
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


def grant_checker(guard: Guard, audience: str = "shop") -> Any:
    """What the provider checks of a grant: signed by the guard's keys, for this
    audience, for exactly this request (binding), not seen before."""
    from interlock.verify.binding import http_binding
    from interlock.verify.tokens import keys_from_jwks, read_grant

    seen: set[str] = set()

    def check(
        grant: str | None, method: str, target: str, body: bytes, key: str | None
    ) -> str | None:
        if not grant:
            return "no grant"
        try:
            claims = read_grant(grant, keys_from_jwks(guard.grant_jwks()))
        except Exception as exc:
            return f"invalid: {exc}"
        if claims.audience != audience:
            return "wrong audience"
        if claims.binding != http_binding(method, target, body, key, audience=audience):
            return "binding mismatch"
        if claims.grant_id in seen:
            return "replayed"
        seen.add(claims.grant_id)
        return None

    return check
