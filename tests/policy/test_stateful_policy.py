"""Budgets, rate limits, pricing, audit and approval settings: from `interlock.yaml` to
the compiled specs the store and the guard act on."""

from __future__ import annotations

import calendar
from decimal import Decimal
from typing import Any

import pytest
import yaml

from interlock import Action, Context, PolicyError, Verdict, load_policy_text
from interlock.ledger.pricing import DEFAULT_PRICING, ModelPrice, PricingTable
from interlock.policy import CompiledPolicy, compile_policy, policy_json_schema
from interlock.policy.matchers import GlobSet
from interlock.policy.specs import (
    ApprovalPolicy,
    AuditPolicy,
    KeyScope,
    Selector,
    Window,
    parse_duration,
    scope_key,
    window_start,
)

RULES = """\
version: 1
rules:
  - id: shell-ok
    decision: allow
    reason: fine
  - id: net-ok
    decision: allow
    reason: fine
"""

EVERY_SECTION = (
    RULES
    + """\
budgets:
  - id: llm-daily
    limit: 25
    unit: USD
    scope: agent
    window: day
    on_exceed: require_approval
    reason: model spend is capped per agent
    kind: llm
    name: "gpt-*"
    agent: ["support-*", ops-bot]
    tenant: acme
  - id: tokens
    limit: 1000
    unit: tokens
    default_estimate: 50
    max_overage: 10
rate_limits:
  - id: shell-burst
    limit: 10
    per: 60s
    key: session
    reason: no floods
    kind: [tool, mcp]
    name: "shell*"
    agent: "ops-*"
    tenant: [acme, acme-eu]
    rule: [shell-ok, net-ok]
  - id: plain
    limit: 1
    per: 5
pricing:
  currency: USD
  models:
    "gpt-5": {input: 1.5, output: 12}
    "my-model-*": {input: 0.1, output: 0.4}
  default_max_tokens:
    "gpt-*": 4096
audit:
  durability: power
approvals:
  url: "https://approvals.example.com/{id}"
  ttl: 30m
  grant_ttl: 5m
"""
)


def load(text: str) -> CompiledPolicy:
    return load_policy_text(text, file="policy.yaml")


def error(text: str) -> PolicyError:
    with pytest.raises(PolicyError) as info:
        load(text)
    return info.value


def budget(**fields: Any) -> str:
    return "version: 1\n" + yaml.safe_dump({"budgets": [fields]}, sort_keys=False)


# Compiling each section


def test_a_budget_compiles_every_field() -> None:
    first = load(EVERY_SECTION).budgets[0]
    assert first.id == "llm-daily"
    assert first.limit == 25_000_000
    assert first.unit == "USD"
    assert first.scope == "agent"
    assert first.window == "day"
    assert first.on_exceed is Verdict.REQUIRE_APPROVAL
    assert first.reason == "model spend is capped per agent"
    assert first.line == 10
    selector = first.selector
    assert selector.kinds == frozenset({"llm"})
    assert selector.names == GlobSet.of("gpt-*")
    assert selector.agents == GlobSet.of(["support-*", "ops-bot"])
    assert selector.tenants == GlobSet.of("acme")
    assert selector.rules is None


def test_a_budget_defaults_to_tenant_wide_for_ever_and_deny() -> None:
    second = load(EVERY_SECTION).budgets[1]
    assert (second.id, second.limit, second.unit, second.is_tokens) == (
        "tokens",
        1000,
        "tokens",
        True,
    )
    assert (second.scope, second.window, second.on_exceed) == ("tenant", "none", Verdict.DENY)
    assert second.selector == Selector()
    assert second.reason is None
    assert second.line == 21


@pytest.mark.parametrize(
    ("limit", "unit", "units"),
    [
        (25, "USD", 25_000_000),
        (1000, "tokens", 1000),
        (0.0000015, "USD", 2),  # 1.5 micro-units, rounded up
        (0.1, "EUR", 100_000),  # exact, not 100000.00000000001
        (2.5, "tokens", 3),
    ],
)
def test_a_limit_is_counted_in_units_rounded_up(limit: float, unit: str, units: int) -> None:
    text = budget(id="b", limit=limit, unit=unit)
    if unit not in ("USD", "tokens"):
        text += f"pricing: {{currency: {unit}}}\n"
    assert load(text).budgets[0].limit == units


