"""A validated ``interlock.yaml``, as the plain records the compiler reads.

Two validators produce them and must agree on every value: the pydantic models of
:mod:`interlock.policy.schema` (the reference: their errors name the file, line and
field, and they publish the JSON Schema), converted by :func:`from_model`; and
:func:`interlock.policy.validate.validate_policy`, which builds the same records
without importing pydantic and hands anything it is not sure of to the models
(ADR 0014, fourth pass). The records are named tuples: cheap to define at import,
immutable, and equal when their values are (what the equivalence tests compare).

Each record has the fields and defaults of its model; ``ConditionData.given`` is the
model's ``model_fields_set`` (``eq: null`` tests equality with null, no ``eq`` does
not test it).
"""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, Protocol

if TYPE_CHECKING:
    from interlock.policy.schema import (
        BudgetModel,
        Condition,
        GrantModel,
        LabelRuleModel,
        PolicyModel,
        RateLimitModel,
        RuleModel,
        SessionCondition,
        ShellCondition,
        ToolModel,
    )
    from interlock.policy.specs import Durability, KeyScope, Window

__all__ = [
    "SEVERITY_ORDER",
    "ApprovalsData",
    "AuditData",
    "BudgetData",
    "CommandData",
    "ConditionData",
    "GrantData",
    "IntentData",
    "LabelRuleData",
    "LimitsData",
    "LineSource",
    "PolicyData",
    "PriceData",
    "PricingData",
    "RateLimitData",
    "RedactionData",
    "RuleData",
    "ScopesData",
    "SessionAfterData",
    "SessionConditionData",
    "SessionData",
    "SessionFlowData",
    "SessionProvenanceData",
    "ShellData",
    "ToolData",
    "from_model",
]


class LineSource(Protocol):
    """Where the compiler finds the line of a value: the parsed document
    (:class:`~interlock.policy.source.SourceDocument`) or a cache entry."""

    @property
    def file(self) -> str | None: ...

    def line_of(self, path: tuple[str | int, ...]) -> int | None: ...


Globs = str | list[str]
Scalar = str | int | float | bool
DecisionName = Literal["allow", "deny", "require_approval"]
Mode = Literal["enforce", "shadow"]
#: How much is at stake when a rule fires, lowest first (shown to an approver).
Severity = Literal["low", "medium", "high", "critical"]
#: The severities, lowest first.
SEVERITY_ORDER: tuple[str, ...] = ("low", "medium", "high", "critical")


class ConditionData(NamedTuple):
    glob: Globs | None
    not_glob: Globs | None
    regex: Globs | None
    not_regex: Globs | None
    eq: Scalar | None
    ne: Scalar | None
    in_: list[Scalar] | None
    not_in: list[Scalar] | None
    gt: float | None
    gte: float | None
    lt: float | None
    lte: float | None
    exists: bool | None
    #: the fields the policy gave (``in_`` for ``in``)
    given: frozenset[str]


class CommandData(NamedTuple):
    program: Globs
    flags: list[str] | None
    subcommand: Globs | None
    args: Globs | None


class ShellData(NamedTuple):
    programs: Globs | None
    commands: list[CommandData] | None
    writes: bool | None


class SessionAfterData(NamedTuple):
    name: Globs | None
    kind: str | list[str] | None
    labels: list[str] | None
    within: int | None
    within_time: str | int | float | None
    at_least: int


class SessionFlowData(NamedTuple):
    name: Globs | None
    kind: str | list[str] | None
    labels: list[str] | None
    args: list[str] | None


class SessionProvenanceData(NamedTuple):
    args: list[str]
    from_: list[str]


class SessionConditionData(NamedTuple):
    labels: list[str] | None
    after: SessionAfterData | None
    flows_from: SessionFlowData | None
    provenance: SessionProvenanceData | None


class SessionData(NamedTuple):
    max_steps: int
    expire_after: str | int | float
    join_calls: bool = True


