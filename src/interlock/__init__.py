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

from interlock.core.action import Action, Context, Downstream
from interlock.core.decision import (
    ApprovalRef,
    Decision,
    ReservationRef,
    ShadowVerdict,
    Verdict,
)
from interlock.deciders.base import CancelToken, Decider
from interlock.errors import (
    ActionDenied,
    ActionUndetermined,
    ApprovalRequired,
    Blocked,
    InterlockError,
    PolicyError,
    StoreError,
)
from interlock.guard import Guard, raise_for
from interlock.ledger.usage import Usage
from interlock.policy import CompiledPolicy, evaluate, load_policy, load_policy_text

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