def test_a_rate_limit_compiles_every_field() -> None:
    first, second = load(EVERY_SECTION).rate_limits
    assert (first.id, first.limit, first.per_seconds, first.key) == (
        "shell-burst",
        10,
        60.0,
        "session",
    )
    assert first.reason == "no floods"
    assert first.line == 27
    assert first.selector == Selector(
        kinds=frozenset({"tool", "mcp"}),
        names=GlobSet.of("shell*"),
        agents=GlobSet.of("ops-*"),
        tenants=GlobSet.of(["acme", "acme-eu"]),
        rules=frozenset({"shell-ok", "net-ok"}),
    )
    assert (second.id, second.limit, second.per_seconds, second.key) == ("plain", 1, 5.0, "agent")
    assert second.selector == Selector()
    assert second.reason is None


def test_a_rate_limit_may_name_one_rule_as_a_string() -> None:
    text = RULES + "rate_limits:\n  - {id: r, limit: 3, per: 1s, rule: net-ok}\n"
    assert load(text).rate_limits[0].selector.rules == frozenset({"net-ok"})


def test_pricing_audit_and_approvals_compile() -> None:
    policy = load(EVERY_SECTION)
    assert policy.pricing.currency == "USD"
    assert policy.pricing.price("gpt-5") == ModelPrice(Decimal("1.5"), Decimal("12"))
    assert policy.pricing.price("my-model-xl") == ModelPrice(Decimal("0.1"), Decimal("0.4"))
    assert policy.pricing.price("o3") == DEFAULT_PRICING.price("o3")  # defaults still apply
    assert policy.audit == AuditPolicy(durability="power")
    assert policy.approval_policy == ApprovalPolicy(ttl=1800.0, grant_ttl=300.0)
    assert policy.approval_url == "https://approvals.example.com/{id}"


def test_a_policy_without_the_sections_gets_the_defaults() -> None:
    policy = load("version: 1\n")
    assert policy.budgets == ()
    assert policy.rate_limits == ()
    assert policy.pricing == DEFAULT_PRICING
    assert policy.audit.durability == "process"
    assert policy.approval_policy.ttl == 3600.0
    assert policy.approval_policy.grant_ttl == 900.0


@pytest.mark.parametrize("durability", ["none", "process", "power"])
def test_each_audit_durability_compiles(durability: str) -> None:
    policy = load(f"version: 1\naudit: {{durability: {durability}}}\n")
    assert policy.audit.durability == durability


def test_specs_compiled_from_plain_data_have_no_line() -> None:
    policy = compile_policy(
        {
            "version": 1,
            "budgets": [{"id": "b", "limit": 1, "unit": "tokens"}],
            "rate_limits": [{"id": "r", "limit": 1, "per": "1s"}],
        }
    )
    assert policy.budgets[0].line is None
    assert policy.rate_limits[0].line is None


# Errors: file, line and field


def _budgets(body: str) -> str:
    return "version: 1\nbudgets:\n" + body


