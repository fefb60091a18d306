"""The shape of ``interlock.yaml``, as pydantic models.

These models are the reference validation of the file: they word its errors and
publish its JSON Schema (``interlock policy schema``). A policy the plain validator
(:mod:`interlock.policy.validate`) is sure of never imports them; either way the
loader compiles the records of :mod:`interlock.policy.validated` (ADR 0014).
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from interlock.policy.validate import (
    EXTRACTED_PARAMS,
    PERCENT,
    a_duration,
    a_number,
    an_overage,
    check_kinds,
)
from interlock.policy.validated import DecisionName, Mode, Severity
from interlock.session.labels import LABEL_PATTERN

__all__ = [
    "EXTRACTED_PARAMS",
    "ApprovalSettings",
    "AuditSettings",
    "BudgetModel",
    "CommandPattern",
    "Condition",
    "GrantModel",
    "IntentModel",
    "LabelRuleModel",
    "Limits",
    "PolicyModel",
    "PricingSettings",
    "RateLimitModel",
    "RedactionSettings",
    "RuleModel",
    "ScopeSettings",
    "SessionAfter",
    "SessionCondition",
    "SessionFlow",
    "SessionProvenance",
    "SessionSettings",
    "ShellCondition",
    "TokenPrice",
    "ToolModel",
    "policy_json_schema",
]

RuleId = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:\-]*$", max_length=128)]
Globs = str | list[str]
KeyScope = Literal["tenant", "agent", "session", "tool"]

Amount = Annotated[
    Decimal,
    BeforeValidator(a_number),
    Field(gt=0, allow_inf_nan=False),
    WithJsonSchema({"type": "number", "exclusiveMinimum": 0}),
]
Price = Annotated[
    Decimal,
    BeforeValidator(a_number),
    Field(ge=0, allow_inf_nan=False),
    WithJsonSchema({"type": "number", "minimum": 0}),
]
Overage = Annotated[
    Decimal | str,
    BeforeValidator(an_overage),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "number", "minimum": 0},
                {"type": "string", "pattern": PERCENT},
            ]
        }
    ),
]
Duration = Annotated[
    str | int | float,
    BeforeValidator(a_duration),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "string", "pattern": r"^\s*\d+(\.\d+)?\s*(ms|s|m|h|d)?\s*$"},
                {"type": "number", "exclusiveMinimum": 0},
            ]
        }
    ),
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Condition(_Strict):
    """Tests on one parameter. All tests given must hold; a missing parameter matches
    only ``exists: false``."""

    glob: Globs | None = Field(
        None, description="Matches if any glob matches (fnmatch, case-sensitive; `*` crosses `/`)."
    )
    not_glob: Globs | None = Field(None, description="Matches if no glob matches.")
    regex: Globs | None = Field(
        None,
        description="Matches if any regex is found (RE2 syntax, linear time; anchor with ^ and $).",
    )
    not_regex: Globs | None = Field(None, description="Matches if no regex is found.")
    eq: str | int | float | bool | None = None
    ne: str | int | float | bool | None = None
    in_: list[str | int | float | bool] | None = Field(None, alias="in")
    not_in: list[str | int | float | bool] | None = None
    gt: float | None = None
    gte: float | None = None
    lt: float | None = None
    lte: float | None = None
    exists: bool | None = None

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        # `command: "rm *"` means a glob; `amount: 5` means equality.
        if isinstance(value, str):
            return {"glob": value}
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return {"glob": value}
        if isinstance(value, (bool, int, float)):
            return {"eq": value}
        return value

    @classmethod
    def __get_pydantic_json_schema__(
        cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        # Publish the shorthands too: a glob string, a list of globs, or a value.
        full = handler(core_schema)
        return {
            "anyOf": [
                full,
                {"type": "string", "description": "shorthand for {glob: ...}"},
                {"type": "array", "items": {"type": "string"}, "description": "any-of globs"},
                {"type": ["number", "boolean"], "description": "shorthand for {eq: ...}"},
            ]
        }

    @model_validator(mode="after")
    def _not_empty(self) -> Condition:
        if not self.model_fields_set:
            raise ValueError("a condition needs at least one test (glob, regex, eq, in, gt, ...)")
        for name in ("gt", "gte", "lt", "lte"):
            bound = getattr(self, name)
            if bound is not None and not math.isfinite(bound):
                raise ValueError(f"{name} must be a finite number")
        return self


class CommandPattern(_Strict):
    """One simple command of a shell call, as a deny (or approval) rule names it."""

    program: Globs = Field(
        description="Globs on the program, resolved: `/bin/rm`, `\\rm`, `'rm'` and "
        "`sudo rm` are all `rm`."
    )
    flags: list[str] | None = Field(
        None,
        description="Flags the command must all have, normalised for the program: for "
        "rm, `-r` matches -r, -R, -rf, --recursive and --rec.",
    )
    subcommand: Globs | None = Field(
        None, description="Globs on the first operand (git push, docker run, kubectl delete)."
    )
    args: Globs | None = Field(
        None, description="Globs each of which must match some operand of the command."
    )


class ShellCondition(_Strict):
    """Conditions on what a shell call's command string will run (its `command`),
    parsed as bash: every simple command in lists, pipelines, substitutions, `bash -c`
    strings... A string that cannot be parsed, or whose program is only known when it
    runs, cannot be judged: the rule is unevaluable and the verdict undetermined."""

    programs: Globs | None = Field(
        None,
        description="Holds only when *every* command of the call runs one of these "
        "programs (an allow-list: `ls; rm -rf /` does not pass `[ls]`).",
    )
    commands: list[CommandPattern] | None = Field(
        None, description="Holds when *some* command of the call matches one of these."
    )
    writes: bool | None = Field(
        None,
        description="`false`: holds only when no command writes or deletes a file "
        "(redirections included; /dev/null is not a file); `true`: when some does.",
    )

    @model_validator(mode="after")
    def _not_empty(self) -> ShellCondition:
        if self.programs is None and self.commands is None and self.writes is None:
            raise ValueError("a shell condition needs programs, commands or writes")
        if self.commands is not None and not self.commands:
            raise ValueError("commands: give at least one command pattern")
        return self


Labels = Annotated[
    list[Annotated[str, Field(pattern=LABEL_PATTERN, max_length=64)]],
    Field(min_length=1),
]


class SessionAfter(_Strict):
    """An earlier *executed* call step of the session (not an input, not a refused
    call, not one whose body raised) matching this step selector."""

    name: Globs | None = Field(None, description="Globs on the step's tool (or model) name.")
    kind: str | list[str] | None = Field(
        None, description="The step's kind: tool, llm, mcp, browser, effect."
    )
    labels: Labels | None = Field(None, description="The step carries all of these labels.")
    within: int | None = Field(
        None, strict=True, ge=1, description="Only among the session's last N steps."
    )
    within_time: Duration | None = Field(
        None, description="Only steps in this last duration (e.g. `10m`)."
    )
    at_least: int = Field(
        1, strict=True, ge=1, description="At least N such steps (a per-session cap)."
    )

    @field_validator("kind")
    @classmethod
    def _known_kinds(cls, value: str | list[str] | None) -> str | list[str] | None:
        return check_kinds(value)


class SessionFlow(_Strict):
    """This call's arguments carry data returned by an earlier executed step matching
    the selector (found by fingerprints: substrings, base64, URL-encoding)."""

    name: Globs | None = Field(None, description="Globs on the source step's name.")
    kind: str | list[str] | None = Field(None, description="The source step's kind.")
    labels: Labels | None = Field(None, description="The source step carries all of these.")
    args: list[Annotated[str, Field(min_length=1)]] | None = Field(
        None, min_length=1, description="Only these top-level arguments (default: all)."
    )

    @field_validator("kind")
    @classmethod
    def _known_kinds(cls, value: str | list[str] | None) -> str | list[str] | None:
        return check_kinds(value)


class SessionProvenance(_Strict):
    """Holds when one of ``args`` carries data that a step labelled with one of
    ``from`` brought in (a tool result or an untrusted input) and that no trusted
    input (the user's request, the system prompt) also holds."""

    args: list[Annotated[str, Field(min_length=1)]] = Field(
        min_length=1, description="The top-level arguments whose provenance is judged."
    )
    from_: Labels = Field(
        alias="from", description="Labels of untrusted sources (e.g. `untrusted`)."
    )

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class SessionCondition(_Strict):
    """Conditions on the session's history; all given parts must hold."""

    labels: Labels | None = Field(None, description="The session carries ALL of these labels.")
    after: SessionAfter | None = None
    flows_from: SessionFlow | None = None
    provenance: SessionProvenance | None = None

    @model_validator(mode="after")
    def _not_empty(self) -> SessionCondition:
        parts = (self.labels, self.after, self.flows_from, self.provenance)
        if all(part is None for part in parts):
            raise ValueError("a session condition needs labels, after, flows_from or provenance")
        return self


class RuleModel(_Strict):
    """One rule: who and what it matches, and the decision it gives."""

    id: RuleId = Field(description="Unique id; named in every decision this rule makes.")
    decision: DecisionName
    reason: str = Field(min_length=1, description="Why; shown to the agent and in records.")
    description: str | None = None
    mode: Mode = Field("enforce", description="`shadow` records the verdict without enforcing it.")
    kind: str | list[str] | None = Field(
        None, description="Action kinds: tool, llm, mcp, browser, effect."
    )
    name: Globs | None = Field(None, description="Globs on the tool (or model) name.")
    scope: str | list[str] | None = Field(
        None, description="Scopes: shell, filesystem, network, browser, data, cost, llm, or custom."
    )
    agent: Globs | None = Field(None, description="Globs on the agent id from the trusted context.")
    tenant: Globs | None = Field(None, description="Globs on the tenant from the trusted context.")
    params: dict[str, Condition] = Field(
        default_factory=dict,
        description="Conditions on extracted parameters (command, url, domain, site, "
        "scheme, port, ip_class, path, verb, session_id, est_cost, target) or on "
        "arguments as `args.<dotted.path>`.",
    )
    shell: ShellCondition | None = Field(
        None,
        description="Conditions on the commands the call's shell `command` will run.",
    )
    when: str | None = Field(
        None,
        description="A CEL expression over `action`, `args`, `params`, `context` and "
        "`shell`; must be true for the rule to match. Compiled at load.",
    )
    severity: Severity | None = Field(
        None,
        description="How much is at stake when the rule fires: low, medium, high or "
        "critical. Stored with each approval it asks for and shown to the approver; an "
        "approval of a high or critical call asks the approver to confirm.",
    )
    grant: GrantModel | None = Field(
        None,
        description="An allow by this rule carries a signed, single-use grant (`decision.grant`).",
    )
    session: SessionCondition | None = Field(
        None,
        description="Conditions on what the session already did and read (docs/sessions.md).",
    )

    @field_validator("kind")
    @classmethod
    def _known_kinds(cls, value: str | list[str] | None) -> str | list[str] | None:
        return check_kinds(value)


class LabelRuleModel(_Strict):
    """A label rule: an allowed call it matches attaches (or clears) session labels.
    Its selectors are a rule's."""

    id: RuleId = Field(description="Unique among label rules.")
    attach: Labels | None = Field(None, description="Labels attached when a match is allowed.")
    clear: Labels | None = Field(
        None, description="Labels removed when a match is allowed: the only way to remove one."
    )
    description: str | None = None
    kind: str | list[str] | None = Field(None, description="Action kinds.")
    name: Globs | None = Field(None, description="Globs on the tool (or model) name.")
    scope: str | list[str] | None = Field(None, description="Scopes.")
    agent: Globs | None = Field(None, description="Globs on the agent id.")
    tenant: Globs | None = Field(None, description="Globs on the tenant.")
    params: dict[str, Condition] = Field(
        default_factory=dict,
        description="Conditions on extracted parameters, as a rule's (`server` selects "
        "an MCP tool's upstream server).",
    )
    shell: ShellCondition | None = None
    when: str | None = Field(None, description="A CEL expression, as a rule's.")

    @field_validator("kind")
    @classmethod
    def _known_kinds(cls, value: str | list[str] | None) -> str | list[str] | None:
        return check_kinds(value)

    @model_validator(mode="after")
    def _does_something(self) -> LabelRuleModel:
        if self.attach is None and self.clear is None:
            raise ValueError("a label rule needs attach or clear")
        return self


class SessionSettings(_Strict):
    max_steps: int = Field(
        200, strict=True, ge=1, le=100_000, description="Steps kept per session."
    )
    expire_after: Duration = Field("24h", description="Idle sessions are forgotten after this.")
    join_calls: bool = Field(
        True,
        strict=True,
        description="flows_from joins each argument to what the same argument of the "
        "session's earlier calls sent (a secret cut into pieces over several calls); "
        "false turns that off.",
    )


# The selectors of a budget or rate limit: which allowed actions it counts.
KindSelector = Annotated[
    str | list[str] | None,
    AfterValidator(check_kinds),
    Field(description="Count only these action kinds: tool, llm, mcp, browser, effect."),
]
NameSelector = Annotated[
    Globs | None, Field(description="Count only actions whose tool (or model) name matches.")
]
AgentSelector = Annotated[
    Globs | None,
    Field(
        description="Count only actions whose agent id (trusted context) matches; an action "
        "with no agent never matches."
    ),
]
TenantSelector = Annotated[
    Globs | None, Field(description="Count only actions whose tenant (trusted context) matches.")
]


class ScopeSettings(_Strict):
    default: str = Field("shell", description="Scope of a tool that nothing else classifies.")
    tools: dict[str, str] = Field(
        default_factory=dict,
        description="Tool-name glob → scope. Wins over inference; the first matching glob "
        "in file order applies.",
    )


class ApprovalSettings(_Strict):
    url: str | None = Field(
        None, description="Template for approval links; `{id}` is replaced by the approval id."
    )
    ttl: Duration = Field(
        "1h",
        description="How long a pending approval waits for a human before it expires: "
        "seconds, or a number with ms, s, m, h or d.",
    )
    grant_ttl: Duration = Field(
        "15m",
        description="How long an approved call stays claimable by its retry: seconds, "
        "or a number with ms, s, m, h or d.",
    )


class Limits(_Strict):
    max_depth: int = Field(32, ge=1, le=1024, description="Deepest argument nesting judged.")
    max_items: int = Field(10_000, ge=1, description="Most argument values (all levels) judged.")
    max_param_chars: int = Field(
        65_536, ge=1, description="Longest extracted parameter (command, path, url) judged."
    )


class RedactionSettings(_Strict):
    patterns: list[str] = Field(
        default_factory=list,
        description="Extra regexes whose matches are redacted wherever the guard writes or "
        "says something (records, events, messages), as [REDACTED:policy].",
    )


class BudgetModel(_Strict):
    """A cap on what the allowed actions it selects may spend, counted per `scope` and
    `window`. An action that would pass it gets `on_exceed`."""

    id: RuleId = Field(description="Unique among budgets; named in the reason of a refusal.")
    limit: Amount = Field(
        description="The cap, in `unit`; > 0. A currency amount is counted in micro-units "
        "(1 USD = 1 000 000), rounded up."
    )
    unit: str = Field(
        pattern=r"^([A-Z]{3}|tokens)$",
        description="`tokens`, or a 3-letter currency code (e.g. USD) equal to "
        "`pricing.currency`. A tool call is charged its `est_cost` argument, an LLM call "
        "its priced token estimate.",
    )
    scope: KeyScope = Field(
        "tenant",
        description="What is counted separately: the tenant, each agent, each session or "
        "each tool.",
    )
    window: Literal["none", "hour", "day", "month"] = Field(
        "none",
        description="When the count restarts: `none` never; `hour`, `day`, `month` at the "
        "start of each, in UTC.",
    )
    on_exceed: Literal["deny", "require_approval"] = Field(
        "deny", description="The verdict for an action the budget cannot cover."
    )
    reason: str | None = Field(
        None, min_length=1, description="Why the budget exists, in words for people."
    )
    default_estimate: Amount | None = Field(
        None,
        description="What a call the budget covers reserves when it states no cost of its "
        "own, in `unit`; > 0: a tool call without `est_cost`, a model call that names no "
        "`max_tokens` (and has no `pricing.default_max_tokens`), at least. Without it such "
        "a call is refused.",
    )
    max_overage: Overage = Field(
        "100%",
        description="How far a call may really cost more than it reserved: an amount in "
        "`unit` (≥ 0), or a percentage of each reservation. The budget holds it against the "
        "limit while the call is in flight; a commit past it is charged, recorded as excess "
        "and closes the budget until an admin reopens it. Default `100%`.",
    )
    kind: KindSelector = None
    name: NameSelector = None
    agent: AgentSelector = None
    tenant: TenantSelector = None


class RateLimitModel(_Strict):
    """At most `limit` allowed actions per `per`, counted per `key`."""

    id: RuleId = Field(description="Unique among rate limits; named in the reason of a refusal.")
    limit: int = Field(strict=True, ge=1, description="Actions allowed per `per`; ≥ 1.")
    per: Duration = Field(
        description="The period: seconds, or a number with ms, s, m, h or d (`500ms`, `10s`, "
        "`5m`, `1h`, `1d`)."
    )
    key: KeyScope = Field(
        "agent",
        description="What is counted separately: the tenant, each agent, each session or "
        "each tool.",
    )
    reason: str | None = Field(
        None, min_length=1, description="Why the limit exists, in words for people."
    )
    rule: str | list[str] | None = Field(
        None,
        description="Rule ids: count only actions allowed by one of these rules. Each must "
        "be a rule of this policy.",
    )
    kind: KindSelector = None
    name: NameSelector = None
    agent: AgentSelector = None
    tenant: TenantSelector = None


class TokenPrice(_Strict):
    input: Price = Field(description="Price per million input (prompt) tokens; ≥ 0.")
    output: Price = Field(description="Price per million output (completion) tokens; ≥ 0.")


class PricingSettings(_Strict):
    currency: str = Field(
        "USD",
        pattern=r"^[A-Z]{3}$",
        description="Currency of the prices, a 3-letter code; currency budgets must use it. "
        "The shipped default prices are in USD and apply only when this is USD.",
    )
    models: dict[Annotated[str, Field(min_length=1)], TokenPrice] = Field(
        default_factory=dict,
        description="Model name or glob → price per million tokens. Exact names win over "
        "globs, globs apply in file order, and all win over the shipped defaults.",
    )
    default_max_tokens: dict[
        Annotated[str, Field(min_length=1)], Annotated[int, Field(strict=True, ge=1, le=2**53)]
    ] = Field(
        default_factory=dict,
        description="Model name or glob → the output tokens a call to it is assumed to ask "
        "for when it names no `max_tokens`, for its reservation. Exact names win over globs, "
        "globs apply in file order.",
    )


class AuditSettings(_Strict):
    durability: Literal["none", "process", "power"] = Field(
        "process",
        description="`process`: a verdict is returned once its record is committed (it "
        "survives a crash of the process); `power`: also synced to disk (it survives a "
        "power loss); `none`: recorded in the background (a crash may lose the newest "
        "records).",
    )


class GrantModel(_Strict):
    """Ask for a signed, single-use grant with every allow (see docs/grants.md)."""

    audience: str | None = Field(
        None,
        min_length=1,
        description="The downstream system the grant is for; default: the tool's "
        "`intent.system` (or the call's downstream system).",
    )
    ttl: Duration = Field(
        "60s",
        description="How long the grant may be claimed: seconds, or a number with ms, s, "
        "m or h; at least 1 s, at most 1 h.",
    )


class IntentModel(_Strict):
    """What a call of the tool acts on, stated by the policy, not by the model: it
    enters the call's trusted context and its intent hash."""

    target: str | None = Field(
        None,
        min_length=1,
        description="The resource acted on, from the arguments: `shopify:order:{order_id}`. "
        "A `{name}` names a top-level argument; a call without it (or with a value that "
        "is not a string or integer) is undetermined.",
    )
    system: str = Field(min_length=1, description="The downstream system, e.g. `shopify`.")
    operation: str | None = Field(None, min_length=1, description="e.g. `refund`.")
    endpoint: str | None = Field(None, min_length=1, description="e.g. `POST /refunds`.")


class ToolModel(_Strict):
    """A tool the agent has, as the policy knows it: ``interlock policy lint`` checks
    every ``args.<name>`` a rule reads against these."""

    description: str | None = None
    parameters: dict[str, Any] | None = Field(
        None,
        description="The JSON Schema of the tool's arguments (an object with `properties`).",
    )
    intent: IntentModel | None = Field(
        None, description="The call's target and downstream system, declared."
    )
    grant: GrantModel | None = Field(
        None, description="Ask for a grant with every allowed call of this tool."
    )
    labels: Labels | None = Field(
        None, description="Labels every allowed call of this tool attaches to its session."
    )


class PolicyModel(_Strict):
    """An ``interlock.yaml`` file."""

    version: Literal[1] = Field(description="Policy format version. Only 1 exists.")
    default: DecisionName = Field(
        "deny", description="Decision when no rule matches. Ships as deny."
    )
    mode: Mode = Field("enforce", description="`shadow` records verdicts and lets actions run.")
    description: str | None = None
    rules: list[RuleModel] = Field(default_factory=list)
    scopes: ScopeSettings = Field(default_factory=ScopeSettings)  # type: ignore[arg-type]
    approvals: ApprovalSettings = Field(default_factory=ApprovalSettings)  # type: ignore[arg-type]
    limits: Limits = Field(default_factory=Limits)  # type: ignore[arg-type]
    redaction: RedactionSettings = Field(default_factory=RedactionSettings)
    budgets: list[BudgetModel] = Field(
        default_factory=list,
        description="Spending caps on allowed actions, in a currency or in tokens.",
    )
    rate_limits: list[RateLimitModel] = Field(
        default_factory=list, description="Caps on how often allowed actions run."
    )
    pricing: PricingSettings = Field(
        default_factory=PricingSettings,  # type: ignore[arg-type]
        description="Model prices, for currency budgets on LLM calls.",
    )
    audit: AuditSettings = Field(
        default_factory=AuditSettings,  # type: ignore[arg-type]
        description="How decision records are made durable.",
    )
    session: SessionSettings = Field(
        default_factory=SessionSettings,  # type: ignore[arg-type]
        description="How much session history is kept (session-aware rules).",
    )
    labels: list[LabelRuleModel] = Field(
        default_factory=list,
        description="Label rules: allowed calls that attach or clear session labels.",
    )
    tools: dict[Annotated[str, Field(min_length=1)], ToolModel] = Field(
        default_factory=dict,
        description="Tool name → its argument schema. When given, a rule that reads an "
        "argument none of its tools has is a load error (a typo caught at lint time, not "
        "an undetermined verdict at run time).",
    )


def policy_json_schema() -> dict[str, Any]:
    """The JSON Schema of ``interlock.yaml`` (for editors and CI linting)."""
    schema = PolicyModel.model_json_schema(by_alias=True)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "Interlock policy (interlock.yaml)"
    return schema
