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

from typing import Final

from interlock.core.action import Action
from interlock.core.decision import ApprovalRef, Decision, ShadowVerdict, Verdict
from interlock.errors import EvaluationError, describe, message_of
from interlock.policy.compiled import CompiledPolicy, CompiledRule, Tier
from interlock.policy.extract import (
    AliasConflict,
    AmbiguousUrl,
    Facts,
    check_limits,
    extract,
    project_arguments,
)
from interlock.policy.facets import Outcome, evaluate_facets, needs_facets

__all__ = ["AMBIGUOUS_URL_RULE", "CONFLICTING_ALIASES_RULE", "evaluate", "facts_for"]

#: The rule id reported when conflicting aliases are refused before policy evaluation.
CONFLICTING_ALIASES_RULE = "interlock:conflicting-aliases"
#: The rule id reported when a URL's host depends on the parser that reads it.
AMBIGUOUS_URL_RULE = "interlock:ambiguous-url"


# An outcome: the verdict, the rules that matched (sorted by id) or the errors that
# left it open. A plain tuple: this is built on every check.
_Outcome = Outcome  # (verdict, rules that decided, errors that left it open)
_NO_RULES: tuple[CompiledRule, ...] = ()
_NO_ERRORS: tuple[EvaluationError, ...] = ()
# Enum members read as module globals: a class attribute of an Enum costs about ten
# times as much to read on Python 3.11, and these are read on every check.
_ALLOW: Final = Verdict.ALLOW
_REQUIRE_APPROVAL: Final = Verdict.REQUIRE_APPROVAL
_UNDETERMINED: Final = Verdict.UNDETERMINED


