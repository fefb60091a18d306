"""The plain validator (interlock.policy.validate) against the pydantic models.

The contract: whatever the plain validator accepts, the models accept with the very
same records (types included: ``5`` is not ``5.0``, ``Decimal('0.10')`` is not
``Decimal('0.1')``); whatever the models refuse, it refuses and hands to them, so
every error is theirs, word for word. It may hand them a policy they accept (a value
only their lax coercion takes); on a well-typed policy it never does.
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from interlock import PolicyError, load_policy_text
from interlock.policy import compile_policy, loader
from interlock.policy.schema import (
    ApprovalSettings,
    AuditSettings,
    BudgetModel,
    CommandPattern,
    Condition,
    Limits,
    PolicyModel,
    PricingSettings,
    RateLimitModel,
    RedactionSettings,
    RuleModel,
    ScopeSettings,
    ShellCondition,
    TokenPrice,
    ToolModel,
)
from interlock.policy.validate import validate_policy
from interlock.policy.validated import (
    ApprovalsData,
    AuditData,
    BudgetData,
    CommandData,
    ConditionData,
    LimitsData,
    PolicyData,
    PriceData,
    PricingData,
    RateLimitData,
    RedactionData,
    RuleData,
    ScopesData,
    ShellData,
    ToolData,
    from_model,
)

SETTINGS = settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def typed(value: Any) -> Any:
    """``value`` with the type of every part spelled out, for a comparison that
    ``==`` would blur (``1 == 1.0 == True``, ``Decimal('0.10') == Decimal('0.1')``)."""
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return (type(value).__name__, tuple((f, typed(getattr(value, f))) for f in value._fields))
    if isinstance(value, dict):
        return ("dict", tuple((typed(k), typed(v)) for k, v in value.items()))
    if isinstance(value, list):
        return ("list", tuple(typed(v) for v in value))
    if isinstance(value, frozenset):
        return ("frozenset", tuple(sorted(value)))
    if isinstance(value, Decimal):
        return ("Decimal", str(value))
    if isinstance(value, float):
        return ("float", "nan" if math.isnan(value) else repr(value))
    return (type(value).__name__, value)


def by_models(data: Any) -> PolicyData | None:
    try:
        return from_model(PolicyModel.model_validate(data))
    except ValidationError:
        return None


def assert_agrees(data: Any, *, sure: bool | None = None) -> PolicyData | None:
    """The plain validator's records are the models' (when it gives any); ``sure``:
    whether it must give them (True), must hand the data over (False), or either."""
    plain = validate_policy(data)
    reference = by_models(data)
    if plain is not None:
        assert reference is not None, "the plain validator accepted what the models refuse"
        assert typed(plain) == typed(reference)
    if sure is True:
        assert plain is not None, "a well-typed policy was handed to the models"
    if sure is False:
        assert plain is None
    return reference


# -- the models and the records have the same fields -------------------------------------


@pytest.mark.parametrize(
    ("model", "record"),
    [
        (Condition, ConditionData),
        (CommandPattern, CommandData),
        (ShellCondition, ShellData),
        (RuleModel, RuleData),
        (ScopeSettings, ScopesData),
        (ApprovalSettings, ApprovalsData),
        (Limits, LimitsData),
        (RedactionSettings, RedactionData),
        (BudgetModel, BudgetData),
        (RateLimitModel, RateLimitData),
        (TokenPrice, PriceData),
        (PricingSettings, PricingData),
        (AuditSettings, AuditData),
        (ToolModel, ToolData),
        (PolicyModel, PolicyData),
    ],
)
def test_every_record_has_the_fields_of_its_model(model: Any, record: Any) -> None:
    fields = set(record._fields) - {"given"}
    assert fields == set(model.model_fields)


def test_the_defaults_are_the_models() -> None:
    data = {
        "version": 1,
        "rules": [{"id": "r", "decision": "deny", "reason": "x", "params": {"path": {}}}],
        "budgets": [{"id": "b", "limit": 5, "unit": "tokens"}],
        "rate_limits": [{"id": "l", "limit": 1, "per": "1s"}],
        "tools": {"t": {"parameters": {}}},
    }
    data["rules"][0]["params"] = {"path": "/tmp/*"}  # type: ignore[index]
    assert assert_agrees(data, sure=True) is not None
    assert assert_agrees({"version": 1}, sure=True) is not None


# -- adversarial values next to their benign look-alikes ----------------------------------

RULE = {"id": "r", "decision": "deny", "reason": "x"}


def _rule(**fields: Any) -> dict[str, Any]:
    return {"version": 1, "rules": [{**RULE, **fields}]}


def _budget(**fields: Any) -> dict[str, Any]:
    return {"version": 1, "budgets": [{"id": "b", "limit": 5, "unit": "tokens", **fields}]}


@pytest.mark.parametrize(
    ("data", "sure"),
    [
        # ids: the models' `$` is the end of the text, never before a newline
        (_rule(id="shell-read.only:v2"), True),
        (_rule(id="shell\n"), False),
        (_rule(id="a" * 128), True),
        (_rule(id="a" * 129), False),
        (_rule(id="-leading-dash"), False),
        (_rule(id="é"), False),
        # text the models cannot encode
        (_rule(reason="café ✓"), True),
        (_rule(reason="a\ud800"), False),
        (_rule(reason=""), False),
        # lax coercions the models make and this does not
        ({"version": True}, False),
        ({"version": 1.0}, False),
        ({"version": 1, "limits": {"max_depth": 5}}, True),
        ({"version": 1, "limits": {"max_depth": 5.0}}, False),
        ({"version": 1, "limits": {"max_depth": True}}, False),
        ({"version": 1, "limits": {"max_depth": 1025}}, False),
        ({"version": 1, "limits": {"max_depth": 0}}, False),
        (_rule(params={"args.n": {"gt": 5}}), True),
        (_rule(params={"args.n": {"gt": 2**60}}), False),
        (_rule(params={"args.n": {"gt": True}}), False),
        (_rule(params={"args.n": {"gt": "5"}}), False),
        (_rule(params={"args.n": {"gt": math.inf}}), False),
        (_rule(params={"args.n": {"in_": [1]}}), False),
        (_rule(params={"args.n": {"in": [1, True, "a", 2.5]}}), True),
        (_rule(params={"args.n": {"in": [None]}}), False),
        (_rule(params={"args.n": {"eq": None}}), True),
        (_rule(params={"args.n": {}}), False),
        (_rule(params={"args.n": []}), True),
        (_rule(params={"args.n": [1]}), False),
        (_rule(params={"args.n": 0}), True),
        (_rule(params={"args.n": {"exists": 1}}), False),
        (_rule(params={"": "x"}), True),  # the compiler refuses it, with its own words
        (_rule(kind="llm"), True),
        (_rule(kind=["tool", "robot"]), False),
        (_rule(mode=None), False),
        (_rule(shell={"programs": []}), True),
        (_rule(shell={}), False),
        (_rule(shell={"commands": []}), False),
        (_rule(shell={"commands": [{"program": None}]}), False),
        (_rule(shell={"writes": 0}), False),
        # budgets: amounts and their text
        (_budget(limit=0.1, max_overage=0.3), True),
        (_budget(limit=1e-7, max_overage=" 50 % "), True),
        (_budget(limit=10**30), True),
        (_budget(limit=0), False),
        (_budget(limit=-1), False),
        (_budget(limit=math.nan), False),
        (_budget(limit=True), False),
        (_budget(limit="5"), False),
        (_budget(max_overage=None), False),
        (_budget(max_overage="1001%"), False),
        (_budget(max_overage=-0.5), False),
        (_budget(reason=None), True),
        (_budget(reason=""), False),
        (_budget(unit="USD"), True),
        (_budget(unit="usd"), False),
        (_budget(unit="tokens\n"), False),
        (_budget(default_estimate=None), True),
        (_budget(scope=None), False),
        # settings
        ({"version": 1, "scopes": None}, False),
        ({"version": 1, "approvals": {"ttl": None}}, False),
        ({"version": 1, "approvals": {"ttl": 30, "grant_ttl": 1.5}}, True),
        ({"version": 1, "approvals": {"ttl": True}}, False),
        ({"version": 1, "pricing": {"currency": "EUR"}}, True),
        ({"version": 1, "pricing": {"currency": "EURO"}}, False),
        ({"version": 1, "pricing": {"models": {"m": {"input": 0, "output": 1.5}}}}, True),
        ({"version": 1, "pricing": {"models": {"": {"input": 0, "output": 1}}}}, False),
        ({"version": 1, "pricing": {"models": {"m": {"input": -0.0, "output": 1}}}}, True),
        ({"version": 1, "pricing": {"default_max_tokens": {"m": 2**53}}}, True),
        ({"version": 1, "pricing": {"default_max_tokens": {"m": 2**53 + 1}}}, False),
        ({"version": 1, "pricing": {"default_max_tokens": {"m": True}}}, False),
        ({"version": 1, "rate_limits": [{"id": "l", "limit": True, "per": 1}]}, False),
        ({"version": 1, "rate_limits": [{"id": "l", "limit": 1}]}, False),
        ({"version": 1, "rate_limits": [{"id": "l", "limit": 1, "per": None}]}, False),
        ({"version": 1, "tools": {"t": {"parameters": {"\ud800": 1}}}}, False),
        ({"version": 1, "tools": {"t": {}}}, False),
        ({"version": 1, "audit": {"durability": "power"}}, True),
        ({"version": 1, "bogus": 1}, False),
        ([{"version": 1}], False),
        ("version: 1", False),
    ],
)
def test_an_adversarial_value_is_taken_only_as_the_models_take_it(data: Any, sure: bool) -> None:
    assert_agrees(data, sure=sure)


def test_a_value_only_lax_coercion_takes_still_loads_through_the_models() -> None:
    policy = load_policy_text("version: true\nlimits: {max_depth: 5.0}\n")
    assert policy.max_depth == 5


def test_the_errors_are_the_models_word_for_word(monkeypatch: pytest.MonkeyPatch) -> None:
    texts = [
        "version: 1\nrules:\n  - id: 'a\\n'\n    decision: deny\n    reason: x\n",
        "version: 1\nbudgets:\n  - {id: b, limit: 0, unit: tokens, max_overage: ~}\n",
        "version: 1\nrules:\n  - {id: r, decision: deny, reason: x, params: {a: {gt: lots}}}\n",
    ]
    with_plain = [_issues(text) for text in texts]
    monkeypatch.setattr(loader, "validate_policy", lambda data: None)
    assert with_plain == [_issues(text) for text in texts]
    assert all(with_plain)


def _issues(text: str) -> list[tuple[Any, ...]]:
    with pytest.raises(PolicyError) as caught:
        load_policy_text(text, file="p.yaml")
    return [(i.message, i.file, i.line, i.rule_id, i.field) for i in caught.value.issues]


# -- random policies ----------------------------------------------------------------------

TEXT = st.text(max_size=6)
NONEMPTY = st.text(min_size=1, max_size=6)
IDS = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.:\-]{0,8}", fullmatch=True)
GLOBS = st.one_of(TEXT, st.lists(TEXT, max_size=3))
SCALAR = st.one_of(TEXT, st.integers(-(2**70), 2**70), st.floats(allow_nan=False), st.booleans())
# Bounds the models take as that exact float (a larger int is handed to them: the table)
NUMBER = st.one_of(st.integers(-(2**53), 2**53), st.floats(allow_nan=False, allow_infinity=False))
AMOUNT = st.one_of(
    st.integers(1, 10**20), st.floats(min_value=1e-9, max_value=1e12, allow_nan=False)
)
DURATION = st.one_of(
    st.sampled_from(["1h", "15m", "500ms", " 2 d ", "30"]), st.integers(1, 10**6), AMOUNT
)
KIND = st.sampled_from(["tool", "llm", "mcp", "browser", "effect"])
KINDS = st.one_of(KIND, st.lists(KIND, max_size=3))

CONDITION = st.one_of(
    TEXT,
    st.lists(TEXT, max_size=2),
    SCALAR,
    st.fixed_dictionaries(
        {},
        optional={
            "glob": st.none() | GLOBS,
            "not_glob": st.none() | GLOBS,
            "regex": st.none() | GLOBS,
            "not_regex": GLOBS,
            "eq": st.none() | SCALAR,
            "ne": SCALAR,
            "in": st.none() | st.lists(SCALAR, max_size=3),
            "not_in": st.lists(SCALAR, max_size=3),
            "gt": st.none() | NUMBER,
            "gte": NUMBER,
            "lt": NUMBER,
            "lte": NUMBER,
            "exists": st.none() | st.booleans(),
        },
    ).filter(bool),
)
COMMAND = st.fixed_dictionaries(
    {"program": GLOBS},
    optional={"flags": st.lists(TEXT, max_size=2), "subcommand": GLOBS, "args": GLOBS},
)
SHELL = st.fixed_dictionaries(
    {},
    optional={
        "programs": GLOBS,
        "commands": st.lists(COMMAND, min_size=1, max_size=2),
        "writes": st.booleans(),
    },
).filter(bool)
RULE_DATA = st.fixed_dictionaries(
    {
        "id": IDS,
        "decision": st.sampled_from(["allow", "deny", "require_approval"]),
        "reason": NONEMPTY,
    },
    optional={
        "description": st.none() | TEXT,
        "mode": st.sampled_from(["enforce", "shadow"]),
        "kind": st.none() | KINDS,
        "name": st.none() | GLOBS,
        "scope": GLOBS,
        "agent": GLOBS,
        "tenant": GLOBS,
        "params": st.dictionaries(TEXT, CONDITION, max_size=3),
        "shell": st.none() | SHELL,
        "when": st.none() | TEXT,
    },
)
SELECTORS = {"kind": st.none() | KINDS, "name": GLOBS, "agent": GLOBS, "tenant": GLOBS}
BUDGET = st.fixed_dictionaries(
    {"id": IDS, "limit": AMOUNT, "unit": st.sampled_from(["tokens", "USD", "EUR"])},
    optional={
        "scope": st.sampled_from(["tenant", "agent", "session", "tool"]),
        "window": st.sampled_from(["none", "hour", "day", "month"]),
        "on_exceed": st.sampled_from(["deny", "require_approval"]),
        "reason": st.none() | NONEMPTY,
        "default_estimate": st.none() | AMOUNT,
        "max_overage": st.one_of(
            st.sampled_from(["50%", " 100 % ", "0%", "1000%", "2.5%"]),
            st.integers(0, 10**9),
            st.floats(min_value=0, max_value=1e9),
        ),
        **SELECTORS,
    },
)
RATE_LIMIT = st.fixed_dictionaries(
    {"id": IDS, "limit": st.integers(1, 10**6), "per": DURATION},
    optional={
        "key": st.sampled_from(["tenant", "agent", "session", "tool"]),
        "reason": st.none() | NONEMPTY,
        "rule": st.none() | GLOBS,
        **SELECTORS,
    },
)
JSONISH = st.recursive(
    st.none() | SCALAR, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner)
)
POLICY = st.fixed_dictionaries(
    {"version": st.just(1)},
    optional={
        "default": st.sampled_from(["allow", "deny", "require_approval"]),
        "mode": st.sampled_from(["enforce", "shadow"]),
        "description": st.none() | TEXT,
        "rules": st.lists(RULE_DATA, max_size=4),
        "scopes": st.fixed_dictionaries(
            {}, optional={"default": TEXT, "tools": st.dictionaries(TEXT, TEXT, max_size=2)}
        ),
        "approvals": st.fixed_dictionaries(
            {}, optional={"url": st.none() | TEXT, "ttl": DURATION, "grant_ttl": DURATION}
        ),
        "limits": st.fixed_dictionaries(
            {},
            optional={
                "max_depth": st.integers(1, 1024),
                "max_items": st.integers(1, 10**9),
                "max_param_chars": st.integers(1, 10**9),
            },
        ),
        "redaction": st.fixed_dictionaries({}, optional={"patterns": st.lists(TEXT, max_size=2)}),
        "budgets": st.lists(BUDGET, max_size=2),
        "rate_limits": st.lists(RATE_LIMIT, max_size=2),
        "pricing": st.fixed_dictionaries(
            {},
            optional={
                "currency": st.sampled_from(["USD", "EUR"]),
                "models": st.dictionaries(
                    NONEMPTY,
                    st.fixed_dictionaries({"input": AMOUNT | st.just(0), "output": AMOUNT}),
                    max_size=2,
                ),
                "default_max_tokens": st.dictionaries(NONEMPTY, st.integers(1, 2**53), max_size=2),
            },
        ),
        "audit": st.fixed_dictionaries(
            {}, optional={"durability": st.sampled_from(["none", "process", "power"])}
        ),
        "tools": st.dictionaries(
            NONEMPTY,
            st.fixed_dictionaries(
                {"parameters": st.dictionaries(TEXT, JSONISH, max_size=2)},
                optional={"description": st.none() | TEXT},
            ),
            max_size=2,
        ),
    },
)


@SETTINGS
@given(data=POLICY)
def test_a_well_typed_policy_gives_the_models_records_without_them(data: dict[str, Any]) -> None:
    assert_agrees(data, sure=True)


def _mutated(data: Any, draw: st.DrawFn) -> Any:
    """``data`` with one part replaced by any plain value, removed, or given an
    unknown key: most such policies are wrong, some only look it."""
    if isinstance(data, dict) and data and draw(st.booleans()):
        key = draw(st.sampled_from(sorted(data, key=repr)))
        choice = draw(st.integers(0, 3))
        changed = dict(data)
        if choice == 0:
            del changed[key]
        elif choice == 1:
            changed[draw(TEXT)] = draw(JSONISH)
        elif choice == 2:
            changed[key] = draw(JSONISH)
        else:
            changed[key] = _mutated(data[key], draw)
        return changed
    if isinstance(data, list) and data and draw(st.booleans()):
        index = draw(st.integers(0, len(data) - 1))
        changed_list = list(data)
        changed_list[index] = _mutated(data[index], draw)
        return changed_list
    return draw(JSONISH)


@SETTINGS
@given(data=st.data())
def test_a_mutated_policy_is_refused_whenever_the_models_refuse_it(data: st.DataObject) -> None:
    policy = data.draw(POLICY)
    mutated = _mutated(policy, data.draw)
    assert_agrees(mutated)


@SETTINGS
@given(data=st.data())
def test_a_mutated_policy_loads_or_fails_as_through_the_models_alone(
    data: st.DataObject,
) -> None:
    mutated = _mutated(data.draw(POLICY), data.draw)
    outcome = _outcome(mutated)
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(loader, "validate_policy", lambda data: None)
        assert _outcome(mutated) == outcome


def _outcome(data: Any) -> Any:
    try:
        policy = compile_policy(data)
    except PolicyError as exc:
        return [(i.message, i.line, i.rule_id, i.field) for i in exc.issues]
    return [(rule.id, rule.verdict, rule.reason, rule.line) for rule in policy.rules], (
        policy.default,
        policy.budgets,
        policy.rate_limits,
        policy.approval_policy,
        policy.scope_pins,
        policy.redaction_patterns,
        policy.max_depth,
    )
