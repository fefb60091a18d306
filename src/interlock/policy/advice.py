"""Advice on a policy that loads: things that are valid but probably not meant.

``interlock policy lint`` prints these as warnings (the exit status stays 0). Each
names the file and line it is about when the policy came from a file.

Example::

    from interlock.policy import load_policy_text
    from interlock.policy.advice import policy_advice

    for warning in policy_advice(load_policy_text(text)):
        print(warning)
"""

from __future__ import annotations

from interlock.core.decision import Verdict
from interlock.policy.compiled import CompiledPolicy

__all__ = ["policy_advice"]


def _allows_models(policy: CompiledPolicy) -> bool:
    """Whether some enforced rule can allow a model call (``kind: llm``, or a rule for
    every kind and every name)."""
    for rule in policy.rules:
        if rule.verdict is not Verdict.ALLOW or rule.shadow:
            continue
        if rule.kinds is not None and "llm" in rule.kinds:
            return True
        if rule.kinds is None and rule.names is None:
            return True
    return False


def _token_budgets_over_other_calls(policy: CompiledPolicy, where: str) -> list[str]:
    """A ``tokens`` budget that covers calls other than model calls, with no
    ``default_estimate``: those calls state no tokens and will be refused."""
    advice = []
    for budget in policy.budgets:
        kinds = budget.selector.kinds
        if not budget.is_tokens or budget.default_estimate is not None:
            continue
        if kinds is not None and kinds <= {"llm"}:
            continue
        line = f":{budget.line}" if budget.line else ""
        advice.append(
            f"{where}{line}: budget {budget.id!r} counts tokens but also covers calls that "
            "are not model calls, which state no tokens: they will be refused; add "
            "kind: llm, or a default_estimate"
        )
    return advice


def policy_advice(policy: CompiledPolicy) -> list[str]:
    """Warnings for ``policy``, each a line of text (``file:line: …`` when known)."""
    where = policy.source or "<policy>"
    advice: list[str] = _token_budgets_over_other_calls(policy, where)
    if policy.default is not Verdict.ALLOW and not _allows_models(policy):
        counted = [b for b in policy.budgets if b.selector.kinds and "llm" in b.selector.kinds]
        for budget in counted:
            line = f":{budget.line}" if budget.line else ""
            advice.append(
                f"{where}{line}: budget {budget.id!r} counts model calls (kind: llm), but no "
                "rule allows one: every model call will be refused"
            )
        if not counted:
            advice.append(
                f"{where}: no rule allows model calls (kind: llm) and the default is "
                f"{policy.default.value}: a guard with a store checks every model call its "
                "adapters see (LangChain middleware, GuardedModel, guard.llm_call), and "
                "would refuse them all; add a rule such as "
                "{id: models, decision: allow, reason: ..., kind: llm, name: 'gpt-*'}"
            )
    return advice
