"""The error a refused decision raises: :func:`raise_for`, shared by the guard, its model
calls (:mod:`interlock.ledger.llm_call`) and the adapters.

Example::

    >>> from interlock.core.decision import Decision, Verdict
    >>> raise_for(Decision(Verdict.ALLOW, "allowed"))
    >>> raise_for(Decision(Verdict.DENY, "no shell"))
    Traceback (most recent call last):
    ...
    interlock.errors.ActionDenied: Interlock denied the call: no shell
"""

from __future__ import annotations

from interlock.core.action import Action
from interlock.core.decision import Decision, Verdict
from interlock.core.redaction import Redactor
from interlock.errors import ActionDenied, ActionUndetermined, ApprovalRequired, Blocked

__all__ = ["raise_for"]


def raise_for(decision: Decision, action: Action | None = None) -> None:
    """Raise the error for a non-allow decision; return quietly on allow."""
    verdict = decision.verdict
    if verdict is Verdict.ALLOW:
        return
    what = _what(action)
    redactor = _REDACTOR
    reason = redactor.redact(decision.reason)
    if verdict is Verdict.DENY:
        if action is not None and action.kind == "llm" and not decision.rule_ids:
            # The policy's default refused a model call: the usual cause is a policy
            # written for tools only, meeting a guard that also checks model calls.
            reason += "; no rule allows this model: add one with kind: llm"
        raise ActionDenied(f"Interlock denied {what}: {reason}", decision=decision)
    if verdict is Verdict.REQUIRE_APPROVAL:
        url = decision.approval.url if decision.approval else None
        where = f" (approve at {url})" if url else ""
        raise ApprovalRequired(
            f"Interlock requires approval for {what}{where}: {reason}", decision=decision
        )
    error: Blocked = ActionUndetermined(
        f"Interlock could not decide on {what}, so it did not run: {reason}", decision=decision
    )
    raise error from decision.cause


_REDACTOR = Redactor()


def _what(action: Action | None) -> str:
    """How a refusal names the action: ``tool 'shell'``, ``MCP tool 'read_file'``."""
    if action is None:
        return "the call"
    kind = "MCP tool" if action.kind == "mcp" else action.kind
    return f"{kind} {action.name!r}"
