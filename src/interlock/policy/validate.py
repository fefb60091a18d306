"""Validating ``interlock.yaml`` without pydantic, for the policies it is sure of.

:func:`validate_policy` builds the records of :mod:`interlock.policy.validated` from
the plain data of a policy, accepting only values whose meaning is certain: exact
types (a ``str`` is a ``str``, never text that pydantic's lax mode would coerce), the
same constraints and the same defaults as the models of :mod:`interlock.policy.schema`.
For anything else — an error, or a value only lax coercion would accept — it returns
``None``, and the loader asks the models, which word every error with its file, line
and field exactly as before. So the two can differ only in speed: the models are
imported (~100 ms with pydantic) only by a policy that needs them (ADR 0014, fourth
pass; tests/policy/test_validate.py checks that both give the same records, and that
this refuses whatever the models refuse).

The constraints both use are defined here once (the models import them).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any, Final, NoReturn

from interlock.policy.validated import (
    SEVERITY_ORDER,
    ApprovalsData,
    AuditData,
    BudgetData,
    CommandData,
    ConditionData,
    LabelRuleData,
    LimitsData,
    PolicyData,
    PriceData,
    PricingData,
    RateLimitData,
    RedactionData,
    RuleData,
    ScopesData,
    SessionAfterData,
    SessionConditionData,
    SessionData,
    SessionFlowData,
    SessionProvenanceData,
    ShellData,
    ToolData,
)
from interlock.session.labels import LABEL

__all__ = [
    "EXTRACTED_PARAMS",
    "KINDS",
    "PERCENT",
    "SEVERITIES",
    "SEVERITY_ORDER",
    "a_duration",
    "a_number",
    "an_overage",
    "check_kinds",
    "validate_policy",
]

#: Parameters the extractor derives from a call's arguments; conditions name these,
#: or ``args.<dotted.path>`` for any declared argument.
EXTRACTED_PARAMS: tuple[str, ...] = (
    "command",
    "url",
    "domain",
    "site",
    "scheme",
    "port",
    "ip_class",
    "path",
    "verb",
    "session_id",
    "est_cost",
    "target",
    # MCP tools (kind: mcp): the upstream server and the tool's annotation hints.
    "server",
    "read_only",
    "destructive",
    "idempotent",
    "open_world",
)

KINDS: frozenset[str] = frozenset({"tool", "llm", "mcp", "browser", "effect"})

#: The values of a rule's ``severity``.
SEVERITIES: frozenset[str] = frozenset(SEVERITY_ORDER)

#: A percentage of each reservation, as ``max_overage`` takes it.
PERCENT: Final = r"^\s*\d+(\.\d+)?\s*%\s*$"


def a_number(value: Any) -> Any:
    """YAML gives int or float; refuse booleans and text rather than coerce them."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"expected a number, not {value!r}")
    return value


