"""The compiled form of a policy: what the engine evaluates. Built by the loader."""

from __future__ import annotations

import dataclasses
import functools
from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from interlock.core.action import Context
from interlock.core.decision import Decision, Verdict
from interlock.errors import EvaluationError
from interlock.ledger.estimate import MaxTokensTable
from interlock.ledger.pricing import DEFAULT_PRICING, PricingTable
from interlock.policy import fastpath
from interlock.policy.celexpr import CelCondition, required_arguments
from interlock.policy.extract import SAFE_ROOTS, Facts, plain_roots
from interlock.policy.intents import GrantPolicy, ToolIntent
from interlock.policy.matchers import CompiledCondition, GlobSet, lookup
from interlock.policy.prefilter import PREFILTER_MIN_RULES, Prefilter
from interlock.policy.shapes import Shape, shape_of
from interlock.policy.shellmatch import ShellMatcher
from interlock.policy.specialise import Decide, always, decider_for
from interlock.policy.specs import ApprovalPolicy, AuditPolicy, BudgetSpec, RateLimitSpec
from interlock.policy.validated import SEVERITY_ORDER

if TYPE_CHECKING:
    from interlock.policy.sessionrules import SessionSpec, SessionTest
    from interlock.policy.toolschema import ArgumentRef

__all__ = [
    "CandidateSet",
    "CompiledPolicy",
    "CompiledRule",
    "TierFilter",
    "same_on_every_facet",
]


RuleTest = Callable[[Facts], bool]
#: ``gate(tenant, agent)`` is False when the rule cannot match a check of that tenant
#: and agent, whatever else the check holds (see :meth:`CandidateSet.narrowed`)
RuleGate = Callable[[str, "str | None"], bool]


@dataclass(frozen=True, slots=True)
class CompiledRule:
    id: str
    verdict: Verdict
    reason: str
    shadow: bool
    kinds: frozenset[str] | None
    names: GlobSet | None
    scopes: frozenset[str] | None
    agents: GlobSet | None
    tenants: GlobSet | None
    conditions: tuple[CompiledCondition, ...]
    when: CelCondition | None
    line: int | None = None
    shell: ShellMatcher | None = None
    #: the arguments the rule reads (params and `when`), for checks against tool schemas
    arguments: tuple[ArgumentRef, ...] = ()
    #: how much is at stake when it fires (low, medium, high, critical), if declared
    severity: str | None = None
    #: the rule's ``session:`` conditions (policy/sessionrules.py), if any
    session: SessionTest | None = None
    #: for a label rule: the labels an allowed match attaches and clears
    attach: frozenset[str] = frozenset()
    clear: frozenset[str] = frozenset()
    # The per-check test, specialised to the matchers this rule has (built once).
    test: RuleTest = field(init=False, repr=False, compare=False)
    #: the checks :attr:`test` AND-s, cheapest first (empty: always true); the
    #: generated decision functions call them in line (policy/specialise.py)
    checks: tuple[RuleTest, ...] = field(init=False, repr=False, compare=False)
    #: None when the check's tenant and agent alone never rule it out
    gate: RuleGate | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        checks = _build_checks(self)
        object.__setattr__(self, "checks", checks)
        object.__setattr__(self, "test", _test_of(checks))
        object.__setattr__(self, "gate", _build_gate(self))

    def applies_to(self, kind: str, name: str, scope: str) -> bool:
        """The index test: kind, name and scope."""
        if self.kinds is not None and kind not in self.kinds:
            return False
        if self.scopes is not None and scope not in self.scopes:
            return False
        return self.names is None or self.names.matches(name)


