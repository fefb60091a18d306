"""What a call reserves on each budget that covers it: the estimate read from the
request, the policy's defaults (``budgets[].default_estimate``,
``pricing.default_max_tokens``), the headroom of ``max_overage`` — or a refusal that
says how to fix it. And how those fields are validated and published."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal
from typing import Any

import pytest
import yaml

from interlock import Action, PolicyError, load_policy_text
from interlock.errors import AmountOutOfRange, CostUnknown, EvaluationError
from interlock.ledger.budgets import actual_units, budget_lines
from interlock.ledger.estimate import MaxTokensTable, estimate_model_call
from interlock.ledger.usage import Usage
from interlock.policy import CompiledPolicy, compile_policy, policy_json_schema
from interlock.policy.advice import policy_advice
from interlock.policy.specs import DEFAULT_OVERAGE, Overage

POLICY = """
version: 1
pricing:
  models:
    "paid-model": {input: 2, output: 10}
    "free-model": {input: 0, output: 0}
  default_max_tokens:
    "bounded-*": 500
    "bounded-special": 50
budgets:
  - id: tokens
    limit: 100000
    unit: tokens
    kind: llm
  - id: tokens-with-default
    limit: 100000
    unit: tokens
    kind: llm
    default_estimate: 800
    max_overage: 50%
  - id: dollars
    limit: 10
    unit: USD
    default_estimate: 0.25
    max_overage: 0.1
    name: ["paid-model", "free-model", "tool-*"]