@pytest.mark.parametrize(
    ("text", "line", "field", "message"),
    [
        (
            _budgets(
                "  - {id: b, limit: 1, unit: tokens}\n  - id: b\n    limit: 2\n    unit: tokens\n"
            ),
            4,
            "budgets.1.id",
            "duplicate budget id 'b' (first used by budget #1)",
        ),
        (
            _budgets("  - id: b\n    limit: 1\n    unit: EUR\n"),
            5,
            "budgets.0.unit",
            "budget 'b' counts EUR but prices are in USD; set pricing.currency or use tokens",
        ),
        (
            _budgets("  - id: b\n    limit: 1\n    unit: USD\npricing:\n  currency: EUR\n"),
            5,
            "budgets.0.unit",
            "budget 'b' counts USD but prices are in EUR",
        ),
        (
            _budgets("  - id: b\n    limit: 0\n    unit: USD\n"),
            4,
            "budgets.0.limit",
            "budget 'b': Input should be greater than 0",
        ),
        (
            _budgets("  - id: b\n    limit: true\n    unit: USD\n"),
            4,
            "budgets.0.limit",
            "budget 'b': Value error, expected a number, not True",
        ),
        (
            _budgets("  - id: b\n    limit: 1.0e+300\n    unit: USD\n"),
            4,
            "budgets.0.limit",
            "budget 'b': the limit is too large",
        ),
        (
            _budgets("  - id: b\n    limit: 1\n    unit: usd\n"),
            5,
            "budgets.0.unit",
            "budget 'b': String should match pattern",
        ),
        (
            _budgets("  - id: b\n    limit: 1\n    unit: USD\n    scope: shell\n"),
            6,
            "budgets.0.scope",
            "budget 'b': Input should be 'tenant', 'agent', 'session' or 'tool'",
        ),
        (
            _budgets("  - id: b\n    limit: 1\n    unit: USD\n    window: week\n"),
            6,
            "budgets.0.window",
            "Input should be 'none', 'hour', 'day' or 'month'",
        ),
        (
            _budgets("  - id: b\n    limit: 1\n    unit: USD\n    on_exceed: allow\n"),
            6,
            "budgets.0.on_exceed",
            "Input should be 'deny' or 'require_approval'",
        ),
        (
            _budgets("  - id: b\n    limit: 1\n    unit: USD\n    kind: tools\n"),
            6,
            "budgets.0.kind",
            "budget 'b': Value error, unknown kind 'tools'",
        ),
        (
            _budgets("  - id: b\n    limit: 1\n    unit: USD\n    colour: red\n"),
            6,
            "budgets.0.colour",
            "budget 'b': unknown field 'colour'",
        ),
        (
            _budgets("  - limit: 1\n    unit: USD\n"),
            3,
            "budgets.0.id",
            "budget #1: missing required field 'id'",
        ),
        (
            "version: 1\nrate_limits:\n  - {id: r, limit: 1, per: 1s}\n"
            "  - {id: r, limit: 2, per: 1s}\n",
            4,
            "rate_limits.1.id",
            "duplicate rate limit id 'r' (first used by rate limit #1)",
        ),
        (
            "version: 1\nrate_limits:\n  - id: r\n    limit: 1\n    per: ten\n",
            5,
            "rate_limits.0.per",
            "rate limit 'r': not a duration: 'ten'",
        ),
        (
            "version: 1\nrate_limits:\n  - id: r\n    limit: 1\n    per: '0'\n",
            5,
            "rate_limits.0.per",
            "rate limit 'r': a duration must be positive",
        ),
        (
            "version: 1\nrate_limits:\n  - id: r\n    limit: 1\n    per: .inf\n",
            5,
            "rate_limits.0.per",
            "a duration must be positive and finite",
        ),
        (
            "version: 1\nrate_limits:\n  - id: r\n    limit: 1\n    per: true\n",
            5,
            "rate_limits.0.per",
            "rate limit 'r': Value error, not a duration: True",
        ),
        (
            "version: 1\nrate_limits:\n  - id: r\n    limit: 0\n    per: 1\n",
            4,
            "rate_limits.0.limit",
            "rate limit 'r': Input should be greater than or equal to 1",
        ),
        (
            "version: 1\nrate_limits:\n  - id: r\n    limit: true\n    per: 1\n",
            4,
            "rate_limits.0.limit",
            "Input should be a valid integer",
        ),
        (
            RULES + "rate_limits:\n  - id: r\n    limit: 1\n    per: 1\n    rule: shell-okay\n",
            13,
            "rate_limits.0.rule",
            "rate limit 'r' counts actions allowed by rule 'shell-okay', which is not a rule",
        ),
        (
            RULES + "rate_limits:\n  - id: r\n    limit: 1\n    per: 1\n    rule:\n"
            "      - shell-ok\n      - nett-ok\n",
            15,
            "rate_limits.0.rule.1",
            "rule 'nett-ok', which is not a rule of this policy",
        ),
        (
            "version: 1\npricing:\n  models:\n    gpt-5:\n      input: -1\n      output: 1\n",
            5,
            "pricing.models.gpt-5.input",
            "Input should be greater than or equal to 0",
        ),
        (
            "version: 1\npricing:\n  currency: euro\n",
            3,
            "pricing.currency",
            "String should match pattern",
        ),
        (
            "version: 1\naudit:\n  durability: disk\n",
            3,
            "audit.durability",
            "Input should be 'none', 'process' or 'power'",
        ),
        (
            "version: 1\napprovals:\n  ttl: -1\n",
            3,
            "approvals.ttl",
            "a duration must be positive",
        ),
        (
            "version: 1\napprovals:\n  grant_ttl: soon\n",
            3,
            "approvals.grant_ttl",
            "not a duration: 'soon'",
        ),
    ],
)
def test_a_bad_section_names_file_line_and_field(
    text: str, line: int, field: str, message: str
) -> None:
    problem = error(text)
    assert problem.line == line, str(problem)
    assert problem.field == field, str(problem)
    assert problem.rule_id is None, str(problem)
    assert message in str(problem)
    assert str(problem).startswith(f"policy.yaml:{line}: field {field!r}: ")


