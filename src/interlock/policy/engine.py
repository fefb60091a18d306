"""The pure local decision engine: ``evaluate(action, policy) -> Decision``.

No I/O, no clock, no globals: the same action under the same policy always gets the
same verdict (only ``decision_id`` differs).

Deny overrides: the strictest matching rule wins (deny > require_approval > allow); no
match gives the policy's default. Rules are evaluated a tier at a time, strictest
first, and every rule of a tier is evaluated, so the rule ids reported never depend on
rule order. A rule that cannot be evaluated (a CEL error, a type mismatch) makes the
verdict undetermined unless the result is already certain without it: a matching
deny in a stricter tier, or a matching rule in its own tier.

Example::

    from interlock import Action
    from interlock.policy import evaluate, load_policy

    policy = load_policy("interlock.yaml")
    decision = evaluate(Action.tool("shell", {"command": "ls"}), policy)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from interlock.core.action import Action
from interlock.core.decision import ApprovalRef, Decision, ShadowVerdict, Verdict
from interlock.errors import EvaluationError
from interlock.policy.compiled import CompiledPolicy, CompiledRule
from interlock.policy.extract import AliasConflict, Facts, check_limits, extract, project_arguments

__all__ = ["CONFLICTING_ALIASES_RULE", "evaluate", "facts_for"]

#: The rule id reported when conflicting aliases are refused before policy evaluation.
CONFLICTING_ALIASES_RULE = "interlock:conflicting-aliases"


@dataclass(frozen=True, slots=True)
class _Outcome:
    verdict: Verdict
    rules: tuple[CompiledRule, ...] = ()
    errors: tuple[EvaluationError, ...] = ()


def facts_for(action: Action, policy: CompiledPolicy) -> Facts:
    """Project, bound and extract. Raises AliasConflict or EvaluationError."""
    arguments = project_arguments(action.arguments, action.schema)
    check_limits(arguments, max_depth=policy.max_depth, max_items=policy.max_items)
    pinned = action.scope if action.scope is not None else policy.pinned_scope(action.name)
    return extract(
        kind=action.kind,
        name=action.name,
        arguments=arguments,
        pinned_scope=pinned,
        description=action.description,
        context=action.context,
        target=action.target,
        capabilities=action.capabilities,
        default_scope=policy.scope_default,
        max_param_chars=policy.max_param_chars,
    )


def evaluate(action: Action, policy: CompiledPolicy) -> Decision:
    """The verdict of ``policy`` on ``action``. Never raises for a bad action: anything
    that stops a verdict is an undetermined decision with its cause."""
    try:
        facts = facts_for(action, policy)
    except AliasConflict as conflict:
        return Decision(
            verdict=Verdict.DENY,
            reason=str(conflict),
            rule_ids=(CONFLICTING_ALIASES_RULE,),
        )
    except EvaluationError as exc:
        return Decision.undetermined(exc, reason=f"cannot judge this call: {exc}")
    except Exception as exc:  # a hostile argument that breaks extraction
        return Decision.undetermined(
            EvaluationError(f"extraction failed: {type(exc).__name__}: {exc}"),
            reason="cannot judge this call: its arguments could not be read",
        )

    candidates = policy.candidates(action.kind, action.name)
    enforced = _judge(facts, candidates.deny, candidates.approval, candidates.allow, policy.default)

    shadow: ShadowVerdict | None = None
    if candidates.shadow or policy.shadow_mode:
        tiers = _tiers(
            (*candidates.deny, *candidates.approval, *candidates.allow, *candidates.shadow)
        )
        would = _judge(facts, *tiers, policy.default)
        if (
            policy.shadow_mode
            or would.verdict is not enforced.verdict
            or would.rules != enforced.rules
        ):
            shadow = ShadowVerdict(
                verdict=would.verdict, reason=_reason(would, policy), rule_ids=_ids(would)
            )
    if policy.shadow_mode:
        assert shadow is not None  # every rule is a shadow rule in shadow mode
        return Decision(
            verdict=Verdict.ALLOW,
            reason=f"shadow mode: would {shadow.verdict.value}: {shadow.reason}",
            shadow=shadow,
        )
    return _decision(enforced, policy, shadow)


def _tiers(
    rules: Sequence[CompiledRule],
) -> tuple[tuple[CompiledRule, ...], tuple[CompiledRule, ...], tuple[CompiledRule, ...]]:
    return (
        tuple(r for r in rules if r.verdict is Verdict.DENY),
        tuple(r for r in rules if r.verdict is Verdict.REQUIRE_APPROVAL),
        tuple(r for r in rules if r.verdict is Verdict.ALLOW),
    )


def _judge(
    facts: Facts,
    deny: Sequence[CompiledRule],
    approval: Sequence[CompiledRule],
    allow: Sequence[CompiledRule],
    default: Verdict,
) -> _Outcome:
    for verdict, rules in (
        (Verdict.DENY, deny),
        (Verdict.REQUIRE_APPROVAL, approval),
        (Verdict.ALLOW, allow),
    ):
        if not rules:
            continue
        matched: list[CompiledRule] = []
        errors: list[EvaluationError] = []
        for rule in rules:
            try:
                if rule.matches(facts):
                    matched.append(rule)
            except EvaluationError as exc:
                if exc.rule_id is None:
                    located = EvaluationError(f"rule {rule.id!r}: {exc}", rule_id=rule.id)
                    located.__cause__ = exc
                    exc = located
                errors.append(exc)
            except Exception as exc:
                errors.append(
                    EvaluationError(
                        f"rule {rule.id!r} failed: {type(exc).__name__}: {exc}", rule_id=rule.id
                    )
                )
        if matched:
            return _Outcome(verdict, tuple(sorted(matched, key=_rule_key)))
        if errors:
            if verdict is Verdict.ALLOW and default is Verdict.ALLOW:
                return _Outcome(Verdict.ALLOW)  # allowed whether or not the rule matched
            return _Outcome(Verdict.UNDETERMINED, errors=tuple(sorted(errors, key=_error_key)))
    return _Outcome(default)


def _rule_key(rule: CompiledRule) -> str:
    return rule.id


def _error_key(error: EvaluationError) -> tuple[str, str]:
    return (error.rule_id or "", str(error))


def _ids(outcome: _Outcome) -> tuple[str, ...]:
    if outcome.rules:
        return tuple(rule.id for rule in outcome.rules)
    return tuple(e.rule_id for e in outcome.errors if e.rule_id is not None)


def _reason(outcome: _Outcome, policy: CompiledPolicy) -> str:
    if outcome.rules:
        return "; ".join(rule.reason for rule in outcome.rules)
    if outcome.errors:
        return "a rule could not be evaluated: " + "; ".join(str(e) for e in outcome.errors)
    return f"no rule matched; the policy default is {policy.default.value}"


def _decision(outcome: _Outcome, policy: CompiledPolicy, shadow: ShadowVerdict | None) -> Decision:
    reason = _reason(outcome, policy)
    if outcome.verdict is Verdict.UNDETERMINED:
        cause = outcome.errors[0]
        if len(outcome.errors) > 1:
            cause = EvaluationError(reason, rule_id=outcome.errors[0].rule_id)
            cause.__cause__ = outcome.errors[0]
        return Decision(
            verdict=Verdict.UNDETERMINED,
            reason=reason,
            rule_ids=_ids(outcome),
            cause=cause,
            shadow=shadow,
        )
    approval = None
    if outcome.verdict is Verdict.REQUIRE_APPROVAL:
        approval = ApprovalRef(id=None, url=policy.approval_link(None))
    return Decision(
        verdict=outcome.verdict,
        reason=reason,
        rule_ids=_ids(outcome),
        approval=approval,
        shadow=shadow,
    )