def facts_for(action: Action, policy: CompiledPolicy) -> Facts:
    """Project, bound and extract. Raises AliasConflict or EvaluationError."""
    arguments = action.arguments
    if action.schema is not None:  # nothing to project otherwise: skip the call
        arguments = project_arguments(arguments, action.schema)
    check_limits(arguments, max_depth=policy.max_depth, max_items=policy.max_items)
    pinned = action.scope if action.scope is not None else policy.pinned_scope(action.name)
    # Positional, in the parameters' order: this runs on every check, and keywords
    # cost more.
    return extract(
        action.kind,
        action.name,
        arguments,
        pinned,
        action.description,
        action.context,
        action.target,
        action.capabilities,
        policy.scope_default,
        policy.max_param_chars,
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
    except AmbiguousUrl as ambiguous:
        return Decision(
            verdict=Verdict.DENY,
            reason=str(ambiguous),
            rule_ids=(AMBIGUOUS_URL_RULE,),
        )
    except EvaluationError as exc:
        return Decision.undetermined(exc, reason=f"cannot judge this call: {message_of(exc)}")
    except Exception as exc:  # a hostile argument that breaks extraction
        return Decision.undetermined(
            EvaluationError(f"extraction failed: {describe(exc)}"),
            reason="cannot judge this call: its arguments could not be read",
        )

    params = facts.params
    # needs_facets' own first tests, inlined: most calls are one facet, and this runs
    # on every check.
    if (
        facts.scopes is not None
        or facts.variants is not None
        or "@file" in params
        or ("command" in params and facts.scope == "shell")
    ) and needs_facets(facts, policy):
        try:
            enforced, would, note = evaluate_facets(facts, policy, _judge)
        except Exception as exc:
            return Decision.undetermined(
                EvaluationError(f"cannot judge this call: {describe(exc)}"),
                reason="cannot judge this call: what it does could not be read",
            )
        return _finish(enforced, would, policy, note)

    candidates = policy.candidates(facts.kind, facts.name, facts.scope)
    tiers = candidates.enforced
    shadow_tiers = candidates.with_shadow
    if candidates.gated:
        narrowed = candidates.narrowed_for(facts)
        if narrowed is not None:
            tiers, shadow_tiers = narrowed
    elif candidates.enforced_filter is not None:
        tiers = candidates.enforced_filter.tiers(facts)
    enforced = _judge(facts, tiers, policy.default)

    if candidates.with_shadow is None and not policy.shadow_mode:
        return _decision(enforced, policy, None)  # _finish's usual case, without the call
    tiers = shadow_tiers or ()
    if candidates.shadow_filter is not None:
        tiers = candidates.shadow_filter.tiers(facts)
    with_shadow = _judge(facts, tiers, policy.default)
    return _finish(enforced, with_shadow, policy)


def _finish(
    enforced: Outcome, would: Outcome | None, policy: CompiledPolicy, note: str | None = None
) -> Decision:
    """The decision from the enforced outcome and, when shadow rules applied, the
    outcome with them; ``note`` says what part of the call the verdict is about."""
    shadow: ShadowVerdict | None = None
    if would is not None and (
        policy.shadow_mode or would[0] is not enforced[0] or would[1] != enforced[1]
    ):
        shadow = ShadowVerdict(
            verdict=would[0], reason=_reason(would, policy), rule_ids=_ids(would)
        )
    if policy.shadow_mode:
        assert shadow is not None  # every rule is a shadow rule in shadow mode
        return Decision(
            verdict=Verdict.ALLOW,
            reason=f"shadow mode: would {shadow.verdict.value}: {shadow.reason}",
            shadow=shadow,
        )
    return _decision(enforced, policy, shadow, note)


def _judge(facts: Facts, tiers: tuple[Tier, ...], default: Verdict) -> _Outcome:
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
                errors.append(_located(exc, rule))
        if matched is not None:
            return (verdict, tuple(matched), _NO_ERRORS)  # already in id order
        if errors is not None:
            if verdict is _ALLOW and default is _ALLOW:
                return (_ALLOW, _NO_RULES, _NO_ERRORS)  # allowed either way
            return (_UNDETERMINED, _NO_RULES, tuple(sorted(errors, key=_error_key)))
    return (default, _NO_RULES, _NO_ERRORS)


def _located(exc: Exception, rule: CompiledRule) -> EvaluationError:
    """The error, naming the rule it came from."""
    if isinstance(exc, EvaluationError):
        if exc.rule_id is not None:
            return exc
        message = f"rule {rule.id!r}: {message_of(exc)}"
    else:
        message = f"rule {rule.id!r} failed: {describe(exc)}"
    located = EvaluationError(message, rule_id=rule.id)
    located.__cause__ = exc
    return located


def _error_key(error: EvaluationError) -> tuple[str, str]:
    return (error.rule_id or "", str(error))


def _ids(outcome: _Outcome) -> tuple[str, ...]:
    _, rules, errors = outcome
    if rules:
        return (rules[0].id,) if len(rules) == 1 else tuple(rule.id for rule in rules)
    return tuple(e.rule_id for e in errors if e.rule_id is not None)


def _reason(outcome: _Outcome, policy: CompiledPolicy) -> str:
    _, rules, errors = outcome
    if rules:
        return rules[0].reason if len(rules) == 1 else "; ".join(rule.reason for rule in rules)
    if errors:
        return "a rule could not be evaluated: " + "; ".join(str(e) for e in errors)
    return policy.default_reason


def _decision(
    outcome: _Outcome,
    policy: CompiledPolicy,
    shadow: ShadowVerdict | None,
    note: str | None = None,
) -> Decision:
    verdict, rules, errors = outcome
    if verdict is not _UNDETERMINED:
        rule_ids: tuple[str, ...]
        if len(rules) == 1 and note is None:  # the common case, without the helpers
            reason, rule_ids = rules[0].reason, (rules[0].id,)
        else:
            reason, rule_ids = _reason(outcome, policy), _ids(outcome)
            if note is not None:
                reason = f"{reason} ({note})"
        approval = None
        if verdict is _REQUIRE_APPROVAL:
            approval = ApprovalRef(id=None, url=policy.approval_link(None))
        # Positional: this runs on every check, and keywords cost more.
        return Decision(verdict, reason, rule_ids, None, "", approval, shadow)
    reason = _reason(outcome, policy)
    if note is not None:
        reason = f"{reason} ({note})"
    cause = errors[0]
    if len(errors) > 1:
        cause = EvaluationError(reason, rule_id=errors[0].rule_id)
        cause.__cause__ = errors[0]
    return Decision(
        verdict=Verdict.UNDETERMINED,
        reason=reason,
        rule_ids=_ids(outcome),
        cause=cause,
        shadow=shadow,
    )