def _build_checks(rule: CompiledRule) -> tuple[RuleTest, ...]:
    """The checks the index has not already made (agent, tenant, parameters, CEL),
    cheapest first, each a closure with no per-call branching on absent matchers."""
    checks: list[RuleTest] = []
    agents, tenants = rule.agents, rule.tenants
    if agents is not None:
        agent_match = agents.match  # the regex's own match: one Python call fewer

        def agent_test(facts: Facts) -> bool:
            agent = facts.context.agent
            return agent is not None and agent_match(agent) is not None

        checks.append(agent_test)
    if tenants is not None:
        tenant_match = tenants.match
        checks.append(lambda facts: tenant_match(facts.context.tenant) is not None)
    for condition in rule.conditions:
        checks.append(condition.test)
    if rule.shell is not None:
        checks.append(rule.shell.test)
    when = rule.when
    if when is not None:
        checks.append(_when_test(when, rule.id))
    if rule.session is not None:
        checks.append(rule.session.test)
    return tuple(checks)


def _test_of(checks: tuple[RuleTest, ...]) -> RuleTest:
    """The rule's test: its checks AND-ed (:func:`_all_of`)."""
    if not checks:
        return always
    if len(checks) == 1:
        return checks[0]
    return _all_of(checks)


def _build_gate(rule: CompiledRule) -> RuleGate | None:
    """The test of the rule's checks that read only the check's tenant and agent: its
    ``agent`` and ``tenant`` globs, and the conjuncts of its ``when:`` on
    ``context.tenant`` and ``context.agent`` that Python decides exactly. Each is one
    of the rule's AND-ed checks, so when one is false the rule does not match, with no
    error, whatever the others say (:func:`_all_of`). A ``when:`` that reads ``params``
    is left out: a parameter known only as a pattern makes it raise first."""
    gates: list[RuleGate] = []
    agents, tenants = rule.agents, rule.tenants
    if agents is not None:
        agent_match = agents.match
        gates.append(lambda tenant, agent: agent is not None and agent_match(agent) is not None)
    if tenants is not None:
        tenant_match = tenants.match
        gates.append(lambda tenant, agent: tenant_match(tenant) is not None)
    when = rule.when
    if when is not None and when.partial is not None:
        # Imported with a `when:` (its compile parsed it), not by every policy (ADR 0014).
        from interlock.policy.celpartial import context_gates, roots_read
    if (
        when is not None
        and when.partial is not None
        and "params" not in when.variables
        and roots_read(when.partial) <= SAFE_ROOTS
    ):
        for node in context_gates(when.partial):
            decide = node.value

            def when_gate(tenant: str, agent: str | None, decide: Any = decide) -> bool:
                fields = {"tenant": tenant, "agent": agent}
                return decide(lambda root: fields) is not False

            gates.append(when_gate)
    if not gates:
        return None
    if len(gates) == 1:
        return gates[0]
    return lambda tenant, agent: all(gate(tenant, agent) for gate in gates)


def _all_of(checks: tuple[RuleTest, ...]) -> RuleTest:
    """The checks AND-ed, whatever their order: one that is false makes the rule not
    match even if another cannot be evaluated (then that one's error is raised only
    when none is false). So any one check can be made first — by the prefilter, which
    skips a rule whose indexed check is false — without changing a single verdict."""
    if len(checks) == 2:
        first, second = checks

        def both(facts: Facts) -> bool:
            try:
                if not first(facts):
                    return False
            except Exception:
                if not second(facts):
                    return False
                raise
            return second(facts)

        return both

    def all_checks(facts: Facts) -> bool:
        error: Exception | None = None
        for check in checks:
            try:
                if not check(facts):
                    return False
            except Exception as exc:
                if error is None:
                    error = exc
        if error is not None:
            raise error
        return True

    return all_checks


def _when_test(when: CelCondition, rule_id: str) -> RuleTest:
    """``when.evaluate`` on the check's roots, with the Python tree called directly
    (one call fewer on every check, where most `when:` are decided) — or, for the
    usual check, the test generated from the tree (policy/celgen.py)."""
    test = _plain_when_test(when, rule_id)
    reads_params = "params" in when.variables

    def refuse_inexact() -> None:
        # A parameter known only as a pattern (`*/etc/passwd`) would read as text to
        # CEL, and `startsWith('/etc')` would be false where the path may be /etc/...
        raise EvaluationError(
            f"rule {rule_id!r}: `when` reads params, and a parameter of this call is "
            "only known as a pattern (see docs/policy.md, Paths)",
            rule_id=rule_id,
        )

    if when.partial is not None and fastpath.SPECIALISED:
        # Imported with a `when:` (its compile parsed it), not by every policy (ADR 0014).
        from interlock.policy.celgen import when_test

        generated = when_test(
            when.partial, when.run, rule_id, test, refuse_inexact if reads_params else None
        )
        if generated is not None:
            return generated
    if not reads_params:
        return test

    def exact_when_test(facts: Facts) -> bool:
        if facts.inexact:
            refuse_inexact()
        return test(facts)

    return exact_when_test


