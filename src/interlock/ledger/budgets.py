"""What an action costs against each budget that applies to it. Pure.

A currency budget charges a model call its priced token estimate and any other call
its declared ``est_cost`` argument; a token budget charges a model call its tokens
(input + maximum output). A call that costs nothing against a budget takes no
reservation on it.

Example::

    from interlock import Action
    from interlock.ledger.budgets import budget_lines

    lines = budget_lines(policy, Action.tool("search", {"q": "x", "est_cost": 0.02}))
"""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING, Any

from interlock.errors import EvaluationError
from interlock.ledger.usage import Usage
from interlock.policy.specs import BudgetSpec, to_units, units_to_amount, window_start
from interlock.store.records import BudgetLine, Refusal

if TYPE_CHECKING:
    from interlock.core.action import Action
    from interlock.policy.compiled import CompiledPolicy

__all__ = ["actual_units", "budget_lines", "charge", "refusal_reason"]


def budget_lines(
    policy: CompiledPolicy,
    action: Action,
    rule_ids: tuple[str, ...] = (),
    *,
    now: float | None = None,
) -> list[BudgetLine]:
    """One line per budget that applies to ``action`` and that it costs something
    against. Raises EvaluationError when a cost cannot be worked out (a model with no
    price, an ``est_cost`` that is not a number)."""
    lines = []
    for spec in policy.budgets:
        if not spec.selector.matches(action, rule_ids):
            continue
        amount = charge(spec, action, policy)
        if amount > 0:
            lines.append(
                BudgetLine(
                    budget_id=spec.id,
                    scope_key=spec.key(action),
                    window_start=window_start(spec.window, now),
                    unit=spec.unit,
                    cap=spec.limit,
                    amount=amount,
                )
            )
    return lines


def charge(spec: BudgetSpec, action: Action, policy: CompiledPolicy) -> int:
    """What ``action`` is estimated to cost against ``spec``, in units."""
    if action.kind == "llm":
        usage = Usage.from_arguments(action.arguments)
        if spec.is_tokens:
            return usage.total
        return _priced(policy, action.name, usage, spec.unit)
    if spec.is_tokens:
        return 0
    declared = action.arguments.get("est_cost")
    if declared is None:
        return 0
    if isinstance(declared, bool) or not isinstance(declared, (int, float, Decimal, str)):
        raise EvaluationError(f"est_cost must be a number, not {declared!r}")
    try:
        return to_units(declared, spec.unit)
    except (ValueError, ArithmeticError) as exc:
        raise EvaluationError(f"est_cost {declared!r} is not a cost: {exc}") from exc


def _priced(policy: CompiledPolicy, model: str, usage: Usage, unit: str) -> int:
    cost = policy.pricing.cost(model, usage.input_tokens, usage.output_tokens)
    if cost is None:
        raise EvaluationError(
            f"no price for model {model!r}, so its cost against a {unit} budget is unknown; "
            "add it under pricing.models in the policy"
        )
    return to_units(cost, unit)


def actual_units(
    lines: tuple[BudgetLine, ...], policy: CompiledPolicy, model: str | None, usage: Any
) -> dict[str, int]:
    """What a finished call really cost against each of its reservation's lines."""
    real = Usage.of(usage)
    out: dict[str, int] = {}
    for line in lines:
        if line.unit == "tokens":
            out[line.budget_id] = real.total
        elif model is not None:
            out[line.budget_id] = _priced(policy, model, real, line.unit)
    return out


def refusal_reason(refusal: Refusal) -> str:
    """Why a reservation was refused, naming the budget and its numbers."""
    line = refusal.line
    unit = line.unit

    def show(units: int) -> str:
        amount = units_to_amount(units, unit)
        text = f"{amount.normalize():f}" if unit != "tokens" else str(int(amount))
        return f"{text} {unit}"

    return (
        f"budget {line.budget_id!r} ({line.scope_key}) cannot take {show(line.amount)}: "
        f"{show(refusal.available)} of {show(line.cap)} left "
        f"({show(refusal.spent)} spent, {show(refusal.reserved)} reserved)"
    )