class RuleData(NamedTuple):
    id: str
    decision: DecisionName
    reason: str
    description: str | None
    mode: Mode
    kind: str | list[str] | None
    name: Globs | None
    scope: str | list[str] | None
    agent: Globs | None
    tenant: Globs | None
    params: dict[str, ConditionData]
    shell: ShellData | None
    when: str | None
    severity: Severity | None = None
    grant: GrantData | None = None
    session: SessionConditionData | None = None


class LabelRuleData(NamedTuple):
    id: str
    attach: list[str] | None
    clear: list[str] | None
    description: str | None
    kind: str | list[str] | None
    name: Globs | None
    scope: str | list[str] | None
    agent: Globs | None
    tenant: Globs | None
    params: dict[str, ConditionData]
    shell: ShellData | None
    when: str | None


class ScopesData(NamedTuple):
    default: str
    tools: dict[str, str]


class ApprovalsData(NamedTuple):
    url: str | None
    ttl: str | int | float
    grant_ttl: str | int | float


class LimitsData(NamedTuple):
    max_depth: int
    max_items: int
    max_param_chars: int


class RedactionData(NamedTuple):
    patterns: list[str]


class BudgetData(NamedTuple):
    id: str
    limit: Decimal
    unit: str
    scope: KeyScope
    window: Window
    on_exceed: Literal["deny", "require_approval"]
    reason: str | None
    default_estimate: Decimal | None
    max_overage: Decimal | str
    kind: str | list[str] | None
    name: Globs | None
    agent: Globs | None
    tenant: Globs | None


class RateLimitData(NamedTuple):
    id: str
    limit: int
    per: str | int | float
    key: KeyScope
    reason: str | None
    rule: str | list[str] | None
    kind: str | list[str] | None
    name: Globs | None
    agent: Globs | None
    tenant: Globs | None


class PriceData(NamedTuple):
    input: Decimal
    output: Decimal


class PricingData(NamedTuple):
    currency: str
    models: dict[str, PriceData]
    default_max_tokens: dict[str, int]


class AuditData(NamedTuple):
    durability: Durability


class GrantData(NamedTuple):
    audience: str | None
    ttl: str | int | float


class IntentData(NamedTuple):
    target: str | None
    system: str
    operation: str | None
    endpoint: str | None


class ToolData(NamedTuple):
    parameters: dict[str, Any] | None
    description: str | None
    intent: IntentData | None = None
    grant: GrantData | None = None
    labels: list[str] | None = None


class PolicyData(NamedTuple):
    version: int
    default: DecisionName
    mode: Mode
    description: str | None
    rules: list[RuleData]
    scopes: ScopesData
    approvals: ApprovalsData
    limits: LimitsData
    redaction: RedactionData
    budgets: list[BudgetData]
    rate_limits: list[RateLimitData]
    pricing: PricingData
    audit: AuditData
    tools: dict[str, ToolData]
    session: SessionData = SessionData(200, "24h")
    labels: list[LabelRuleData] = []  # noqa: RUF012 (a NamedTuple default, never mutated)


# -- from the pydantic models ----------------------------------------------------------


def _condition(model: Condition) -> ConditionData:
    return ConditionData(
        glob=model.glob,
        not_glob=model.not_glob,
        regex=model.regex,
        not_regex=model.not_regex,
        eq=model.eq,
        ne=model.ne,
        in_=model.in_,
        not_in=model.not_in,
        gt=model.gt,
        gte=model.gte,
        lt=model.lt,
        lte=model.lte,
        exists=model.exists,
        given=frozenset(model.model_fields_set),
    )


def _shell(model: ShellCondition) -> ShellData:
    commands = None
    if model.commands is not None:
        commands = [CommandData(c.program, c.flags, c.subcommand, c.args) for c in model.commands]
    return ShellData(model.programs, commands, model.writes)


