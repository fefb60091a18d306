"""What an action costs against each budget that applies to it. Pure.

Every call a budget covers reserves a positive amount on it, or is refused:

- a model call, on a ``tokens`` budget its estimated tokens (input + output bound),
  on a currency budget those tokens priced (:mod:`interlock.ledger.estimate` reads
  the estimate from the request; ``pricing.default_max_tokens`` bounds an output the
  call leaves open);
- any other call, on a currency budget its declared ``est_cost`` argument;
- else the budget's ``default_estimate`` (for a model call whose output nothing
  bounds: the larger of it and what the prompt alone costs);
- else :class:`~interlock.errors.CostUnknown`, which the stateful decider turns into
  a deny that says how to fix it.

A stated zero states nothing. A reservation is never less than one unit.

Example::

    from interlock import Action
    from interlock.ledger.budgets import budget_lines

    lines = budget_lines(policy, Action.tool("search", {"q": "x", "est_cost": 0.02}))
"""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING, Any

from interlock.errors import AmountOutOfRange, CostUnknown, EvaluationError
from interlock.ledger.estimate import estimate_model_call
from interlock.ledger.usage import Usage
from interlock.policy.specs import BudgetSpec, to_units, units_to_amount, window_start
from interlock.store.records import BudgetLine, Refusal
from interlock.store.settle import MAX_UNITS

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
    """One line per budget that covers ``action``: its amount, and the headroom its
    ``max_overage`` holds besides. Raises CostUnknown when a budget covers the call but
    nothing says what it may cost, EvaluationError when a cost cannot be worked out (a
    model with no price, an ``est_cost`` that is not a number)."""
    lines = []
    for spec in policy.budgets:
        if not spec.selector.matches(action, rule_ids):
            continue
        amount = charge(spec, action, policy)
        lines.append(
            BudgetLine(
                budget_id=spec.id,
                scope_key=spec.key(action),
                window_start=window_start(spec.window, now),
                unit=spec.unit,
                cap=spec.limit,
                amount=amount,
                headroom=min(spec.headroom(amount), MAX_UNITS),
            )
        )
    return lines


def charge(spec: BudgetSpec, action: Action, policy: CompiledPolicy) -> int:
    """What ``action`` reserves on ``spec``, in units: at least 1 (see the module
    docstring for where it comes from)."""
    if action.kind == "llm":
        estimate = estimate_model_call(action.arguments, policy.default_max_tokens.get(action.name))
        if estimate.bounded:
            return _counted(spec, _cost(spec, policy, action.name, estimate.usage()))
        if spec.default_estimate is None:
            raise CostUnknown(
                f"budget {spec.id!r} covers model {action.name!r}, but the call names no "
                "max_tokens (or max_output_tokens), so what it may cost is unknown: state "
                "max_tokens in the call, or set default_estimate on the budget (or "
                "pricing.default_max_tokens for the model)",
                budget_id=spec.id,
            )
        prompt = Usage(estimate.input_tokens, 0)
        return max(_counted(spec, _cost(spec, policy, action.name, prompt)), spec.default_estimate)
    if not spec.is_tokens:
        declared = _declared_cost(spec, action)
        if declared:
            return _counted(spec, declared)
    if spec.default_estimate is not None:
        return spec.default_estimate
    what = f"{action.kind} {action.name!r}"
    if spec.is_tokens:
        message = (
            f"budget {spec.id!r} counts tokens and covers {what}, which states none: set "
            "default_estimate on the budget, or narrow it to model calls (kind: llm)"
        )
    else:
        message = (
            f"budget {spec.id!r} covers {what}, but the call declares no est_cost, so what "
            "it may cost is unknown: declare est_cost, or set default_estimate on the budget"
        )
    raise CostUnknown(message, budget_id=spec.id)


def _declared_cost(spec: BudgetSpec, action: Action) -> int:
    declared = action.arguments.get("est_cost")
    if declared is None:
        return 0
    if isinstance(declared, bool) or not isinstance(declared, (int, float, Decimal, str)):
        raise EvaluationError(f"est_cost must be a number, not {declared!r}")
    try:
        return to_units(declared, spec.unit)
    except (ValueError, ArithmeticError) as exc:
        raise EvaluationError(f"est_cost {declared!r} is not a cost: {exc}") from exc


def _counted(spec: BudgetSpec, units: int) -> int:
    """``units`` as a reservation: at least one, at most what a budget counts."""
    if units > MAX_UNITS:
        raise EvaluationError(
            f"budget {spec.id!r} cannot count {units} units in one call (at most 2**53)"
        )
    return max(1, units)


def _cost(spec: BudgetSpec, policy: CompiledPolicy, model: str, usage: Usage) -> int:
    if spec.is_tokens:
        return usage.total
    return _priced(policy, model, usage, spec.unit)


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
    """What a finished call really used against each of its reservation's lines: its
    tokens, or — on a currency budget — those tokens priced for ``model``. Raises
    EvaluationError when the usage cannot be read or a currency line has no model (or
    no price) to price it, AmountOutOfRange when an amount is more than a budget
    counts (2**53 units)."""
    try:
        real = Usage.of(usage)
    except ValueError as exc:
        raise EvaluationError(f"the usage cannot be read: {exc}") from exc
    out: dict[str, int] = {}
    for line in lines:
        if line.unit == "tokens":
            units = real.total
        elif model is not None:
            units = _priced(policy, model, real, line.unit)
        else:
            raise EvaluationError(
                f"budget {line.budget_id!r} counts {line.unit}: name the model whose usage "
                "this is, to price it"
            )
        if units > MAX_UNITS:
            raise AmountOutOfRange(
                f"a usage of {real.total} tokens is {units} units on budget "
                f"{line.budget_id!r}, more than a budget counts (2**53)"
            )
        out[line.budget_id] = units
    return out


def refusal_reason(refusal: Refusal) -> str:
    """Why a reservation was refused, naming the budget and its numbers."""
    line = refusal.line
    unit = line.unit

    def show(units: int) -> str:
        amount = units_to_amount(units, unit)
        text = f"{amount.normalize():f}" if unit != "tokens" else str(int(amount))
        return f"{text} {unit}"

    closed = refusal.closed
    if closed is not None:
        return (
            f"budget {line.budget_id!r} ({line.scope_key}) is closed: a call ran "
            f"{show(closed.excess)} past its reservation and max_overage "
            f"(reservation {closed.reservation_id}); an admin must reopen it "
            f"(interlock budgets reopen {line.budget_id} --tenant {closed.tenant} "
            f"--scope {line.scope_key})"
        )
    wanted = show(line.amount)
    if line.headroom:
        wanted += f" (+{show(line.headroom)} max_overage held)"
    held = f"{show(refusal.spent)} spent, {show(refusal.reserved)} reserved"
    if refusal.headroom:
        held += f", {show(refusal.headroom)} held for overruns"
    return (
        f"budget {line.budget_id!r} ({line.scope_key}) cannot take {wanted}: "
        f"{show(refusal.available)} of {show(line.cap)} left ({held})"
    )
