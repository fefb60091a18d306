"""Interlock: a runtime interlock for AI agents.

Every tool call, model call and outbound effect passes one decision point before it
runs — allow, deny, require_approval, or undetermined (which fails closed).

Example::

    from interlock import Action, Guard

    guard = Guard.from_file("interlock.yaml")
    decision = guard.check(Action.tool("shell", {"command": "ls -la"}))
    print(decision.verdict, decision.reason)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from interlock._lazy import lazy_attributes
from interlock.errors import (
    ActionDenied,
    ActionUndetermined,
    ApprovalRequired,
    Blocked,
    InterlockError,
    PolicyError,
    StoreError,
)

if TYPE_CHECKING:
    from interlock.core.action import Action, Context, Downstream
    from interlock.core.decision import (
        ApprovalRef,
        Decision,
        ReservationRef,
        ShadowVerdict,
        Verdict,
    )
    from interlock.deciders.base import CancelToken, Decider
    from interlock.guard import Guard, raise_for
    from interlock.ledger.usage import Usage
    from interlock.policy.compiled import CompiledPolicy
    from interlock.policy.engine import evaluate
    from interlock.policy.loader import load_policy, load_policy_text

__version__ = "0.1.0"

__all__ = [
    "Action",
    "ActionDenied",
    "ActionUndetermined",
    "ApprovalRef",
    "ApprovalRequired",
    "Blocked",
    "CancelToken",
    "CompiledPolicy",
    "Context",
    "Decider",
    "Decision",
    "Downstream",
    "Guard",
    "InterlockError",
    "PolicyError",
    "ReservationRef",
    "ShadowVerdict",
    "StoreError",
    "Usage",
    "Verdict",
    "__version__",
    "evaluate",
    "load_policy",
    "load_policy_text",
    "raise_for",
]

# Where each public name lives. They are imported on first use (PEP 562), so that
# `import interlock` costs a few milliseconds and pulls in no policy schema, store or
# pydantic: see docs/adr/0014-a-fast-start.md. The errors are cheap and imported above,
# so that `except interlock.PolicyError` never triggers an import.
_LAZY: dict[str, str] = {
    "Action": "interlock.core.action",
    "Context": "interlock.core.action",
    "Downstream": "interlock.core.action",
    "ApprovalRef": "interlock.core.decision",
    "Decision": "interlock.core.decision",
    "ReservationRef": "interlock.core.decision",
    "ShadowVerdict": "interlock.core.decision",
    "Verdict": "interlock.core.decision",
    "CancelToken": "interlock.deciders.base",
    "Decider": "interlock.deciders.base",
    "Guard": "interlock.guard",
    "raise_for": "interlock.guard",
    "Usage": "interlock.ledger.usage",
    "CompiledPolicy": "interlock.policy.compiled",
    "evaluate": "interlock.policy.engine",
    "load_policy": "interlock.policy.loader",
    "load_policy_text": "interlock.policy.loader",
}


__getattr__, __dir__ = lazy_attributes(__name__, globals(), _LAZY)