def test_every_problem_in_the_sections_is_reported() -> None:
    problem = error(
        _budgets("  - {id: a, limit: 1, unit: EUR}\n  - {id: a, limit: 1, unit: tokens}\n")
        + "rate_limits:\n  - {id: r, limit: 1, per: never, rule: nope}\n"
        + "approvals: {ttl: 0}\n"
    )
    assert [issue.field for issue in problem.issues] == [
        "budgets.0.unit",
        "budgets.1.id",
        "rate_limits.0.per",
        "rate_limits.0.rule",
        "approvals.ttl",
    ]


# Durations


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("500ms", 0.5), ("10s", 10.0), (5, 5.0), (0.25, 0.25), ("5m", 300.0), ("1h", 3600.0),
     ("1d", 86400.0), ("1.5h", 5400.0), (" 2 m ", 120.0), ("30", 30.0)],
)  # fmt: skip
def test_a_duration_is_seconds_or_a_number_with_a_unit(value: str | float, seconds: float) -> None:
    assert parse_duration(value) == seconds
    policy = load(f"version: 1\nrate_limits:\n  - id: r\n    limit: 1\n    per: {value!r}\n")
    assert policy.rate_limits[0].per_seconds == seconds


@pytest.mark.parametrize(
    "value", ["-1", "0", "0s", "ten", "1w", "", "1e3", True, False, -1, 0, float("inf"), 10**400]
)
def test_a_duration_that_is_not_positive_and_finite_is_refused(value: Any) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(value)


# Pricing


def price(input_per_million: str, output_per_million: str) -> ModelPrice:
    return ModelPrice(Decimal(input_per_million), Decimal(output_per_million))


def test_an_exact_name_beats_a_glob_whatever_the_order_given() -> None:
    table = PricingTable().with_overrides(
        {"acme-*": price("1", "1"), "acme-large": price("9", "9")}
    )
    assert table.price("acme-large") == price("9", "9")
    assert table.price("acme-small") == price("1", "1")


def test_globs_apply_in_the_order_given() -> None:
    table = PricingTable().with_overrides({"acme-l*": price("2", "2"), "acme-*": price("1", "1")})
    assert table.price("acme-large") == price("2", "2")
    reordered = PricingTable().with_overrides(
        {"acme-*": price("1", "1"), "acme-l*": price("2", "2")}
    )
    assert reordered.price("acme-large") == price("1", "1")


def test_overrides_beat_the_defaults_even_a_user_glob_over_a_default_exact_name() -> None:
    table = DEFAULT_PRICING.with_overrides({"gpt-5*": price("7", "70")})
    assert table.price("gpt-5") == price("7", "70")
    assert table.price("gpt-5-mini-2025-08-07") == price("7", "70")
    assert table.price("o3") == DEFAULT_PRICING.price("o3")
    assert DEFAULT_PRICING.price("gpt-5") == price("1.25", "10")  # the defaults are untouched


def test_another_currency_drops_the_usd_defaults() -> None:
    policy = load(
        'version: 1\npricing:\n  currency: EUR\n  models: {"gpt-5": {input: 1, output: 8}}\n'
    )
    assert policy.pricing.currency == "EUR"
    assert policy.pricing.price("gpt-5") == price("1", "8")
    assert policy.pricing.price("gpt-5-mini") is None
    assert policy.pricing.price("claude-sonnet-4-20250514") is None
    assert DEFAULT_PRICING.with_overrides({}, currency="GBP").entries == ()