def a_duration(value: Any) -> Any:
    """Checked in full (and converted to seconds) when the policy compiles."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"not a duration: {value!r}")
    return value


def an_overage(value: Any) -> Any:
    """An amount (a number ≥ 0, as for ``limit``) or a share of each reservation
    (``"50%"``)."""
    if isinstance(value, str):
        if re.fullmatch(PERCENT, value) is None:
            raise ValueError(f"expected an amount ≥ 0 or a percentage such as '50%', not {value!r}")
        if Decimal(value.strip().rstrip("%").strip()) > 1000:
            raise ValueError(f"a percentage of at most 1000%, not {value!r}")
        return value.strip()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"expected an amount ≥ 0 or a percentage such as '50%', not {value!r}")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"expected an amount ≥ 0, not {value!r}")
    return Decimal(str(value))


def check_kinds(value: str | list[str] | None) -> str | list[str] | None:
    """``value`` if every kind it names is one of :data:`KINDS`."""
    for kind in [value] if isinstance(value, str) else value or []:
        if kind not in KINDS:
            raise ValueError(f"unknown kind {kind!r}; expected one of {sorted(KINDS)}")
    return value


class _Unsure(Exception):
    """The models decide: the value is wrong, or right only by lax coercion."""


_UNSURE: Final = _Unsure()
_ABSENT: Final[Any] = object()  # a key the data does not have (``None`` is its null)


def _unsure() -> NoReturn:
    raise _UNSURE


# The id patterns of the models, as `fullmatch` reads them (the models' `^...$` are
# pydantic's Rust regexes, where `$` is the end of the text, never before a newline).
_RULE_ID: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:\-]*")
_UNIT: Final = re.compile(r"[A-Z]{3}|tokens")
_CURRENCY: Final = re.compile(r"[A-Z]{3}")
_MAX_ID: Final = 128
_MAX_TOKENS: Final = 2**53
# An int the models' `float` fields take as that exact float (larger ones: the models).
_EXACT_FLOAT_INT: Final = 2**53


def _text(value: Any) -> str:
    # pydantic refuses a str it cannot encode (a lone surrogate): only the models say so.
    if type(value) is not str or not (value.isascii() or _encodes(value)):
        _unsure()
    return value


def _encodes(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _opt_text(value: Any) -> str | None:
    return None if value is None else _text(value)


def _nonempty_text(value: Any) -> str:
    if not _text(value):
        _unsure()
    return value  # type: ignore[no-any-return]


def _texts(value: Any) -> list[str]:
    if type(value) is not list:
        _unsure()
    for item in value:
        _text(item)
    return value


def _globs(value: Any) -> str | list[str] | None:
    """``str | list[str] | None``: Globs, kinds, scopes and rule ids alike."""
    if value is None:
        return None
    if type(value) is str:
        return _text(value)
    return _texts(value)


def _required_globs(value: Any) -> str | list[str]:
    if value is None:
        _unsure()
    found = _globs(value)
    assert found is not None
    return found


def _choice(value: Any, choices: frozenset[str]) -> Any:
    if type(value) is not str or value not in choices:
        _unsure()
    return value


def _flag(value: Any) -> bool | None:
    if value is not None and type(value) is not bool:
        _unsure()
    return value


def _strict_flag(value: Any) -> bool:
    if type(value) is not bool:
        _unsure()
    return value


def _int(value: Any, low: int, high: int | None = None) -> int:
    if type(value) is not int or value < low or (high is not None and value > high):
        _unsure()
    return value


def _float(value: Any) -> float | None:
    """A condition's bound: the models' ``float`` (an int becomes its float), finite."""
    if value is None:
        return None
    if type(value) is int and -_EXACT_FLOAT_INT <= value <= _EXACT_FLOAT_INT:
        return float(value)
    if type(value) is not float or not math.isfinite(value):
        _unsure()
    return value


def _decimal(value: Any, *, positive: bool) -> Decimal:
    """An amount (``> 0``) or a price (``≥ 0``): a number, never a bool or text,
    finite, as the models' ``Decimal`` takes it (an int exactly, a float by its
    ``str``)."""
    if type(value) is int:
        amount = Decimal(value)
    elif type(value) is float and math.isfinite(value):
        amount = Decimal(str(value))
    else:
        _unsure()
    if amount < 0 or (positive and amount == 0):
        _unsure()
    return amount


def _duration(value: Any, default: str | None = None) -> str | int | float:
    if value is _ABSENT and default is not None:
        return default
    if type(value) not in (str, int, float):
        _unsure()
    return _text(value) if type(value) is str else value


def _id(value: Any) -> str:
    text = _text(value)
    if len(text) > _MAX_ID or _RULE_ID.fullmatch(text) is None:
        _unsure()
    return text


def _mapping(value: Any, keys: frozenset[str]) -> dict[str, Any]:
    """A mapping whose every key is one of ``keys`` (the models forbid extra fields)."""
    if type(value) is not dict or not keys.issuperset(value):
        _unsure()
    return value


def _entries(value: Any) -> list[Any]:
    if type(value) is not list:
        _unsure()
    return value


def _text_keys(value: Any, *, nonempty: bool = False) -> dict[str, Any]:
    if type(value) is not dict:
        _unsure()
    for key in value:
        _text(key)
        if nonempty and not key:
            _unsure()
    return value


# -- conditions and rules ----------------------------------------------------------------

_CONDITION_KEYS: Final = frozenset(
    {"glob", "not_glob", "regex", "not_regex", "eq", "ne", "in", "not_in"}
    | {"gt", "gte", "lt", "lte", "exists"}
)
_SCALARS: Final = (str, int, float, bool)


def _scalar(value: Any) -> str | int | float | bool | None:
    if value is None:
        return None
    if type(value) not in _SCALARS:
        _unsure()
    return _text(value) if type(value) is str else value


def _scalars(value: Any) -> list[str | int | float | bool] | None:
    if value is None:
        return None
    for item in _entries(value):
        if item is None:
            _unsure()
        _scalar(item)
    return value  # type: ignore[no-any-return]


def _condition(value: Any) -> ConditionData:
    # The shorthands of `Condition._shorthand`: a glob, a list of globs, a value.
    if type(value) is str or (type(value) is list and all(type(v) is str for v in value)):
        value = {"glob": value}
    elif type(value) in (bool, int, float):
        value = {"eq": value}
    data = _mapping(value, _CONDITION_KEYS)
    if not data:
        _unsure()
    get = data.get
    return ConditionData(
        glob=_globs(get("glob")),
        not_glob=_globs(get("not_glob")),
        regex=_globs(get("regex")),
        not_regex=_globs(get("not_regex")),
        eq=_scalar(get("eq")),
        ne=_scalar(get("ne")),
        in_=_scalars(get("in")),
        not_in=_scalars(get("not_in")),
        gt=_float(get("gt")),
        gte=_float(get("gte")),
        lt=_float(get("lt")),
        lte=_float(get("lte")),
        exists=_flag(get("exists")),
        given=frozenset(["in_" if key == "in" else key for key in data]),
    )


_COMMAND_KEYS: Final = frozenset({"program", "flags", "subcommand", "args"})
_SHELL_KEYS: Final = frozenset({"programs", "commands", "writes"})


def _command(value: Any) -> CommandData:
    data = _mapping(value, _COMMAND_KEYS)
    flags = data.get("flags")
    return CommandData(
        program=_required_globs(data.get("program")),
        flags=None if flags is None else _texts(flags),
        subcommand=_globs(data.get("subcommand")),
        args=_globs(data.get("args")),
    )


def _shell(value: Any) -> ShellData | None:
    if value is None:
        return None
    data = _mapping(value, _SHELL_KEYS)
    commands = data.get("commands")
    shell = ShellData(
        programs=_globs(data.get("programs")),
        commands=None if commands is None else [_command(c) for c in _entries(commands)],
        writes=_flag(data.get("writes")),
    )
    if shell.programs is None and shell.commands is None and shell.writes is None:
        _unsure()
    if shell.commands is not None and not shell.commands:
        _unsure()
    return shell


_RULE_KEYS: Final = frozenset(RuleData._fields)
_DECISIONS: Final = frozenset({"allow", "deny", "require_approval"})
_MODES: Final = frozenset({"enforce", "shadow"})


def _kinds(value: Any) -> str | list[str] | None:
    kinds = _globs(value)
    for kind in [kinds] if isinstance(kinds, str) else kinds or ():
        if kind not in KINDS:
            _unsure()
    return kinds


def _rule(value: Any) -> RuleData:
    data = _mapping(value, _RULE_KEYS)
    if "grant" in data:
        _unsure()  # as for a tool's grant
    get = data.get
    params = get("params", {})
    return RuleData(
        id=_id(get("id")),
        decision=_choice(get("decision"), _DECISIONS),
        reason=_nonempty_text(get("reason")),
        description=_opt_text(get("description")),
        mode=_choice(get("mode", "enforce"), _MODES),
        kind=_kinds(get("kind")),
        name=_globs(get("name")),
        scope=_globs(get("scope")),
        agent=_globs(get("agent")),
        tenant=_globs(get("tenant")),
        params={key: _condition(c) for key, c in _text_keys(params).items()},
        shell=_shell(get("shell")),
        when=_opt_text(get("when")),
        severity=None if get("severity") is None else _choice(get("severity"), SEVERITIES),
        session=_session_condition(get("session")),
    )


# -- session conditions, label rules and settings ---------------------------------------


_AFTER_KEYS: Final = frozenset(SessionAfterData._fields)
_FLOW_KEYS: Final = frozenset(SessionFlowData._fields)
_PROVENANCE_KEYS: Final = frozenset({"args", "from"})
_SESSION_CONDITION_KEYS: Final = frozenset(SessionConditionData._fields)
_LABEL_RULE_KEYS: Final = frozenset(LabelRuleData._fields)


def _labels(value: Any) -> list[str] | None:
    """``Labels | None``: a non-empty list of label names."""
    if value is None:
        return None
    labels = _texts(value)
    if not labels:
        _unsure()
    for label in labels:
        if LABEL.fullmatch(label) is None:
            _unsure()
    return labels


def _names(value: Any, *, required: bool) -> list[str] | None:
    """A non-empty list of non-empty argument names."""
    if value is None and not required:
        return None
    names = _texts(value)
    if not names or not all(names):
        _unsure()
    return names


def _session_condition(value: Any) -> SessionConditionData | None:
    if value is None:
        return None
    data = _mapping(value, _SESSION_CONDITION_KEYS)
    after = data.get("after")
    flow = data.get("flows_from")
    provenance = data.get("provenance")
    found = SessionConditionData(
        labels=_labels(data.get("labels")),
        after=None if after is None else _after(after),
        flows_from=None if flow is None else _flow(flow),
        provenance=None if provenance is None else _provenance(provenance),
    )
    if all(part is None for part in found):
        _unsure()
    return found


def _after(value: Any) -> SessionAfterData:
    data = _mapping(value, _AFTER_KEYS)
    within = data.get("within")
    within_time = data.get("within_time")
    return SessionAfterData(
        name=_globs(data.get("name")),
        kind=_kinds(data.get("kind")),
        labels=_labels(data.get("labels")),
        within=None if within is None else _int(within, 1),
        within_time=None if within_time is None else _duration(within_time),
        at_least=_int(data.get("at_least", 1), 1),
    )


def _flow(value: Any) -> SessionFlowData:
    data = _mapping(value, _FLOW_KEYS)
    return SessionFlowData(
        name=_globs(data.get("name")),
        kind=_kinds(data.get("kind")),
        labels=_labels(data.get("labels")),
        args=_names(data.get("args"), required=False),
    )


def _provenance(value: Any) -> SessionProvenanceData:
    data = _mapping(value, _PROVENANCE_KEYS)
    args = _names(data.get("args"), required=True)
    sources = _labels(data.get("from"))
    if args is None or sources is None:
        _unsure()
    return SessionProvenanceData(args=args, from_=sources)


def _label_rule(value: Any) -> LabelRuleData:
    data = _mapping(value, _LABEL_RULE_KEYS)
    get = data.get
    params = get("params", {})
    found = LabelRuleData(
        id=_id(get("id")),
        attach=_labels(get("attach")),
        clear=_labels(get("clear")),
        description=_opt_text(get("description")),
        kind=_kinds(get("kind")),
        name=_globs(get("name")),
        scope=_globs(get("scope")),
        agent=_globs(get("agent")),
        tenant=_globs(get("tenant")),
        params={key: _condition(c) for key, c in _text_keys(params).items()},
        shell=_shell(get("shell")),
        when=_opt_text(get("when")),
    )
    if found.attach is None and found.clear is None:
        _unsure()
    return found


def _session_settings(data: Mapping[str, Any]) -> SessionData:
    settings = _section(data, "session", frozenset(SessionData._fields))
    return SessionData(
        max_steps=_int(settings.get("max_steps", 200), 1, 100_000),
        expire_after=_duration(settings.get("expire_after", _ABSENT), "24h"),
        join_calls=_strict_flag(settings.get("join_calls", True)),
    )


# -- budgets, rate limits and settings ---------------------------------------------------

_KEY_SCOPES: Final = frozenset({"tenant", "agent", "session", "tool"})
_WINDOWS: Final = frozenset({"none", "hour", "day", "month"})
_EXCEED: Final = frozenset({"deny", "require_approval"})
_BUDGET_KEYS: Final = frozenset(BudgetData._fields)
_RATE_LIMIT_KEYS: Final = frozenset(RateLimitData._fields)


def _opt_reason(value: Any) -> str | None:
    return None if value is None else _nonempty_text(value)


def _overage(value: Any) -> Decimal | str:
    if value is _ABSENT:
        return "100%"  # the models' default, which they do not validate
    if type(value) not in (str, int, float):
        _unsure()
    if type(value) is str:
        _text(value)
    try:
        return an_overage(value)  # type: ignore[no-any-return]
    except ValueError:
        _unsure()


def _budget(value: Any) -> BudgetData:
    data = _mapping(value, _BUDGET_KEYS)
    get = data.get
    unit = _text(get("unit"))
    if _UNIT.fullmatch(unit) is None:
        _unsure()
    estimate = get("default_estimate")
    return BudgetData(
        id=_id(get("id")),
        limit=_decimal(get("limit"), positive=True),
        unit=unit,
        scope=_choice(get("scope", "tenant"), _KEY_SCOPES),
        window=_choice(get("window", "none"), _WINDOWS),
        on_exceed=_choice(get("on_exceed", "deny"), _EXCEED),
        reason=_opt_reason(get("reason")),
        default_estimate=None if estimate is None else _decimal(estimate, positive=True),
        max_overage=_overage(get("max_overage", _ABSENT)),
        kind=_kinds(get("kind")),
        name=_globs(get("name")),
        agent=_globs(get("agent")),
        tenant=_globs(get("tenant")),
    )


def _rate_limit(value: Any) -> RateLimitData:
    data = _mapping(value, _RATE_LIMIT_KEYS)
    get = data.get
    return RateLimitData(
        id=_id(get("id")),
        limit=_int(get("limit"), 1),
        per=_duration(get("per", _ABSENT)),
        key=_choice(get("key", "agent"), _KEY_SCOPES),
        reason=_opt_reason(get("reason")),
        rule=_globs(get("rule")),
        kind=_kinds(get("kind")),
        name=_globs(get("name")),
        agent=_globs(get("agent")),
        tenant=_globs(get("tenant")),
    )


def _section(data: Mapping[str, Any], name: str, keys: frozenset[str]) -> dict[str, Any]:
    """A settings section: absent is its defaults, ``null`` is the models' error."""
    if name not in data:
        return {}
    return _mapping(data[name], keys)


