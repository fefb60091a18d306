"""From the rules that matched to a verdict: the tiers judged in order, and the
``Decision`` an outcome is reported as.

An *outcome* is a plain tuple ``(verdict, rules that decided, errors that left it
open)``, built on every check. :func:`judge` is the reference way to reach one — every
rule of a tier tested, in id order, so that the rule ids reported never depend on
rule order; the generated functions of :mod:`interlock.policy.specialise` reach the
same outcome faster and fall back to :func:`judge` on any error.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from interlock.core.decision import ApprovalRef, Decision, ShadowVerdict, Verdict
from interlock.errors import EvaluationError, describe, message_of
from interlock.policy.facets import Outcome

if TYPE_CHECKING:
    from interlock.policy.compiled import CompiledPolicy, CompiledRule, Tier
    from interlock.policy.extract import Facts

__all__ = ["decision_of", "error_key", "judge", "located", "outcome_ids", "outcome_reason"]

_NO_RULES: tuple[CompiledRule, ...] = ()
_NO_ERRORS: tuple[EvaluationError, ...] = ()
# Enum members read as module globals: a class attribute of an Enum costs about ten
# times as much to read on Python 3.11, and these are read on every check.
_ALLOW: Final = Verdict.ALLOW
_REQUIRE_APPROVAL: Final = Verdict.REQUIRE_APPROVAL
_UNDETERMINED: Final = Verdict.UNDETERMINED


def judge(facts: Facts, tiers: tuple[Tier, ...], default: Verdict) -> Outcome:
    """The outcome of ``tiers`` (strictest first) on ``facts``: the first tier with a
    matching rule decides, with every matching rule of it; a rule that raises leaves
    its tier open (undetermined) unless another rule of the tier matches, or the
    tier allows under a default that allows too; no match gives ``default``."""
    for verdict, rules in tiers:
        matched: list[CompiledRule] | None = None
        errors: list[EvaluationError] | None = None
        for rule in rules:
            try:
                if rule.test(facts):
                    if matched is None:
                        matched = [rule]
                    else:
                        matched.append(rule)
            except Exception as exc:
                if errors is None:
                    errors = []
                errors.append(located(exc, rule))
        if matched is not None:
            return (verdict, tuple(matched), _NO_ERRORS)  # already in id order
        if errors is not None:
            if verdict is _ALLOW and default is _ALLOW:
                return (_ALLOW, _NO_RULES, _NO_ERRORS)  # allowed either way
            return (_UNDETERMINED, _NO_RULES, tuple(sorted(errors, key=error_key)))
    return (default, _NO_RULES, _NO_ERRORS)


def located(exc: Exception, rule: CompiledRule) -> EvaluationError:
    """The error, naming the rule it came from."""
    if isinstance(exc, EvaluationError):
        if exc.rule_id is not None:
            return exc
        message = f"rule {rule.id!r}: {message_of(exc)}"
    else:
        message = f"rule {rule.id!r} failed: {describe(exc)}"
    found = EvaluationError(message, rule_id=rule.id)
    found.__cause__ = exc
    return found


def error_key(error: EvaluationError) -> tuple[str, str]:
    return (error.rule_id or "", str(error))


def outcome_ids(outcome: Outcome) -> tuple[str, ...]:
    """The rule ids an outcome reports: its rules', else its errors'."""
    _, rules, errors = outcome
    if rules:
        return (rules[0].id,) if len(rules) == 1 else tuple(rule.id for rule in rules)
    return tuple(e.rule_id for e in errors if e.rule_id is not None)


def outcome_reason(outcome: Outcome, policy: CompiledPolicy) -> str:
    """The reason an outcome gives: its rules' reasons, its errors, or the default's."""
    _, rules, errors = outcome
    if rules:
        return rules[0].reason if len(rules) == 1 else "; ".join(rule.reason for rule in rules)
    if errors:
        return "a rule could not be evaluated: " + "; ".join(str(e) for e in errors)
    return policy.default_reason


def decision_of(
    outcome: Outcome,
    policy: CompiledPolicy,
    shadow: ShadowVerdict | None,
    note: str | None = None,
) -> Decision:
    """The decision reporting ``outcome`` (with the shadow verdict, and a note naming
    the part of the call that decided when it is not the call itself)."""
    verdict, rules, errors = outcome
    if verdict is not _UNDETERMINED:
        rule_ids: tuple[str, ...]
        if len(rules) == 1 and note is None:  # the common case, without the helpers
            reason, rule_ids = rules[0].reason, (rules[0].id,)
        else:
            reason, rule_ids = outcome_reason(outcome, policy), outcome_ids(outcome)
            if note is not None:
                reason = f"{reason} ({note})"
        approval = None
        if verdict is _REQUIRE_APPROVAL:
            approval = ApprovalRef(id=None, url=policy.approval_link(None))
        # Positional: this runs on every check, and keywords cost more.
        return Decision(verdict, reason, rule_ids, None, "", approval, shadow)
    reason = outcome_reason(outcome, policy)
    if note is not None:
        reason = f"{reason} ({note})"
    cause = errors[0]
    if len(errors) > 1:
        cause = EvaluationError(reason, rule_id=errors[0].rule_id)
        cause.__cause__ = errors[0]
    return Decision(
        verdict=Verdict.UNDETERMINED,
        reason=reason,
        rule_ids=outcome_ids(outcome),
        cause=cause,
        shadow=shadow,
    )