def _plain_when_test(when: CelCondition, rule_id: str) -> RuleTest:
    run = when.run
    partial = when.partial
    if partial is None:
        return lambda facts: run(facts.root, rule_id)
    decide = partial.value
    needed = required_arguments(when) if fastpath.SPECIALISED else ()
    if needed:
        # ``has(args.x) && ...`` with no ``x``: false before any root is built, as the
        # tree would find (its roots cannot raise on a dict and a Context).
        key = needed[0]

        def when_test_with(facts: Facts) -> bool:
            args = facts.args
            if type(args) is dict and key not in args and plain_roots(facts):
                return False
            roots = facts.root
            decided = decide(roots)
            return run(roots, rule_id) if decided is None else decided

        return when_test_with

    def when_test(facts: Facts) -> bool:
        roots = facts.root
        decided = decide(roots)
        return run(roots, rule_id) if decided is None else decided

    return when_test


Tier = tuple[Verdict, tuple[CompiledRule, ...]]


@dataclass(frozen=True, slots=True)
class CandidateSet:
    """The rules that can apply to one (kind, name, scope): the enforced ones as
    non-empty tiers, strictest first, each sorted by rule id; and, when shadow rules
    apply, the tiers with the shadow rules in them too."""

    enforced: tuple[Tier, ...]
    with_shadow: tuple[Tier, ...] | None  # None: no shadow rule applies
    #: for many rules, what skips those that cannot match (see policy/prefilter.py)
    enforced_filter: TierFilter | None = None
    shadow_filter: TierFilter | None = None
    #: whether some rule has a gate and no prefilter applies: worth :meth:`narrowed`
    gated: bool = False
    #: when no shadow rule applies and the policy enforces: the function deciding a
    #: check by the enforced tiers — the generated one of the tiers (policy/
    #: specialise.py), or one that first narrows them, by the prefilter or by the
    #: check's tenant and agent, and calls that of the tiers left; None otherwise
    decide: Decide | None = None
    _policy: CompiledPolicy | None = field(default=None, repr=False, compare=False)
    _narrowed: dict[tuple[str, str | None], _Narrowed] = field(
        default_factory=dict, repr=False, compare=False
    )

    @classmethod
    def of(
        cls,
        enforced: list[CompiledRule],
        shadow: list[CompiledRule],
        policy: CompiledPolicy | None = None,
    ) -> CandidateSet:
        """The candidate set of these rules; with ``policy`` (the policy they belong
        to), and no shadow rule, also its decision function."""
        tiers = _tiers(enforced)
        with_shadow = _tiers(enforced + shadow) if shadow else None
        make = None
        if policy is not None and with_shadow is None and not policy.shadow_mode:
            make = functools.partial(decider_for, policy=policy)
        enforced_filter = TierFilter.of(tiers, make=make)
        shadow_filter = TierFilter.of(with_shadow) if with_shadow is not None else None
        gated = (
            NARROW_BY_CONTEXT
            and enforced_filter is None
            and shadow_filter is None
            and any(rule.gate is not None for rule in (*enforced, *shadow))
        )
        made = cls(tiers, with_shadow, enforced_filter, shadow_filter, gated)
        if make is not None:
            decide = make(tiers)
            if enforced_filter is not None:
                decide = enforced_filter.dispatcher()
            elif gated:
                decide = made._narrowing(decide)
            object.__setattr__(made, "decide", decide)
            object.__setattr__(made, "_policy", policy)
        return made

    def decide_for(self, names: tuple[Any, ...]) -> Decide | None:
        """:attr:`decide`, for checks whose arguments are a dict of exactly ``names``
        (the calls of one shape of call)."""
        if self.decide is not None and self.enforced_filter is not None:
            return self.enforced_filter.dispatcher_for(names)
        return self.decide

    def _narrowing(self, every: Decide) -> Decide:
        """The decision function that decides by the tiers narrowed for the check's
        tenant and agent (where :meth:`narrowed_for` would narrow), else by ``every``."""
        narrowed = self._narrowed
        learn = self._narrowed_of

        def narrowing(facts: Facts) -> Decision:
            context = facts.context
            # plain_roots, inlined (this runs on every check of a narrowed set)
            if (
                type(facts.args) is dict
                and type(context) is Context
                and type(facts.capabilities) is tuple
            ):
                tenant, agent = context.tenant, context.agent
                if type(tenant) is str and (agent is None or type(agent) is str):
                    found = narrowed.get((tenant, agent))
                    if found is None:
                        found = learn(tenant, agent)
                    decide = found[1]
                    assert decide is not None  # made for a set with a policy
                    return decide(facts)
            return every(facts)

        return narrowing

    def narrowed_for(self, facts: Facts) -> tuple[tuple[Tier, ...], tuple[Tier, ...] | None] | None:
        """:meth:`narrowed` for this check's tenant and agent, when the check is the
        usual kind the gates are exact for — arguments that are a dict, a ``Context``
        with a text tenant and a text or no agent, capabilities that are a tuple
        (:func:`plain_roots`); None otherwise (or when no rule of
        the set has a gate): then every candidate is tested."""
        found = self._narrowed_for(facts)
        return None if found is None else found[0]

    def _narrowed_for(self, facts: Facts) -> _Narrowed | None:
        if not self.gated:
            return None
        if not plain_roots(facts):
            return None
        context = facts.context
        tenant, agent = context.tenant, context.agent
        if type(tenant) is not str or not (agent is None or type(agent) is str):
            return None
        return self._narrowed_of(tenant, agent)

    def narrowed(
        self, tenant: str, agent: str | None
    ) -> tuple[tuple[Tier, ...], tuple[Tier, ...] | None]:
        """The enforced tiers and the tiers with shadow rules, without the rules whose
        gate rules them out for this tenant and agent (remembered per pair). Only for
        a check whose arguments are a dict and whose context is a ``Context`` with a
        text tenant and a text or no agent (:meth:`narrowed_for`); the verdicts, rule
        ids and reasons are those of the full tiers, since a rule left out cannot
        match."""
        return self._narrowed_of(tenant, agent)[0]

    def _narrowed_of(self, tenant: str, agent: str | None) -> _Narrowed:
        key = (tenant, agent)
        found = self._narrowed.get(key)
        if found is None:
            enforced = _narrow(self.enforced, tenant, agent)
            with_shadow = self.with_shadow
            if with_shadow is not None:
                with_shadow = _narrow(with_shadow, tenant, agent)
            policy = self._policy
            decide = decider_for(enforced, policy) if policy is not None else None
            found = ((enforced, with_shadow), decide)
            if len(self._narrowed) >= _NARROWED_LIMIT:
                self._narrowed.clear()
            self._narrowed[key] = found
        return found


