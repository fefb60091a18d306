"""Turning a ``require_approval`` verdict into a request, and a request's state into
the verdict the call gets.

| the request for this exact call (intent hash) | the call's verdict |
| --- | --- |
| approved, not yet claimed | ``allow``, and the approval is claimed: used up |
| pending (new or already open) | ``require_approval`` with the approval id and URL |
| denied, within ``grant_ttl`` of the denial | ``deny`` with the approver's reason |

A changed argument is another intent, so another request.

The request also carries what the approver is told besides the call: the highest
``severity`` its rules declare, and the tool's description — the policy's own (its
``tools`` section) when it has one, else the one the framework gave the call — redacted
and cut to :data:`MAX_DESCRIPTION` characters.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from interlock.core.decision import ApprovalRef, Decision, Verdict
from interlock.core.intent import intent_hash
from interlock.core.redaction import Redactor
from interlock.store.records import ApprovalStatus, ClaimOutcome

if TYPE_CHECKING:
    from interlock.core.action import Action
    from interlock.policy.compiled import CompiledPolicy
    from interlock.store.sql import SqlStore

__all__ = ["MAX_DESCRIPTION", "approval_decision", "request_approval", "tool_description"]

#: The longest tool description an approval keeps (longer ones end in "…").
MAX_DESCRIPTION = 2000


def request_approval(
    store: SqlStore,
    policy: CompiledPolicy,
    action: Action,
    *,
    rule_ids: tuple[str, ...],
    reason: str,
    redactor: Redactor,
) -> ClaimOutcome:
    """Claim, find or open the approval request for this exact call."""
    context = action.context
    settings = policy.approval_policy
    summary = redactor.redact_value(action.summary())
    described = tool_description(policy, action, redactor)
    return store.resolve_approval(
        tenant=context.tenant,
        intent_hash=intent_hash(action),
        action=summary if isinstance(summary, dict) else {"summary": summary},
        context=_context_record(action, redactor),
        rule_ids=rule_ids,
        reason=redactor.redact(reason),
        requested_by=context.agent,
        ttl_us=int(settings.ttl * 1_000_000),
        grant_ttl_us=int(settings.grant_ttl * 1_000_000),
        severity=policy.severity_of(rule_ids),
        tool_description=described[0] if described else None,
        tool_description_from=described[1] if described else None,
    )


def tool_description(
    policy: CompiledPolicy, action: Action, redactor: Redactor
) -> tuple[str, str] | None:
    """What the tool is said to do, for its approver, and who says so: the policy's
    description of it (``"policy"``), else the framework's (``"agent"``: the agent's
    own claim); redacted, at most :data:`MAX_DESCRIPTION` characters.

    Example::

        tool_description(policy, Action.tool("x", {}, description="Looks up x."), Redactor())
        # ('Looks up x.', 'agent') when the policy does not describe x
    """
    declared = policy.tool_descriptions.get(action.name)
    text, source = (declared, "policy") if declared is not None else (action.description, "agent")
    if not isinstance(text, str) or not text.strip():
        return None
    text = redactor.redact(text.strip())
    if len(text) > MAX_DESCRIPTION:
        text = text[: MAX_DESCRIPTION - 1].rstrip() + "…"
    return text, source


def approval_decision(
    outcome: ClaimOutcome, policy: CompiledPolicy, decision: Decision, *, reason: str
) -> Decision:
    """The verdict a call gets from the state of its approval request."""
    record = outcome.record
    ref = ApprovalRef(id=record.id, url=policy.approval_link(record.id), status=outcome.state.value)
    rule_ids = decision.rule_ids
    if outcome.state is ApprovalStatus.CLAIMED:
        why = f": {record.decision_reason}" if record.decision_reason else ""
        return Decision(
            Verdict.ALLOW,
            f"approved by {record.decided_by}{why} (approval {record.id}, now used)",
            rule_ids,
            None,
            decision.decision_id,
            ref,
            decision.shadow,
        )
    if outcome.state is ApprovalStatus.DENIED:
        why = f": {record.decision_reason}" if record.decision_reason else ""
        return Decision(
            Verdict.DENY,
            f"denied by {record.decided_by}{why} (approval {record.id})",
            rule_ids,
            None,
            decision.decision_id,
            ref,
            decision.shadow,
        )
    return Decision(
        Verdict.REQUIRE_APPROVAL,
        reason,
        rule_ids,
        None,
        decision.decision_id,
        ref,
        decision.shadow,
    )


def _context_record(action: Action, redactor: Redactor) -> dict[str, object]:
    context = action.context.as_dict()
    redacted = redactor.redact_value(context)
    return redacted if isinstance(redacted, dict) else {}