def test_an_unknown_model_has_no_price_and_no_cost() -> None:
    assert DEFAULT_PRICING.price("llama-3-70b") is None
    assert DEFAULT_PRICING.cost("llama-3-70b", 1000, 1000) is None


def test_cost_is_exact_decimal_arithmetic() -> None:
    table = PricingTable().with_overrides({"m": price("0.1", "0.3")})
    assert table.cost("m", 1, 1) == Decimal("0.0000004")
    assert table.cost("m", 3_000_000, 1_000_000) == Decimal("0.6")
    assert DEFAULT_PRICING.cost("gpt-5", 1_234, 567) == Decimal("0.0072125")
    assert DEFAULT_PRICING.cost("gpt-5", 0, 0) == 0
    with pytest.raises(ValueError, match="token counts"):
        table.cost("m", -1, 0)


@pytest.mark.parametrize(
    ("model", "input_per_million", "output_per_million"),
    [
        ("gpt-5", "1.25", "10"),
        ("gpt-5-2025-08-07", "1.25", "10"),
        ("gpt-5-mini", "0.25", "2"),
        ("gpt-5-nano", "0.05", "0.4"),
        ("gpt-4.1", "2", "8"),
        ("gpt-4.1-mini-2025-04-14", "0.4", "1.6"),
        ("gpt-4o", "2.5", "10"),
        ("gpt-4o-2024-08-06", "2.5", "10"),
        ("gpt-4o-mini-2024-07-18", "0.15", "0.6"),  # not caught by gpt-4o's glob
        ("o3", "2", "8"),
        ("o4-mini", "1.1", "4.4"),
        ("claude-opus-4-20250514", "15", "75"),
        ("claude-opus-4-1", "15", "75"),
        ("claude-opus-4-5-20251101", "5", "25"),
        ("claude-sonnet-4-20250514", "3", "15"),
        ("claude-sonnet-4-5", "3", "15"),
        ("claude-haiku-4-5-20251001", "1", "5"),
        ("gemini-2.5-pro", "1.25", "10"),
        ("gemini-2.5-flash", "0.3", "2.5"),
        ("gemini-2.5-flash-lite", "0.1", "0.4"),
    ],
)
def test_the_shipped_defaults_price_common_models_in_usd(
    model: str, input_per_million: str, output_per_million: str
) -> None:
    assert DEFAULT_PRICING.currency == "USD"
    assert DEFAULT_PRICING.price(model) == price(input_per_million, output_per_million)


def test_a_price_or_currency_that_makes_no_sense_is_refused() -> None:
    with pytest.raises(ValueError, match="price"):
        price("-0.01", "1")
    with pytest.raises(ValueError, match="price"):
        ModelPrice(Decimal("NaN"), Decimal(1))
    with pytest.raises(ValueError, match="currency"):
        PricingTable(currency="usd")


# Selectors, keys and windows


def action(kind: str = "tool", name: str = "shell", **context: Any) -> Action:
    return Action(kind=kind, name=name, context=Context(**context))


@pytest.mark.parametrize(
    ("selector", "matching", "other"),
    [
        (Selector(kinds=frozenset({"llm"})), action(kind="llm"), action(kind="tool")),
        (Selector(names=GlobSet.of("refund_*")), action(name="refund_big"), action(name="email")),
        (
            Selector(agents=GlobSet.of("ops-*")),
            action(agent="ops-bot"),
            action(agent="sales-bot"),
        ),
        (Selector(agents=GlobSet.of("*")), action(agent="anyone"), action()),  # no agent
        (Selector(tenants=GlobSet.of("acme")), action(tenant="acme"), action(tenant="globex")),
    ],
)
def test_a_selector_matches_what_it_names_and_nothing_else(
    selector: Selector, matching: Action, other: Action
) -> None:
    assert selector.matches(matching)
    assert not selector.matches(other)


def test_a_selector_with_rules_counts_only_actions_those_rules_allowed() -> None:
    selector = Selector(rules=frozenset({"shell-ok"}))
    assert selector.matches(action(), ("net-ok", "shell-ok"))
    assert not selector.matches(action(), ("net-ok",))
    assert not selector.matches(action())  # the default decided: no rule allowed it