#: The narrowed enforced tiers and tiers with shadow rules, and the enforced tiers'
#: decision function (when no shadow rule applies).
_Narrowed = tuple[tuple[tuple[Tier, ...], "tuple[Tier, ...] | None"], "Decide | None"]


#: Whether candidate sets are narrowed by the check's tenant and agent (a seam for the
#: tests that compare narrowed sets with every candidate; read when a set is built).
NARROW_BY_CONTEXT = True

#: The most (tenant, agent) pairs a candidate set remembers its narrowed tiers for.
_NARROWED_LIMIT: Final = 256


def _narrow(tiers: tuple[Tier, ...], tenant: str, agent: str | None) -> tuple[Tier, ...]:
    out: list[Tier] = []
    for verdict, rules in tiers:
        kept = tuple(rule for rule in rules if rule.gate is None or rule.gate(tenant, agent))
        if kept:
            out.append((verdict, kept))
    return tuple(out)


#: The most distinct kept-rule sets a tier filter remembers the tiers of.
_KEPT_LIMIT = 1024


@dataclass(frozen=True, slots=True)
class TierFilter:
    """Tiers with a prefilter over their rules (in tier order): the tiers a check
    needs to test, the rules that cannot match left out."""

    prefilter: Prefilter
    #: each tier's verdict and the position after its last rule, in tier order
    bounds: tuple[tuple[Verdict, int], ...]
    #: what makes the decision function of a set of kept tiers (None: not made)
    make: Callable[[tuple[Tier, ...]], Decide] | None = field(
        default=None, repr=False, compare=False
    )
    #: the tiers (and their decision function) of each set of kept positions seen, by
    #: its bits (a few shapes of call recur)
    _kept: dict[int, tuple[tuple[Tier, ...], Decide | None]] = field(
        default_factory=dict, repr=False, compare=False
    )

    @classmethod
    def of(
        cls,
        tiers: tuple[Tier, ...],
        minimum: int | None = None,
        make: Callable[[tuple[Tier, ...]], Decide] | None = None,
    ) -> TierFilter | None:
        rules = [rule for _, tier in tiers for rule in tier]
        if len(rules) < (PREFILTER_MIN_RULES if minimum is None else minimum):
            return None
        prefilter = Prefilter(rules)
        if not prefilter.indexed:
            return None  # nothing to skip by
        bounds: list[tuple[Verdict, int]] = []
        end = 0
        for verdict, tier in tiers:
            end += len(tier)
            bounds.append((verdict, end))
        return cls(prefilter, tuple(bounds), make)

    def tiers(self, facts: Facts) -> tuple[Tier, ...]:
        """The tiers, holding only the rules that can match ``facts`` (remembered
        per set of kept rules: the tiers depend on nothing else)."""
        bits = self.prefilter.bits(facts)
        found = self._kept.get(bits)
        if found is None:
            found = self._learn(bits)
        return found[0]

    def dispatcher(self) -> Decide:
        """The decision function that decides a check by the function of the tiers
        the prefilter keeps for it (only with ``make``)."""
        kept = self._kept
        bits_of = self.prefilter.bits
        learn = self._learn

        def dispatch(facts: Facts) -> Decision:
            bits = bits_of(facts)
            found = kept.get(bits)
            if found is None:
                found = learn(bits)
            decide = found[1]
            assert decide is not None  # made whenever ``make`` is given
            return decide(facts)

        return dispatch

    def dispatcher_for(self, names: tuple[Any, ...]) -> Decide:
        """:meth:`dispatcher` for checks whose arguments are a dict of exactly
        ``names`` (the calls of one shape): the parameters the prefilter indexes
        among them are known, and read without a search."""
        kept = self._kept
        learn = self._learn
        free, unusual, pairs, others = self.prefilter.plan(names)

        def dispatch_shape(facts: Facts) -> Decision:
            bits = free
            # plain_roots, for arguments that are a dict
            if unusual and not (
                type(facts.context) is Context and type(facts.capabilities) is tuple
            ):
                bits |= unusual
            args = facts.args
            for name, passing in pairs:
                bits |= passing(args[name])
            for name, passing in others:
                bits |= passing(lookup(name, facts.params, args))
            found = kept.get(bits)
            if found is None:
                found = learn(bits)
            decide = found[1]
            assert decide is not None  # made whenever ``make`` is given
            return decide(facts)

        return dispatch_shape

    def _learn(self, bits: int) -> tuple[tuple[Tier, ...], Decide | None]:
        positions = [p for p in range(len(self.prefilter.rules)) if bits >> p & 1]
        tiers = self._tiers_of(positions)
        found = (tiers, self.make(tiers) if self.make is not None else None)
        if len(self._kept) >= _KEPT_LIMIT:
            self._kept.clear()
        self._kept[bits] = found
        return found

    def _tiers_of(self, kept: Iterable[int]) -> tuple[Tier, ...]:
        positions = sorted(kept)
        rules = self.prefilter.rules
        out: list[Tier] = []
        start = 0
        for verdict, end in self.bounds:
            stop = bisect_left(positions, end, start)
            if stop > start:
                out.append((verdict, tuple([rules[p] for p in positions[start:stop]])))
                start = stop
        return tuple(out)


