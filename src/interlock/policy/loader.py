"""Loading ``interlock.yaml``: parse with line marks, validate, compile — all or nothing.

A bad file raises :class:`~interlock.errors.PolicyError` naming the file, line, rule id
and field of each problem; nothing of it is loaded.

Example::

    from interlock.policy import load_policy

    policy = load_policy("interlock.yaml")
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import sys
from collections.abc import Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from interlock.core.action import Downstream
from interlock.core.decision import Verdict
from interlock.errors import PolicyError, PolicyIssue
from interlock.ledger.estimate import MaxTokensTable
from interlock.ledger.pricing import DEFAULT_PRICING, ModelPrice, PricingTable
from interlock.policy.celexpr import MACRO_BINDING, ROOTS, CelCondition, compile_condition
from interlock.policy.celtokens import tokens as cel_tokens
from interlock.policy.compiled import CompiledPolicy, CompiledRule
from interlock.policy.intents import (
    MAX_GRANT_TTL,
    GrantPolicy,
    GrantSpec,
    TargetTemplate,
    ToolIntent,
)
from interlock.policy.matchers import (
    MISSING,
    CompiledCondition,
    GlobSet,
    RegexError,
    RegexSet,
    compile_re2,
)
from interlock.policy.shellmatch import CommandMatcher, ShellMatcher
from interlock.policy.specs import (
    DEFAULT_OVERAGE,
    ApprovalPolicy,
    AuditPolicy,
    BudgetSpec,
    Overage,
    RateLimitSpec,
    Selector,
    parse_duration,
    to_units,
    units_to_amount,
)
from interlock.policy.toolschema import ArgumentRef, argument_issues
from interlock.policy.validate import EXTRACTED_PARAMS, validate_policy
from interlock.policy.validated import (
    BudgetData,
    ConditionData,
    GrantData,
    LabelRuleData,
    LineSource,
    PolicyData,
    RateLimitData,
    RuleData,
    ShellData,
)

if TYPE_CHECKING:
    from pydantic import ValidationError

    from interlock.policy.cache import PolicyCache
    from interlock.policy.schema import PolicyModel
    from interlock.policy.sessionrules import SessionSpec, SessionTest, StepSelector
    from interlock.policy.source import SourceDocument

__all__ = ["CEL_VARIABLES", "compile_policy", "load_policy", "load_policy_text"]

#: The variables a ``when:`` expression may use.
CEL_VARIABLES: frozenset[str] = ROOTS

# The most units a budget counts in one amount (the store refuses more).
_MAX_UNITS = 2**53

# Top-level lists whose entries have an id, and what an entry is called in messages.
_ENTRY_NAMES = {"budgets": "budget", "rate_limits": "rate limit"}


def load_policy(
    path: str | os.PathLike[str], *, cache: PolicyCache | None = None
) -> CompiledPolicy:
    """Load, validate and compile a policy file. With a ``cache``
    (:mod:`interlock.policy.cache`), a text parsed before is not parsed again; it is
    validated and compiled all the same, with the same result."""
    file = os.fspath(path)
    try:
        text = Path(file).read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise PolicyError([PolicyIssue("policy file not found", file=file)]) from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise PolicyError([PolicyIssue(f"cannot read policy file: {exc}", file=file)]) from exc
    if cache is None:
        return load_policy_text(text, file=file)
    return _load_cached(text, file, cache)


def _load_cached(text: str, file: str, cache: PolicyCache) -> CompiledPolicy:
    from interlock.policy.cache import CacheMiss, RecordedLines

    found = cache.lookup(text, file=file)
    if found is not None:
        data, lines = found
        try:
            return compile_policy(data, source=lines)
        except CacheMiss:
            pass  # the compiler asked for a line the entry does not hold: parse
    document = _parse(text, file)
    recorded = RecordedLines(document)
    policy = compile_policy(document.data, source=recorded)
    cache.store(text, document.data, recorded)  # only a policy that loaded
    return policy


def load_policy_text(text: str, *, file: str | None = None) -> CompiledPolicy:
    """Load a policy from YAML text (``file`` names it in errors)."""
    document = _parse(text, file)
    return compile_policy(document.data, source=document)


def _parse(text: str, file: str | None) -> SourceDocument:
    from interlock.policy.source import parse_yaml

    document = parse_yaml(text, file=file)
    if document.data is None:
        raise PolicyError(
            [PolicyIssue("the policy is empty; it needs at least `version: 1`", file=file, line=1)]
        )
    return document


def compile_policy(
    data: Mapping[str, Any] | PolicyModel, *, source: LineSource | None = None
) -> CompiledPolicy:
    """Validate and compile a policy given as plain data (or an already-built model)."""
    file = source.file if source else None
    # A model can only exist once its module is imported: no import to find out.
    schema = sys.modules.get("interlock.policy.schema")
    if schema is not None and isinstance(data, schema.PolicyModel):
        from interlock.policy.validated import from_model

        policy: PolicyData | None = from_model(data)
    else:
        # Plain validation when it is sure; the pydantic models otherwise, which word
        # every error (ADR 0014: they cost more than the rest of a small load).
        policy = validate_policy(data)
        if policy is None:
            policy = _validate_with_models(data, source)
    assert policy is not None
    return _Compiler(policy, source).compile(file)


def _validate_with_models(data: Any, source: LineSource | None) -> PolicyData:
    """The records of ``data`` as the pydantic models validate it, or the
    :class:`PolicyError` of what they refuse, each issue with its file, line and field."""
    from pydantic import ValidationError

    from interlock.policy.schema import PolicyModel
    from interlock.policy.validated import from_model

    try:
        model = PolicyModel.model_validate(data)
    except ValidationError as exc:
        raise PolicyError(_validation_issues(exc, data, source)) from None
    return from_model(model)


def _validation_issues(
    exc: ValidationError, data: Any, source: LineSource | None
) -> list[PolicyIssue]:
    issues = []
    for error in exc.errors():
        path = _data_path(data, error["loc"])
        rule_id = _rule_id(data, path)
        field = ".".join(
            str(p) for p in (path[2:] if rule_id is not None or _in_rules(path) else path)
        )
        extra = error["loc"][len(path) :]
        if error["type"] == "extra_forbidden" or (extra and error["type"] == "missing"):
            field = ".".join(str(p) for p in (*(path[2:] if _in_rules(path) else path), *extra))
        message = error["msg"]
        if error["type"] == "extra_forbidden":
            message = f"unknown field {error['loc'][-1]!r}"
        elif error["type"] == "missing":
            message = f"missing required field {error['loc'][-1]!r}"
        entry = _entry_label(data, path)
        if entry is not None:
            message = f"{entry}: {message}"
        issues.append(
            PolicyIssue(
                message,
                file=source.file if source else None,
                line=source.line_of(path) if source else None,
                rule_id=rule_id,
                field=field or None,
            )
        )
    return issues


def _data_path(data: Any, loc: tuple[Any, ...]) -> tuple[str | int, ...]:
    """The part of a pydantic location that exists in the data (drops union tags)."""
    path: list[str | int] = []
    node = data
    for part in loc:
        key = "in" if part == "in_" else part
        in_mapping = isinstance(node, Mapping) and key in node
        in_list = isinstance(node, list) and isinstance(key, int) and 0 <= key < len(node)
        if in_mapping or in_list:
            path.append(key)
            node = node[key]
        elif isinstance(node, Mapping) and not isinstance(part, int):
            continue
    return tuple(path)


def _in_rules(path: tuple[str | int, ...]) -> bool:
    """Inside a rule (or a label rule): messages name its id, fields are its own."""
    return len(path) >= 2 and path[0] in ("rules", "labels") and isinstance(path[1], int)


def _rule_id(data: Any, path: tuple[str | int, ...]) -> str | None:
    if not _in_rules(path):
        return None
    try:
        rule = data[path[0]][path[1]]
    except (KeyError, IndexError, TypeError):
        return None
    rule_id = rule.get("id") if isinstance(rule, Mapping) else None
    return str(rule_id) if rule_id is not None else f"#{int(path[1]) + 1}"


def _entry_label(data: Any, path: tuple[str | int, ...]) -> str | None:
    """``budget 'llm-daily'`` for a path inside that budget (``budget #2`` if it has no
    id); None outside budgets and rate limits."""
    if len(path) < 2 or path[0] not in _ENTRY_NAMES or not isinstance(path[1], int):
        return None
    noun = _ENTRY_NAMES[str(path[0])]
    try:
        entry = data[path[0]][path[1]]
    except (KeyError, IndexError, TypeError):
        return None
    entry_id = entry.get("id") if isinstance(entry, Mapping) else None
    return f"{noun} {str(entry_id)!r}" if entry_id is not None else f"{noun} #{path[1] + 1}"


class _Compiler:
    def __init__(self, model: PolicyData, source: LineSource | None) -> None:
        self.model = model
        self.source = source
        self.issues: list[PolicyIssue] = []

    def issue(self, message: str, path: tuple[str | int, ...], rule_id: str | None = None) -> None:
        field = ".".join(str(p) for p in (path[2:] if _in_rules(path) else path))
        self.issues.append(
            PolicyIssue(
                message,
                file=self.source.file if self.source else None,
                line=self.source.line_of(path) if self.source else None,
                rule_id=rule_id,
                field=field or None,
            )
        )

    def compile(self, file: str | None) -> CompiledPolicy:
        model = self.model
        seen: dict[str, int] = {}
        rules: list[CompiledRule] = []
        for index, rule in enumerate(model.rules):
            if rule.id in seen:
                self.issue(
                    f"duplicate rule id (first used by rule #{seen[rule.id] + 1})",
                    ("rules", index, "id"),
                    rule.id,
                )
                continue
            seen[rule.id] = index
            compiled = self.rule(index, rule)
            if compiled is not None:
                rules.append(compiled)
        sessions = self.sessions(rules)
        pins = []
        for glob, scope in model.scopes.tools.items():
            pins.append((GlobSet.of(glob), scope))
        extra_patterns = []
        for i, pattern in enumerate(model.redaction.patterns):
            try:
                re.compile(pattern)
            except re.error as exc:
                self.issue(f"invalid regex {pattern!r}: {exc}", ("redaction", "patterns", i))
            else:
                extra_patterns.append(pattern)
        if model.approvals.url is not None and not model.approvals.url.strip():
            self.issue("approval url template is empty", ("approvals", "url"))
        pricing = self.pricing()
        budgets = self.budgets(pricing.currency)
        rate_limits = self.rate_limits({rule.id for rule in model.rules})
        approval_policy = self.approval_policy()
        tool_intents = self.tool_intents()
        grants = self.grants()
        if model.tools and not self.issues:
            declared = {name: tool.parameters for name, tool in model.tools.items()}
            self.issues.extend(argument_issues(rules, declared, source=file))
        if self.issues:
            raise PolicyError(self.issues)
        return CompiledPolicy(
            rules=tuple(rules),
            default=Verdict(model.default),
            shadow_mode=model.mode == "shadow",
            scope_default=model.scopes.default,
            scope_pins=tuple(pins),
            approval_url=model.approvals.url,
            max_depth=model.limits.max_depth,
            max_items=model.limits.max_items,
            max_param_chars=model.limits.max_param_chars,
            redaction_patterns=tuple(extra_patterns),
            source=file,
            description=model.description,
            budgets=budgets,
            rate_limits=rate_limits,
            pricing=pricing,
            default_max_tokens=MaxTokensTable(tuple(model.pricing.default_max_tokens.items())),
            audit=AuditPolicy(durability=model.audit.durability),
            approval_policy=approval_policy,
            tool_descriptions={
                name: tool.description
                for name, tool in model.tools.items()
                if tool.description is not None and tool.description.strip()
            },
            tool_intents=tool_intents,
            grants=grants,
            sessions=sessions,
        )

    def sessions(self, rules: list[CompiledRule]) -> SessionSpec | None:
        """What the policy keeps of sessions: None when nothing in it reads or labels
        them (then no check pays for session history)."""
        model = self.model
        seen: dict[str, int] = {}
        label_rules: list[CompiledRule] = []
        for index, label in enumerate(model.labels):
            if label.id in seen:
                self.issue(
                    f"duplicate label rule id (first used by label rule #{seen[label.id] + 1})",
                    ("labels", index, "id"),
                    label.id,
                )
                continue
            seen[label.id] = index
            compiled = self.rule(index, _label_rule_data(label), "labels")
            if compiled is not None:
                label_rules.append(
                    dataclasses.replace(
                        compiled,
                        attach=frozenset(label.attach or ()),
                        clear=frozenset(label.clear or ()),
                    )
                )
        tool_labels = {
            name: frozenset(tool.labels) for name, tool in model.tools.items() if tool.labels
        }
        reads = any(rule.session is not None for rule in rules) or any(
            rule.when is not None and rule.when.session for rule in (*rules, *label_rules)
        )
        settings = model.session
        expire_after = self.duration(settings.expire_after, ("session", "expire_after"))
        if not (reads or label_rules or tool_labels):
            return None
        from interlock.policy.sessionrules import SessionSpec  # only a policy with sessions

        return SessionSpec(
            max_steps=settings.max_steps,
            expire_after=expire_after,
            join_calls=settings.join_calls,
            label_rules=tuple(label_rules),
            tool_labels=tool_labels,
        )

    def tool_intents(self) -> dict[str, ToolIntent]:
        """The intents the ``tools`` section declares (issues recorded)."""
        intents: dict[str, ToolIntent] = {}
        for name, tool in self.model.tools.items():
            intent = tool.intent
            if intent is None:
                continue
            path: tuple[str | int, ...] = ("tools", name, "intent", "target")
            template = None
            if intent.target is not None:
                try:
                    template = TargetTemplate.parse(intent.target)
                except ValueError as exc:
                    self.issue(str(exc), path)
                    continue
                properties = _declared_properties(tool.parameters)
                for argument in template.arguments:
                    if properties is not None and argument not in properties:
                        self.issue(
                            f"the target names argument {argument!r}, which tool {name!r} "
                            f"does not declare (it has: {', '.join(sorted(properties))})",
                            path,
                        )
            downstream = Downstream(intent.system, intent.operation, intent.endpoint)
            intents[name] = ToolIntent(template, downstream)
        return intents

    def grants(self) -> GrantPolicy:
        """The grants rules and tools ask for (issues recorded)."""
        rules: dict[str, GrantSpec] = {}
        for index, rule in enumerate(self.model.rules):
            if rule.grant is None:
                continue
            if rule.decision != "allow":
                self.issue(
                    f"only an allow carries a grant; this rule's decision is {rule.decision}",
                    ("rules", index, "grant"),
                    rule.id,
                )
                continue
            spec = self.grant_spec(rule.grant, ("rules", index, "grant", "ttl"), rule.id)
            rules[rule.id] = spec
        tools: dict[str, GrantSpec] = {}
        for name, tool in self.model.tools.items():
            if tool.grant is not None:
                spec = self.grant_spec(tool.grant, ("tools", name, "grant", "ttl"))
                if spec.audience is None and tool.intent is not None:
                    spec = GrantSpec(tool.intent.system, spec.ttl)
                tools[name] = spec
        return GrantPolicy(rules, tools)

    def grant_spec(
        self, grant: GrantData, path: tuple[str | int, ...], rule_id: str | None = None
    ) -> GrantSpec:
        ttl = self.duration(grant.ttl, path)
        if ttl and not 1 <= ttl <= MAX_GRANT_TTL:
            self.issue(
                f"a grant's ttl must be between 1 s and {MAX_GRANT_TTL} s, not {ttl:g} s",
                path,
                rule_id,
            )
        return GrantSpec(grant.audience, ttl)

    def line_of(self, path: tuple[str | int, ...]) -> int | None:
        return self.source.line_of(path) if self.source else None

    def duration(self, value: str | float, path: tuple[str | int, ...], owner: str = "") -> float:
        """Seconds, or 0.0 after recording an issue (the policy will not load)."""
        try:
            return parse_duration(value)
        except ValueError as exc:
            self.issue(f"{owner}{exc}", path)
            return 0.0

    def pricing(self) -> PricingTable:
        settings = self.model.pricing
        overrides = {
            name: ModelPrice(price.input, price.output) for name, price in settings.models.items()
        }
        return DEFAULT_PRICING.with_overrides(overrides, currency=settings.currency)

    def budgets(self, currency: str) -> tuple[BudgetSpec, ...]:
        seen: dict[str, int] = {}
        specs = []
        for index, budget in enumerate(self.model.budgets):
            base = ("budgets", index)
            if budget.id in seen:
                first = seen[budget.id] + 1
                self.issue(
                    f"duplicate budget id {budget.id!r} (first used by budget #{first})",
                    (*base, "id"),
                )
                continue
            seen[budget.id] = index
            if budget.unit not in ("tokens", currency):
                self.issue(
                    f"budget {budget.id!r} counts {budget.unit} but prices are in {currency}; "
                    "set pricing.currency or use tokens",
                    (*base, "unit"),
                )
                continue
            limit = self.units(budget.id, "limit", budget.limit, budget.unit, base)
            default = (
                None
                if budget.default_estimate is None
                else self.units(
                    budget.id, "default_estimate", budget.default_estimate, budget.unit, base
                )
            )
            overage = self.overage(budget, base)
            if limit is None or overage is None or (budget.default_estimate and default is None):
                continue
            specs.append(
                BudgetSpec(
                    id=budget.id,
                    limit=limit,
                    unit=budget.unit,
                    scope=budget.scope,
                    window=budget.window,
                    on_exceed=Verdict(budget.on_exceed),
                    selector=_selector(budget),
                    reason=budget.reason,
                    line=self.line_of(base),
                    default_estimate=default,
                    max_overage=overage,
                )
            )
        return tuple(specs)

    def units(
        self,
        budget_id: str,
        name: str,
        amount: Decimal,
        unit: str,
        base: tuple[str | int, ...],
    ) -> int | None:
        """``amount`` in units, or None after recording an issue (too large)."""
        units = to_units(amount, unit)
        if units > _MAX_UNITS:
            most = units_to_amount(_MAX_UNITS, unit)
            self.issue(
                f"budget {budget_id!r}: the {name} is too large (at most {most} {unit})",
                (*base, name),
            )
            return None
        return units

    def overage(self, budget: BudgetData, base: tuple[str | int, ...]) -> Overage | None:
        value = budget.max_overage
        if isinstance(value, str):
            percent = Decimal(value.rstrip("%").strip())
            return DEFAULT_OVERAGE if percent == 100 else Overage(percent=percent)
        units = self.units(budget.id, "max_overage", value, budget.unit, base)
        return None if units is None else Overage(units=units)

    def rate_limits(self, rule_ids: set[str]) -> tuple[RateLimitSpec, ...]:
        seen: dict[str, int] = {}
        specs = []
        for index, rate_limit in enumerate(self.model.rate_limits):
            base = ("rate_limits", index)
            name = f"rate limit {rate_limit.id!r}"
            if rate_limit.id in seen:
                first = seen[rate_limit.id] + 1
                self.issue(
                    f"duplicate rate limit id {rate_limit.id!r} "
                    f"(first used by rate limit #{first})",
                    (*base, "id"),
                )
                continue
            seen[rate_limit.id] = index
            before = len(self.issues)
            per_seconds = self.duration(rate_limit.per, (*base, "per"), f"{name}: ")
            rules = _list(rate_limit.rule)
            for position, rule_id in enumerate(rules):
                if rule_id not in rule_ids:
                    single = isinstance(rate_limit.rule, str)
                    self.issue(
                        f"{name} counts actions allowed by rule {rule_id!r}, which is not a "
                        "rule of this policy",
                        (*base, "rule") if single else (*base, "rule", position),
                    )
            if len(self.issues) > before:
                continue
            specs.append(
                RateLimitSpec(
                    id=rate_limit.id,
                    limit=rate_limit.limit,
                    per_seconds=per_seconds,
                    key=rate_limit.key,
                    selector=_selector(rate_limit, rules=_set(rate_limit.rule)),
                    reason=rate_limit.reason,
                    line=self.line_of(base),
                )
            )
        return tuple(specs)

    def approval_policy(self) -> ApprovalPolicy:
        approvals = self.model.approvals
        return ApprovalPolicy(
            ttl=self.duration(approvals.ttl, ("approvals", "ttl")),
            grant_ttl=self.duration(approvals.grant_ttl, ("approvals", "grant_ttl")),
        )

    def rule(self, index: int, rule: RuleData, section: str = "rules") -> CompiledRule | None:
        base = (section, index)
        before = len(self.issues)
        conditions = []
        for key, condition in rule.params.items():
            if not _known_param(key):
                self.issue(
                    f"unknown parameter {key!r}; use one of {', '.join(EXTRACTED_PARAMS)} "
                    "or args.<name>",
                    (*base, "params", key),
                    rule.id,
                )
                continue
            compiled = self.condition(
                key,
                condition,
                (*base, "params", key),
                rule.id,
                possible=rule.decision != "allow",
            )
            if compiled is not None:
                conditions.append(compiled)
        shell = _shell_matcher(rule.shell) if rule.shell is not None else None
        arguments = self.arguments(rule, base)
        when: CelCondition | None = None
        if rule.when is not None:
            try:
                when = compile_condition(rule.when)
            except Exception as exc:  # the binding raises ValueError with the parser's text
                self.issue(f"invalid CEL expression: {exc}", (*base, "when"), rule.id)
            else:
                unknown = set(when.variables) - CEL_VARIABLES - _cel_bound_names(rule.when)
                if unknown:
                    self.issue(
                        f"unknown variable(s) {', '.join(sorted(unknown))} in CEL expression; "
                        f"available: {', '.join(sorted(CEL_VARIABLES))}",
                        (*base, "when"),
                        rule.id,
                    )
        session = self.session_test(rule, base)
        if len(self.issues) > before:
            return None
        return CompiledRule(
            id=rule.id,
            verdict=Verdict(rule.decision),
            reason=rule.reason,
            shadow=rule.mode == "shadow",
            kinds=_kinds(rule.kind),
            names=GlobSet.of(rule.name) if rule.name is not None else None,
            scopes=_set(rule.scope),
            agents=GlobSet.of(rule.agent) if rule.agent is not None else None,
            tenants=GlobSet.of(rule.tenant) if rule.tenant is not None else None,
            conditions=tuple(conditions),
            when=when,
            line=self.line_of(base),
            shell=shell,
            arguments=arguments,
            severity=rule.severity,
            session=session,
        )

    def session_test(self, rule: RuleData, base: tuple[str | int, ...]) -> SessionTest | None:
        """The rule's ``session:`` conditions, compiled (issues recorded)."""
        condition = rule.session
        if condition is None:
            return None
        # only a rule with session conditions loads them (and the history, fingerprints)
        from interlock.policy.sessionrules import AfterTest, FlowTest, ProvenanceTest, SessionTest

        after = None
        if condition.after is not None:
            spec = condition.after
            within_time = None
            if spec.within_time is not None:
                path = (*base, "session", "after", "within_time")
                try:
                    within_time = parse_duration(spec.within_time)
                except ValueError as exc:
                    self.issue(str(exc), path, rule.id)
            after = AfterTest(
                _step_selector(spec.name, spec.kind, spec.labels),
                spec.within,
                within_time,
                spec.at_least,
            )
        flow = None
        if condition.flows_from is not None:
            spec_flow = condition.flows_from
            flow = FlowTest(
                _step_selector(spec_flow.name, spec_flow.kind, spec_flow.labels),
                tuple(spec_flow.args) if spec_flow.args is not None else None,
            )
        provenance = None
        if condition.provenance is not None:
            provenance = ProvenanceTest(
                tuple(condition.provenance.args), frozenset(condition.provenance.from_)
            )
        return SessionTest(rule.id, frozenset(condition.labels or ()), after, flow, provenance)

    def arguments(self, rule: RuleData, base: tuple[str | int, ...]) -> tuple[ArgumentRef, ...]:
        """What ``rule`` reads of a call's arguments, each with its line."""
        refs = [
            ArgumentRef(key[5:], self.line_of((*base, "params", key)), f"params.{key}")
            for key in rule.params
            if key.startswith("args.")
        ]
        if rule.when is not None:
            line = self.line_of((*base, "when"))
            for path in _cel_arguments(rule.when):
                refs.append(ArgumentRef(path, line, "when"))
        return tuple(refs)

    def condition(
        self,
        key: str,
        condition: ConditionData,
        path: tuple[str | int, ...],
        rule_id: str,
        *,
        possible: bool = False,
    ) -> CompiledCondition | None:
        regexes: dict[str, RegexSet | None] = {"regex": None, "not_regex": None}
        for name in regexes:
            value = getattr(condition, name)
            if value is None:
                continue
            for index, pattern in enumerate([value] if isinstance(value, str) else value):
                try:
                    compile_re2(pattern)
                except RegexError as exc:
                    where = (*path, name) if isinstance(value, str) else (*path, name, index)
                    self.issue(f"invalid regex {pattern!r}: {exc}", where, rule_id)
                    return None
            regexes[name] = RegexSet.of(value)
        bounds = tuple(
            (op, float(getattr(condition, op)))
            for op in ("gt", "gte", "lt", "lte")
            if getattr(condition, op) is not None
        )
        fields = condition.given
        # Paths: a deny's glob matches whatever case (the file system may ignore it),
        # an allow's not_glob likewise — each the stricter reading.
        folded_glob = key == "path" and possible
        folded_not_glob = key == "path" and not possible
        return CompiledCondition(
            key=key,
            glob=GlobSet.of(_rooted(condition.glob, folded_glob), ignore_case=folded_glob)
            if condition.glob is not None
            else None,
            not_glob=GlobSet.of(
                _rooted(condition.not_glob, folded_not_glob), ignore_case=folded_not_glob
            )
            if condition.not_glob is not None
            else None,
            regex=regexes["regex"],
            not_regex=regexes["not_regex"],
            eq=condition.eq if "eq" in fields else MISSING,
            ne=condition.ne if "ne" in fields else MISSING,
            in_=tuple(condition.in_) if condition.in_ is not None else None,
            not_in=tuple(condition.not_in) if condition.not_in is not None else None,
            bounds=bounds,
            exists=condition.exists,
            possible=possible,
        )


