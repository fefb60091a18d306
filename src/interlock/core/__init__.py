"""The core model: actions, contexts, decisions, events and redaction."""

from __future__ import annotations

from interlock.core.action import Action, Context, Downstream
from interlock.core.decision import ApprovalRef, Decision, ShadowVerdict, Verdict

__all__ = ["Action", "ApprovalRef", "Context", "Decision", "Downstream", "ShadowVerdict", "Verdict"]