_SCOPES_KEYS: Final = frozenset({"default", "tools"})
_APPROVALS_KEYS: Final = frozenset({"url", "ttl", "grant_ttl"})
_LIMITS_KEYS: Final = frozenset(LimitsData._fields)
_PRICING_KEYS: Final = frozenset(PricingData._fields)
_PRICE_KEYS: Final = frozenset(PriceData._fields)
_TOOL_KEYS: Final = frozenset(ToolData._fields)
_DURABILITIES: Final = frozenset({"none", "process", "power"})
_POLICY_KEYS: Final = frozenset(PolicyData._fields)


def _scopes(data: Mapping[str, Any]) -> ScopesData:
    scopes = _section(data, "scopes", _SCOPES_KEYS)
    tools = _text_keys(scopes.get("tools", {}))
    for scope in tools.values():
        _text(scope)
    return ScopesData(default=_text(scopes.get("default", "shell")), tools=tools)


def _approvals(data: Mapping[str, Any]) -> ApprovalsData:
    approvals = _section(data, "approvals", _APPROVALS_KEYS)
    return ApprovalsData(
        url=_opt_text(approvals.get("url")),
        ttl=_duration(approvals.get("ttl", _ABSENT), "1h"),
        grant_ttl=_duration(approvals.get("grant_ttl", _ABSENT), "15m"),
    )