def _step_selector(
    names: str | list[str] | None, kinds: str | list[str] | None, labels: list[str] | None
) -> StepSelector:
    from interlock.policy.sessionrules import StepSelector

    return StepSelector(
        GlobSet.of(names) if names is not None else None, _kinds(kinds), frozenset(labels or ())
    )


def _label_rule_data(label: LabelRuleData) -> RuleData:
    """A label rule as a rule (its selectors are a rule's). An attaching rule reads
    paths as a deny does (the stricter reading: any case), a clearing one as an allow."""
    return RuleData(
        id=label.id,
        decision="deny" if label.attach else "allow",
        reason=f"label rule {label.id}",
        description=label.description,
        mode="enforce",
        kind=label.kind,
        name=label.name,
        scope=label.scope,
        agent=label.agent,
        tenant=label.tenant,
        params=label.params,
        shell=label.shell,
        when=label.when,
    )


def _shell_matcher(condition: ShellData) -> ShellMatcher:
    commands = tuple(
        CommandMatcher(
            programs=GlobSet.of(pattern.program),
            flags=tuple(pattern.flags or ()),
            subcommand=GlobSet.of(pattern.subcommand) if pattern.subcommand is not None else None,
            args=tuple(GlobSet.of(glob) for glob in _list(pattern.args)),
        )
        for pattern in condition.commands or ()
    )
    return ShellMatcher(
        programs=GlobSet.of(condition.programs) if condition.programs is not None else None,
        commands=commands,
        writes=condition.writes,
    )