"""


def policy() -> CompiledPolicy:
    return load_policy_text(POLICY)


def lines(action: Action, budgets: tuple[str, ...] | None = None) -> dict[str, tuple[int, int]]:
    """budget id -> (amount, headroom) of what ``action`` reserves (on ``budgets``)."""
    compiled = policy()
    if budgets is not None:
        compiled = replace(compiled, budgets=tuple(b for b in compiled.budgets if b.id in budgets))
    return {line.budget_id: (line.amount, line.headroom) for line in budget_lines(compiled, action)}


def llm(model: str, **arguments: Any) -> Action:
    return Action.llm(model, arguments=arguments)


# -- the estimate a request carries ---------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "input_tokens", "output_tokens"),
    [
        ({}, 0, None),
        ({"input_tokens": 0, "max_output_tokens": 0}, 0, None),  # a stated zero: nothing
        ({"input_tokens": 10, "max_output_tokens": 20}, 10, 20),
        ({"prompt_tokens": 7, "max_tokens": 3}, 7, 3),
        ({"max_completion_tokens": 9}, 0, 9),
        ({"messages": [{"role": "user", "content": "abcdefgh"}]}, 3, None),  # 12 chars
        ({"prompt": "a" * 9, "max_tokens": 1}, 3, 1),
        # every text counts, the item's type included: 10 + 4 + 2 characters
        ({"input": [{"type": "input_text", "text": "abcd"}], "instructions": "ab"}, 4, None),
        ({"system": "a" * 40, "messages": [], "tools": [{"name": "abcd"}]}, 11, None),
        ({"input_tokens": 5, "messages": [{"content": "a" * 400}]}, 5, None),  # stated wins
        ({"max_tokens": 12.0}, 0, 12),
    ],
)
def test_the_estimate_comes_from_the_request(
    arguments: dict[str, Any], input_tokens: int, output_tokens: int | None
) -> None:
    estimate = estimate_model_call(arguments)
    assert (estimate.input_tokens, estimate.output_tokens) == (input_tokens, output_tokens)


def test_a_default_max_tokens_bounds_what_the_request_leaves_open() -> None:
    assert estimate_model_call({}, 300).output_tokens == 300
    assert estimate_model_call({"max_tokens": 20}, 300).output_tokens == 20


@pytest.mark.parametrize(
    "arguments",
    [
        {"max_tokens": "lots"},
        {"max_tokens": True},
        {"max_tokens": -1},
        {"max_tokens": 2.5},
        {"input_tokens": 2**53 + 1},
        {"max_tokens": float("inf")},
    ],
)
def test_a_stated_count_that_is_not_a_count_fails_closed(arguments: dict[str, Any]) -> None:
    with pytest.raises(EvaluationError):
        estimate_model_call(arguments)


def test_a_prompt_too_big_to_walk_is_measured_as_far_as_it_goes() -> None:
    huge = {"messages": [{"content": "ab"}] * 200_000}
    assert 0 < estimate_model_call(huge).input_tokens <= 200_000 * 2 // 4


def test_max_tokens_by_model_prefers_exact_names_then_globs_in_order() -> None:
    table = MaxTokensTable((("m-*", 10), ("m-x", 20), ("*", 30)))
    assert (table.get("m-x"), table.get("m-y"), table.get("other")) == (20, 10, 30)
    assert MaxTokensTable().get("anything") is None


# -- what each budget reserves -----------------------------------------------------------


def test_a_bounded_model_call_reserves_its_tokens_and_their_price() -> None:
    reserved = lines(llm("paid-model", input_tokens=1000, max_output_tokens=500))
    assert reserved == {
        "tokens": (1500, 1500),  # max_overage: 100% by default
        "tokens-with-default": (1500, 750),  # 50%
        "dollars": (7000, 100_000),  # 0.002 + 0.005 USD; 0.1 USD flat
    }


def test_a_model_call_with_no_bound_reserves_the_default_or_is_refused() -> None:
    call = llm("paid-model", messages=[{"role": "user", "content": "x" * 4000}])
    # the budget with a default reserves the larger of it and what the prompt costs
    assert lines(call, ("tokens-with-default", "dollars")) == {
        "tokens-with-default": (1001, 501),
        "dollars": (250_000, 100_000),
    }
    with pytest.raises(CostUnknown) as refused:
        lines(call)
    assert refused.value.budget_id == "tokens"
    message = str(refused.value)
    assert "max_tokens" in message and "default_estimate" in message
    assert "pricing.default_max_tokens" in message


def test_the_policys_max_tokens_for_a_model_makes_its_calls_bounded() -> None:
    assert lines(llm("bounded-large", input_tokens=10), ("tokens",)) == {"tokens": (510, 510)}
    assert lines(llm("bounded-special", input_tokens=10), ("tokens",)) == {"tokens": (60, 60)}


def test_a_free_model_still_reserves_one_unit() -> None:
    assert lines(llm("free-model", input_tokens=10, max_tokens=10), ("dollars",)) == {
        "dollars": (1, 100_000)
    }


def test_a_tool_call_reserves_its_declared_cost_or_the_default() -> None:
    assert lines(Action.tool("tool-a", {"est_cost": 0.5})) == {"dollars": (500_000, 100_000)}
    for silent in ({}, {"est_cost": 0}):
        assert lines(Action.tool("tool-a", silent)) == {"dollars": (250_000, 100_000)}


def test_a_tool_call_a_budget_covers_with_no_cost_and_no_default_is_refused() -> None:
    strict = load_policy_text(
        "version: 1\nbudgets:\n  - {id: spend, limit: 1, unit: USD, kind: tool}\n"
        "  - {id: tokens, limit: 10, unit: tokens}\n"
    )
    with pytest.raises(CostUnknown) as refused:
        budget_lines(strict, Action.tool("lookup", {"q": "x"}))
    assert refused.value.budget_id == "spend" and "est_cost" in str(refused.value)
    with pytest.raises(CostUnknown) as refused:
        budget_lines(strict, Action.tool("lookup", {"q": "x", "est_cost": 0.1}))
    assert refused.value.budget_id == "tokens" and "kind: llm" in str(refused.value)


def test_a_cost_too_large_to_count_fails_closed() -> None:
    with pytest.raises(EvaluationError):
        lines(Action.tool("tool-a", {"est_cost": 10**12}))
    with pytest.raises(EvaluationError):
        lines(llm("paid-model", input_tokens=2**53, max_tokens=2**53), ("tokens",))


def test_the_real_usage_is_counted_and_priced_and_bounded() -> None:
    call = llm("paid-model", input_tokens=10, max_tokens=10)
    reserved = tuple(budget_lines(policy(), call))
    used = actual_units(
        reserved, policy(), "paid-model", {"prompt_tokens": 3000, "completion_tokens": 1000}
    )
    assert used == {"tokens": 4000, "tokens-with-default": 4000, "dollars": 16_000}
    with pytest.raises(EvaluationError, match="name the model"):
        actual_units(reserved, policy(), None, Usage(1, 1))
    with pytest.raises(AmountOutOfRange):
        actual_units(reserved, policy(), "paid-model", Usage(0, 2**53))
    with pytest.raises(EvaluationError):
        actual_units(reserved, policy(), "paid-model", {"prompt_tokens": 1.5})


@pytest.mark.parametrize("bad", [-1, 2**53 + 1, True, 1.0])
def test_a_usage_is_a_whole_number_of_tokens_up_to_2_53(bad: Any) -> None:
    with pytest.raises(ValueError):
        Usage(bad, 0)


# -- the policy fields -------------------------------------------------------------------


def test_max_overage_compiles_to_a_share_or_an_amount() -> None:
    tokens, with_default, dollars = policy().budgets
    assert tokens.max_overage is DEFAULT_OVERAGE
    assert with_default.max_overage == Overage(percent=Decimal(50))
    assert dollars.max_overage == Overage(units=100_000)
    assert (with_default.default_estimate, dollars.default_estimate) == (800, 250_000)
    assert tokens.default_estimate is None
    assert Overage(percent=Decimal("33.3")).headroom(10) == 4  # rounded up
    assert Overage(units=0).headroom(10) == 0


def budget(**fields: Any) -> str:
    return "version: 1\n" + yaml.safe_dump(
        {"budgets": [{"id": "b", "limit": 10, "unit": "tokens", "kind": "llm", **fields}]},
        sort_keys=False,
    )


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"default_estimate": 0}, "budgets.0.default_estimate", "greater than 0"),
        ({"default_estimate": "x"}, "budgets.0.default_estimate", "expected a number"),
        ({"default_estimate": 1e300}, "budgets.0.default_estimate", "too large"),
        ({"max_overage": -1}, "budgets.0.max_overage", "expected an amount ≥ 0"),
        ({"max_overage": "lots"}, "budgets.0.max_overage", "a percentage such as '50%'"),
        ({"max_overage": "2000%"}, "budgets.0.max_overage", "at most 1000%"),
        ({"max_overage": True}, "budgets.0.max_overage", "expected an amount"),
        ({"max_overage": 1e300}, "budgets.0.max_overage", "too large"),
    ],
)
def test_a_bad_budget_field_names_where_and_why(
    fields: dict[str, Any], field: str, message: str
) -> None:
    with pytest.raises(PolicyError) as failed:
        load_policy_text(budget(**fields), file="p.yaml")
    assert failed.value.field == field, str(failed.value)
    assert message in str(failed.value)


@pytest.mark.parametrize("tokens", [0, -5, 1.5, "many", 2**53 + 1])
def test_a_bad_default_max_tokens_is_refused(tokens: Any) -> None:
    with pytest.raises(PolicyError) as failed:
        compile_policy({"version": 1, "pricing": {"default_max_tokens": {"m": tokens}}})
    assert failed.value.field == "pricing.default_max_tokens.m"


@pytest.mark.parametrize(
    "section",
    [
        {"budgets": [{"id": "b", "limit": 1, "unit": "USD", "default_estimate": 0}]},
        {"budgets": [{"id": "b", "limit": 1, "unit": "USD", "max_overage": -1}]},
        {"budgets": [{"id": "b", "limit": 1, "unit": "USD", "max_overage": "half"}]},
        {"pricing": {"default_max_tokens": {"m": 0}}},
        {"pricing": {"default_max_tokens": {"m": 1.5}}},
    ],
)
def test_the_json_schema_refuses_what_the_loader_refuses(section: dict[str, Any]) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"version": 1, **section}, policy_json_schema())
    with pytest.raises(PolicyError):
        compile_policy({"version": 1, **section})


def test_the_json_schema_accepts_the_new_fields() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(yaml.safe_load(POLICY), policy_json_schema())


def test_lint_warns_of_a_token_budget_over_calls_that_state_no_tokens() -> None:
    advice = policy_advice(
        load_policy_text(
            "version: 1\nrules:\n  - {id: m, decision: allow, reason: r, kind: llm}\n"
            "budgets:\n  - {id: all-calls, limit: 10, unit: tokens}\n"
            "  - {id: models, limit: 10, unit: tokens, kind: llm}\n"
            "  - {id: covered, limit: 10, unit: tokens, default_estimate: 1}\n",
            file="p.yaml",
        )
    )
    assert advice == [
        "p.yaml:5: budget 'all-calls' counts tokens but also covers calls that are not "
        "model calls, which state no tokens: they will be refused; add kind: llm, or a "
        "default_estimate"
    ]