def _limits(data: Mapping[str, Any]) -> LimitsData:
    limits = _section(data, "limits", _LIMITS_KEYS)
    return LimitsData(
        max_depth=_int(limits.get("max_depth", 32), 1, 1024),
        max_items=_int(limits.get("max_items", 10_000), 1),
        max_param_chars=_int(limits.get("max_param_chars", 65_536), 1),
    )


def _price(value: Any) -> PriceData:
    price = _mapping(value, _PRICE_KEYS)
    return PriceData(
        input=_decimal(price.get("input"), positive=False),
        output=_decimal(price.get("output"), positive=False),
    )


def _pricing(data: Mapping[str, Any]) -> PricingData:
    pricing = _section(data, "pricing", _PRICING_KEYS)
    currency = _text(pricing.get("currency", "USD"))
    if _CURRENCY.fullmatch(currency) is None:
        _unsure()
    models = _text_keys(pricing.get("models", {}), nonempty=True)
    tokens = _text_keys(pricing.get("default_max_tokens", {}), nonempty=True)
    for count in tokens.values():
        _int(count, 1, _MAX_TOKENS)
    return PricingData(
        currency=currency,
        models={name: _price(price) for name, price in models.items()},
        default_max_tokens=tokens,
    )


def _tool(value: Any) -> ToolData:
    tool = _mapping(value, _TOOL_KEYS)
    if "intent" in tool or "grant" in tool:
        _unsure()  # the models validate declared intents and grants (rare: no hurry)
    if "parameters" not in tool and "labels" not in tool:
        _unsure()
    parameters = tool.get("parameters")
    return ToolData(
        parameters=None if parameters is None else _text_keys(parameters),
        description=_opt_text(tool.get("description")),
        labels=_labels(tool.get("labels")),
    )