def _declared_properties(schema: Mapping[str, Any] | None) -> frozenset[str] | None:
    """The argument names a tool's schema declares; None when it admits any."""
    if not isinstance(schema, Mapping):
        return None
    properties = schema.get("properties")
    if not isinstance(properties, Mapping) or schema.get("additionalProperties") not in (
        None,
        False,
    ):
        return None
    return frozenset(str(name) for name in properties)


@functools.lru_cache(maxsize=4096)
def _cel_arguments(expression: str) -> tuple[str, ...]:
    """The ``args.a.b`` paths a CEL expression reads (``has(args.x)`` included; a
    field of a macro variable or inside a string is not one). Cached: a large policy
    repeats its conditions."""
    found: list[str] = []
    tokens = cel_tokens(expression)
    for i, token in enumerate(tokens):
        if token.kind != "ident" or token.text != "args":
            continue
        if i > 0 and tokens[i - 1].text == ".":
            continue
        parts: list[str] = []
        j = i
        while j + 2 < len(tokens) and tokens[j + 1].text == "." and tokens[j + 2].kind == "ident":
            if j + 3 < len(tokens) and tokens[j + 3].text == "(":
                break  # a method call (`args.to.endsWith(...)`): not a field
            parts.append(tokens[j + 2].text)
            j += 2
        if parts and "args" not in _cel_bound_names(expression):
            found.append(".".join(parts))
    return tuple(dict.fromkeys(found))