_ORDER = (Verdict.DENY, Verdict.REQUIRE_APPROVAL, Verdict.ALLOW)


def _tiers(rules: list[CompiledRule]) -> tuple[Tier, ...]:
    tiers = []
    for verdict in _ORDER:
        tier = tuple(sorted((r for r in rules if r.verdict is verdict), key=lambda r: r.id))
        if tier:
            tiers.append((verdict, tier))
    return tuple(tiers)


_CACHE_LIMIT = 8192


def same_on_every_facet(rule: CompiledRule) -> bool:
    """Whether ``rule`` tests the same on every facet of a call: no ``scope`` (the
    index gives it every facet's scope) and nothing that reads a facet's own scope,
    parameters or verb (``params``, ``shell:``, ``when:``). Its other tests read what
    every facet of a call shares (:meth:`Facts.with_params`): kind, name, tenant,
    agent, and its ``session:`` — labels and ``after`` read the session's view,
    ``flows_from`` and ``provenance`` the call's ``args`` (the same mapping on every
    facet) and the check's probe cache."""
    return rule.scopes is None and not rule.conditions and rule.when is None and rule.shell is None


@dataclass(slots=True)
class CompiledPolicy:
    """A loaded, validated, compiled policy. Immutable once built (the candidate cache
    only memoises the index)."""

    rules: tuple[CompiledRule, ...]
    default: Verdict
    shadow_mode: bool
    scope_default: str
    scope_pins: tuple[tuple[GlobSet, str], ...]
    approval_url: str | None
    max_depth: int
    max_items: int
    max_param_chars: int
    redaction_patterns: tuple[str, ...]
    source: str | None = None
    description: str | None = None
    default_reason: str = ""
    budgets: tuple[BudgetSpec, ...] = ()
    rate_limits: tuple[RateLimitSpec, ...] = ()
    pricing: PricingTable = DEFAULT_PRICING
    default_max_tokens: MaxTokensTable = field(default_factory=MaxTokensTable)
    audit: AuditPolicy = field(default_factory=AuditPolicy)
    approval_policy: ApprovalPolicy = field(default_factory=ApprovalPolicy)
    #: tool name -> the description the policy's ``tools`` section gives it
    tool_descriptions: Mapping[str, str] = field(default_factory=dict)
    #: tool name → the target and downstream system its calls act on (policy/intents.py)
    tool_intents: Mapping[str, ToolIntent] = field(default_factory=dict)
    #: which allows carry a grant (policy/intents.py)
    grants: GrantPolicy = field(default_factory=GrantPolicy)
    #: what the policy keeps of sessions (label rules, tool labels, bounds); None when
    #: nothing in it reads or labels them (policy/sessionrules.py)
    sessions: SessionSpec | None = None
    _candidates: dict[tuple[str, str, str], CandidateSet] = field(default_factory=dict)
    _pins: dict[str, str | None] = field(default_factory=dict)
    _refusers: dict[tuple[str, str], frozenset[str]] = field(default_factory=dict)
    #: the extraction plan of each shape of call seen (see policy/shapes.py); None
    #: for a shape extracted in full
    shapes: dict[tuple[Any, ...], Shape | None] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.default_reason = f"no rule matched; the policy default is {self.default.value}"

    @property
    def rule_ids(self) -> tuple[str, ...]:
        return tuple(rule.id for rule in self.rules)

    def candidates(self, kind: str, name: str, scope: str) -> CandidateSet:
        """The rules that can apply to this kind, name and scope (memoised)."""
        key = (kind, name, scope)
        found = self._candidates.get(key)
        if found is None:
            found = self._index(kind, name, scope)
            if len(self._candidates) >= _CACHE_LIMIT:
                self._candidates.clear()
            self._candidates[key] = found
        return found

    def _index(self, kind: str, name: str, scope: str) -> CandidateSet:
        enforced: list[CompiledRule] = []
        shadow: list[CompiledRule] = []
        for rule in self.rules:
            if rule.applies_to(kind, name, scope):
                (shadow if rule.shadow or self.shadow_mode else enforced).append(rule)
        return CandidateSet.of(enforced, shadow, self)

    def learn_shape(self, key: tuple[Any, ...], action: Any) -> Shape | None:
        """The extraction plan for calls of ``action``'s shape (``key`` in
        :attr:`shapes`: its kind, name, scope, description and argument names),
        planned and remembered."""
        found = self._plan(action) if fastpath.SPECIALISED else None
        if len(self.shapes) >= _CACHE_LIMIT:
            self.shapes.clear()
        self.shapes[key] = found
        return found

    def _plan(self, action: Any) -> Shape | None:
        name = action.name
        if action.scope is not None:
            pinned = action.scope
        elif type(name) is str:
            pinned = self.pinned_scope(name)
        else:
            pinned = None  # (not planned: shape_of reads the name's type)
        found = shape_of(
            action.kind,
            name,
            action.arguments,
            pinned,
            action.description,
            self.scope_default,
            self.max_items,
            self.max_depth,
        )
        if found is not None and found.scopes is None:
            candidates = self.candidates(action.kind, name, found.scope)
            found = dataclasses.replace(found, decide=candidates.decide_for(found.names))
        return found

    def refusers(self, kind: str, name: str) -> frozenset[str]:
        """The scopes among filesystem and network whose deny or approval rules
        (enforced or shadow) could apply to this kind and name and could judge a file
        or URL the call uses otherwise than the call itself: what a shell command's
        files and URLs are judged against (memoised).

        A rule that reads nothing a derived facet changes (:func:`same_on_every_facet`)
        makes no scope a refuser: it judged the call's main facet already, with the
        same result, and deny-overrides means a derived facet could only repeat it. A
        scope-less ``session:`` rule naming ``shell`` would otherwise have every shell
        call parsed and its paths judged for nothing."""
        key = (kind, name)
        found = self._refusers.get(key)
        if found is None:
            scopes = set()
            for scope in ("filesystem", "network"):
                candidates = self.candidates(kind, name, scope)
                tiers = candidates.with_shadow or candidates.enforced
                if any(
                    verdict is not Verdict.ALLOW
                    and not all(same_on_every_facet(rule) for rule in rules)
                    for verdict, rules in tiers
                ):
                    scopes.add(scope)
            found = frozenset(scopes)
            if len(self._refusers) >= _CACHE_LIMIT:
                self._refusers.clear()
            self._refusers[key] = found
        return found

    def pinned_scope(self, name: str) -> str | None:
        """The scope ``scopes.tools`` pins for this tool name, if any (memoised)."""
        try:
            return self._pins[name]
        except KeyError:
            pass
        found = next((scope for globs, scope in self.scope_pins if globs.matches(name)), None)
        if len(self._pins) >= _CACHE_LIMIT:
            self._pins.clear()
        self._pins[name] = found
        return found

    def severity_of(self, rule_ids: Iterable[str]) -> str | None:
        """The highest ``severity`` the rules named declare (``None``: none declares
        one): what an approval asked for by those rules puts at stake.

        Example::

            policy.severity_of(("refund-large",))    # 'high'
        """
        wanted = set(rule_ids)
        found = {rule.severity for rule in self.rules if rule.id in wanted and rule.severity}
        return max(found, key=SEVERITY_ORDER.index, default=None)

    def approval_link(self, approval_id: str | None) -> str | None:
        if self.approval_url is None:
            return None
        return self.approval_url.replace("{id}", approval_id or "pending")

    def describe(self) -> Mapping[str, Any]:
        return {
            "source": self.source,
            "rules": len(self.rules),
            "default": self.default.value,
            "mode": "shadow" if self.shadow_mode else "enforce",
        }