def _policy(data: Any) -> PolicyData:
    policy = _mapping(data, _POLICY_KEYS)
    get = policy.get
    version = get("version")
    if type(version) is not int or version != 1:
        _unsure()
    redaction = _section(policy, "redaction", frozenset({"patterns"}))
    audit = _section(policy, "audit", frozenset({"durability"}))
    tools = _text_keys(get("tools", {}), nonempty=True)
    return PolicyData(
        version=version,
        default=_choice(get("default", "deny"), _DECISIONS),
        mode=_choice(get("mode", "enforce"), _MODES),
        description=_opt_text(get("description")),
        rules=[_rule(rule) for rule in _entries(get("rules", []))],
        scopes=_scopes(policy),
        approvals=_approvals(policy),
        limits=_limits(policy),
        redaction=RedactionData(patterns=_texts(redaction.get("patterns", []))),
        budgets=[_budget(budget) for budget in _entries(get("budgets", []))],
        rate_limits=[_rate_limit(limit) for limit in _entries(get("rate_limits", []))],
        pricing=_pricing(policy),
        audit=AuditData(durability=_choice(audit.get("durability", "process"), _DURABILITIES)),
        tools={name: _tool(tool) for name, tool in tools.items()},
        session=_session_settings(policy),
        labels=[_label_rule(rule) for rule in _entries(get("labels", []))],
    )


def validate_policy(data: Any) -> PolicyData | None:
    """The records of ``data`` (a policy as plain data), or ``None`` when only the
    models can say: it is invalid, or valid only by a coercion this does not make."""
    try:
        return _policy(data)
    except _Unsure:
        return None