@functools.lru_cache(maxsize=4096)
def _cel_bound_names(expression: str) -> frozenset[str]:
    """Names bound by comprehension macros (``list.all(x, ...)``), which the CEL binding
    reports as variables too. Cached as the expression's compile is."""
    return frozenset(MACRO_BINDING.findall(expression))


def _known_param(key: str) -> bool:
    if key in EXTRACTED_PARAMS:
        return True
    return key.startswith("args.") and all(part for part in key[5:].split("."))


def _selector(entry: BudgetData | RateLimitData, rules: frozenset[str] | None = None) -> Selector:
    return Selector(
        kinds=_kinds(entry.kind),
        names=GlobSet.of(entry.name) if entry.name is not None else None,
        agents=GlobSet.of(entry.agent) if entry.agent is not None else None,
        tenants=GlobSet.of(entry.tenant) if entry.tenant is not None else None,
        rules=rules,
    )


def _list(value: str | list[str] | None) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else value


def _kinds(value: str | list[str] | None) -> frozenset[str] | None:
    """The kinds a rule, budget or rate limit selects. ``tool`` covers MCP tools too
    (``kind: mcp`` actions): an MCP tool is a tool, and a deny rule written for tools
    must not stop applying because the call came through MCP (docs/adr/0017)."""
    kinds = _set(value)
    if kinds is not None and "tool" in kinds:
        return kinds | {"mcp"}
    return kinds


def _set(value: str | list[str] | None) -> frozenset[str] | None:
    if value is None:
        return None
    return frozenset([value] if isinstance(value, str) else value)


def _rooted(globs: str | Sequence[str], stricter: bool) -> tuple[str, ...]:
    """A path glob's patterns; on the stricter side (a deny's, approval's or label
    rule's ``glob``, an allow's ``not_glob``) a leading ``**/`` or ``*/`` also matches
    with no directory in front: ``**/.env`` holds for the relative ``.env`` (a glob's
    ``*`` needs the ``/`` after it; a policy means "any .env")."""
    patterns = (globs,) if isinstance(globs, str) else tuple(globs)
    if not stricter:
        return patterns
    extra = [p[p.index("/") + 1 :] for p in patterns if p.startswith(("**/", "*/"))]
    return patterns + tuple(e for e in extra if e and e not in patterns)
