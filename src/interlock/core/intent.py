"""Intents: the canonical form of an action and its trusted context, and its hash.

Approvals and grants bind to ``intent_hash``: SHA-256 over the RFC 8785 (JCS)
canonical JSON of the action (kind, name, target, arguments, capabilities) and the
trusted context (tenant, agent, session, run, downstream, idempotency key). The
framework's ``call_id`` is left out on purpose: it names the model's call, and a
retry of the same call by the runtime must present the same intent.

Example::

    from interlock import Action
    from interlock.core.intent import intent_hash

    a = intent_hash(Action.tool("refund_order", {"order_id": 42, "amount": 250}))
    b = intent_hash(Action.tool("refund_order", {"amount": 250, "order_id": 42}))
    assert a == b                      # key order does not matter
"""

from __future__ import annotations

import hashlib
from typing import Any

import rfc8785

from interlock.core.action import Action

__all__ = ["canonical_intent", "intent_hash"]


def canonical_intent(action: Action) -> bytes:
    """The RFC 8785 canonical JSON of the action and its trusted context.

    Raises ``TypeError``/``ValueError`` when an argument has no JSON form (a set, NaN,
    an integer beyond the I-JSON range): such a call cannot be bound to an approval.
    """
    context = action.context
    downstream = context.downstream
    document: dict[str, Any] = {
        "v": 1,
        "kind": action.kind,
        "name": action.name,
        "target": action.target,
        "arguments": dict(action.arguments),
        "capabilities": sorted(action.capabilities),
        "context": {
            "tenant": context.tenant,
            "agent": context.agent,
            "session_id": context.session_id,
            "run_id": context.run_id,
            "idempotency_key": context.idempotency_key,
            "downstream": None
            if downstream is None
            else {
                "system": downstream.system,
                "operation": downstream.operation,
                "endpoint": downstream.endpoint,
            },
        },
    }
    try:
        return rfc8785.dumps(document)
    except rfc8785.CanonicalizationError as exc:
        raise ValueError(f"the call has no canonical JSON form: {exc}") from exc


def intent_hash(action: Action) -> str:
    """``sha256:<hex>`` of :func:`canonical_intent`."""
    return "sha256:" + hashlib.sha256(canonical_intent(action)).hexdigest()