def test_an_empty_selector_matches_everything_and_all_selectors_must_hold() -> None:
    assert Selector().matches(action(kind="browser", name="click"))
    both = Selector(kinds=frozenset({"tool"}), tenants=GlobSet.of("acme"))
    assert both.matches(action(tenant="acme"))
    assert not both.matches(action(kind="llm", tenant="acme"))
    assert not both.matches(action(tenant="globex"))


@pytest.mark.parametrize(
    ("scope", "context", "key"),
    [
        ("tenant", {"tenant": "acme", "agent": "a"}, "tenant"),
        ("agent", {"agent": "support-bot"}, "agent:support-bot"),
        ("agent", {}, "agent:?"),
        ("session", {"session_id": "s-1"}, "session:s-1"),
        ("session", {}, "session:?"),
        ("tool", {"agent": "a"}, "tool:shell"),
    ],
)
def test_scope_key_names_what_is_counted_separately(
    scope: KeyScope, context: dict[str, Any], key: str
) -> None:
    assert scope_key(scope, action(**context)) == key


def _utc(*fields: int) -> int:
    return calendar.timegm((*fields, *([0] * (6 - len(fields)))))


@pytest.mark.parametrize(
    ("window", "now", "start"),
    [
        ("none", _utc(2025, 3, 15, 13, 45, 30), 0),
        ("hour", _utc(2025, 3, 15, 13, 45, 30), _utc(2025, 3, 15, 13)),
        ("hour", _utc(2025, 3, 15, 13), _utc(2025, 3, 15, 13)),
        ("hour", _utc(2025, 3, 15, 13) - 1, _utc(2025, 3, 15, 12)),
        ("day", _utc(2025, 3, 15, 23, 59, 59), _utc(2025, 3, 15)),
        ("day", _utc(2025, 3, 16), _utc(2025, 3, 16)),
        ("month", _utc(2025, 3, 15, 13, 45, 30), _utc(2025, 3, 1)),
        ("month", _utc(2024, 2, 29, 23, 59, 59), _utc(2024, 2, 1)),
        ("month", _utc(2025, 1, 1) - 1, _utc(2024, 12, 1)),
    ],
)
def test_window_start_is_the_utc_start_of_the_window(window: Window, now: int, start: int) -> None:
    assert window_start(window, now) == start
    assert window_start(window, now + 0.25) == start


# The published JSON schema


def test_the_json_schema_accepts_a_policy_with_every_section() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = policy_json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(yaml.safe_load(EVERY_SECTION), schema)


@pytest.mark.parametrize(
    "section",
    [
        {"budgets": [{"id": "b", "limit": 0, "unit": "USD"}]},
        {"budgets": [{"id": "b", "limit": 1, "unit": "usd"}]},
        {"budgets": [{"id": "b", "limit": 1, "unit": "USD", "scope": "shell"}]},
        {"rate_limits": [{"id": "r", "limit": 0, "per": 1}]},
        {"rate_limits": [{"id": "r", "limit": 1, "per": "ten"}]},
        {"rate_limits": [{"id": "r", "limit": 1, "per": -1}]},
        {"pricing": {"models": {"m": {"input": -1, "output": 1}}}},
        {"pricing": {"currency": "euro"}},
        {"audit": {"durability": "disk"}},
        {"approvals": {"ttl": "soon"}},
    ],
)
def test_the_json_schema_refuses_what_the_loader_refuses(section: dict[str, Any]) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"version": 1, **section}, policy_json_schema())
    with pytest.raises(PolicyError):
        compile_policy({"version": 1, **section})


def test_every_new_field_is_described_in_the_json_schema() -> None:
    definitions = policy_json_schema()["$defs"]
    for name in ("BudgetModel", "RateLimitModel", "TokenPrice", "PricingSettings", "AuditSettings"):
        for field, spec in definitions[name]["properties"].items():
            assert spec.get("description"), f"{name}.{field}"
    for field in ("ttl", "grant_ttl"):
        assert definitions["ApprovalSettings"]["properties"][field]["description"]
