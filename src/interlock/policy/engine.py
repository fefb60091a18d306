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

from typing import Any, Final

from interlock.core.action import Action
from interlock.core.decision import Decision, ShadowVerdict, Verdict
from interlock.errors import EvaluationError, describe, message_of
from interlock.policy.compiled import CompiledPolicy
from interlock.policy.extract import (
    AliasConflict,
    AmbiguousUrl,
    Facts,
    check_limits,
    extract,
    project_arguments,
)
from interlock.policy.facets import Outcome, evaluate_facets, needs_facets
from interlock.policy.outcomes import decision_of, judge, outcome_ids, outcome_reason
from interlock.policy.shapes import Shape
from interlock.policy.specialise import Decide
from interlock.session.current import CURRENT

__all__ = ["AMBIGUOUS_URL_RULE", "CONFLICTING_ALIASES_RULE", "evaluate", "facts_for"]

#: The rule id reported when conflicting aliases are refused before policy evaluation.
CONFLICTING_ALIASES_RULE = "interlock:conflicting-aliases"
#: The rule id reported when a URL's host depends on the parser that reads it.
AMBIGUOUS_URL_RULE = "interlock:ambiguous-url"


def facts_for(action: Action, policy: CompiledPolicy) -> Facts:
    """Project, bound and extract. Raises AliasConflict or EvaluationError."""
    arguments = action.arguments
    if type(arguments) is dict and action.schema is None:
        shape = _planned(action, arguments, policy)
        if shape is not None:
            facts = shape.facts(action, arguments, policy.max_param_chars)
            if facts is not None:
                return facts
    return _extracted(action, policy)


def _planned(action: Action, arguments: dict[str, Any], policy: CompiledPolicy) -> Shape | None:
    """The plan of the shape of ``action`` (whose arguments are the dict
    ``arguments``, with no schema), remembered by the policy (policy/shapes.py); None
    when calls of its shape are extracted in full."""
    key = (action.kind, action.name, action.scope, action.description, *arguments)
    try:
        shape: Shape | None = policy.shapes.get(key, _UNPLANNED)
    except TypeError:  # an unhashable field: the full extraction says what it makes of it
        return None
    if shape is _UNPLANNED:
        shape = policy.learn_shape(key, action)
    return shape


#: A shape of call not yet planned (None is one that is never planned).
_UNPLANNED: Final[Any] = object()


def _extracted(action: Action, policy: CompiledPolicy) -> Facts:
    """:func:`facts_for` in full, for any call."""
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
    decide: Decide | None = None
    try:
        facts: Facts | None = None
        arguments = action.arguments
        if type(arguments) is dict and action.schema is None:
            # facts_for's usual case, inlined (with what the shape knows of its
            # candidate rules): this is the hot path
            key = (action.kind, action.name, action.scope, action.description, *arguments)
            try:
                shape: Shape | None = policy.shapes.get(key, _UNPLANNED)
            except TypeError:
                shape = None
            if shape is _UNPLANNED:
                shape = policy.learn_shape(key, action)
            if shape is not None:
                facts = shape.facts(action, arguments, policy.max_param_chars)
                decide = shape.decide
        if facts is None:
            decide = None
            facts = _extracted(action, policy)
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

    if policy.sessions is not None:
        running = CURRENT.get()
        if running is not None:  # the step's label rules read these facts again
            running.evaluated = (action, policy, facts)
    params = facts.params
    if decide is not None and "@file" not in params:  # one facet (the shape says)
        return decide(facts)
    # needs_facets' own first tests, inlined: most calls are one facet, and this runs
    # on every check.
    if (
        facts.scopes is not None
        or facts.variants is not None
        or "@file" in params
        or ("command" in params and facts.scope == "shell")
    ) and needs_facets(facts, policy):
        try:
            enforced, would, note = evaluate_facets(facts, policy, judge)
        except Exception as exc:
            return Decision.undetermined(
                EvaluationError(f"cannot judge this call: {describe(exc)}"),
                reason="cannot judge this call: what it does could not be read",
            )
        return _finish(enforced, would, policy, note)

    candidates = policy.candidates(facts.kind, facts.name, facts.scope)
    decide = candidates.decide
    if decide is not None:  # no shadow rule applies: the usual check
        return decide(facts)

    tiers = candidates.enforced
    shadow_tiers = candidates.with_shadow
    if candidates.gated:
        narrowed_tiers = candidates.narrowed_for(facts)
        if narrowed_tiers is not None:
            tiers, shadow_tiers = narrowed_tiers
    elif candidates.enforced_filter is not None:
        tiers = candidates.enforced_filter.tiers(facts)
    enforced = judge(facts, tiers, policy.default)
    tiers = shadow_tiers or ()
    if candidates.shadow_filter is not None:
        tiers = candidates.shadow_filter.tiers(facts)
    with_shadow = judge(facts, tiers, policy.default)
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
            verdict=would[0], reason=outcome_reason(would, policy), rule_ids=outcome_ids(would)
        )
    if policy.shadow_mode:
        assert shadow is not None  # every rule is a shadow rule in shadow mode
        return Decision(
            verdict=Verdict.ALLOW,
            reason=f"shadow mode: would {shadow.verdict.value}: {shadow.reason}",
            shadow=shadow,
        )
    return decision_of(enforced, policy, shadow, note)