def _rule(model: RuleModel) -> RuleData:
    return RuleData(
        id=model.id,
        decision=model.decision,
        reason=model.reason,
        description=model.description,
        mode=model.mode,
        kind=model.kind,
        name=model.name,
        scope=model.scope,
        agent=model.agent,
        tenant=model.tenant,
        params={key: _condition(c) for key, c in model.params.items()},
        shell=_shell(model.shell) if model.shell is not None else None,
        when=model.when,
        severity=model.severity,
        grant=_grant(model.grant),
        session=_session_condition(model.session),
    )


def _session_condition(model: SessionCondition | None) -> SessionConditionData | None:
    if model is None:
        return None
    after = model.after
    flow = model.flows_from
    provenance = model.provenance
    return SessionConditionData(
        labels=model.labels,
        after=None
        if after is None
        else SessionAfterData(
            after.name, after.kind, after.labels, after.within, after.within_time, after.at_least
        ),
        flows_from=None
        if flow is None
        else SessionFlowData(flow.name, flow.kind, flow.labels, flow.args),
        provenance=None
        if provenance is None
        else SessionProvenanceData(provenance.args, provenance.from_),
    )


def _label_rule(model: LabelRuleModel) -> LabelRuleData:
    return LabelRuleData(
        id=model.id,
        attach=model.attach,
        clear=model.clear,
        description=model.description,
        kind=model.kind,
        name=model.name,
        scope=model.scope,
        agent=model.agent,
        tenant=model.tenant,
        params={key: _condition(c) for key, c in model.params.items()},
        shell=_shell(model.shell) if model.shell is not None else None,
        when=model.when,
    )


def _grant(model: GrantModel | None) -> GrantData | None:
    return None if model is None else GrantData(model.audience, model.ttl)


def _tool(model: ToolModel) -> ToolData:
    intent = model.intent
    return ToolData(
        model.parameters,
        model.description,
        None
        if intent is None
        else IntentData(intent.target, intent.system, intent.operation, intent.endpoint),
        _grant(model.grant),
        model.labels,
    )


def _budget(model: BudgetModel) -> BudgetData:
    return BudgetData(
        id=model.id,
        limit=model.limit,
        unit=model.unit,
        scope=model.scope,
        window=model.window,
        on_exceed=model.on_exceed,
        reason=model.reason,
        default_estimate=model.default_estimate,
        max_overage=model.max_overage,
        kind=model.kind,
        name=model.name,
        agent=model.agent,
        tenant=model.tenant,
    )


def _rate_limit(model: RateLimitModel) -> RateLimitData:
    return RateLimitData(
        id=model.id,
        limit=model.limit,
        per=model.per,
        key=model.key,
        reason=model.reason,
        rule=model.rule,
        kind=model.kind,
        name=model.name,
        agent=model.agent,
        tenant=model.tenant,
    )


def from_model(model: PolicyModel) -> PolicyData:
    """The records of a policy the pydantic models validated."""
    pricing = model.pricing
    return PolicyData(
        version=model.version,
        default=model.default,
        mode=model.mode,
        description=model.description,
        rules=[_rule(rule) for rule in model.rules],
        scopes=ScopesData(model.scopes.default, dict(model.scopes.tools)),
        approvals=ApprovalsData(
            model.approvals.url, model.approvals.ttl, model.approvals.grant_ttl
        ),
        limits=LimitsData(
            model.limits.max_depth, model.limits.max_items, model.limits.max_param_chars
        ),
        redaction=RedactionData(list(model.redaction.patterns)),
        budgets=[_budget(budget) for budget in model.budgets],
        rate_limits=[_rate_limit(rate_limit) for rate_limit in model.rate_limits],
        pricing=PricingData(
            pricing.currency,
            {name: PriceData(p.input, p.output) for name, p in pricing.models.items()},
            dict(pricing.default_max_tokens),
        ),
        audit=AuditData(model.audit.durability),
        tools={name: _tool(tool) for name, tool in model.tools.items()},
        session=SessionData(
            model.session.max_steps, model.session.expire_after, model.session.join_calls
        ),
        labels=[_label_rule(rule) for rule in model.labels],
    )
