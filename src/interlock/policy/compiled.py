"""The compiled form of a policy: what the engine evaluates. Built by the loader."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from interlock.core.decision import Verdict
from interlock.policy.celexpr import CelCondition
from interlock.policy.extract import Facts
from interlock.policy.matchers import CompiledCondition, GlobSet

__all__ = ["CandidateSet", "CompiledPolicy", "CompiledRule"]


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

    def applies_to(self, kind: str, name: str) -> bool:
        """The index test: kind and name only."""
        if self.kinds is not None and kind not in self.kinds:
            return False
        return self.names is None or self.names.matches(name)

    def matches(self, facts: Facts) -> bool:
        """Whether this rule matches; raises EvaluationError when it cannot tell."""
        if self.scopes is not None and facts.scope not in self.scopes:
            return False
        context = facts.context
        if self.agents is not None and (
            context.agent is None or not self.agents.matches(context.agent)
        ):
            return False
        if self.tenants is not None and not self.tenants.matches(context.tenant):
            return False
        params, args = facts.params, facts.args
        for condition in self.conditions:
            if not condition.matches(params, args):
                return False
        return self.when is None or self.when.evaluate(facts.root, self.id)


@dataclass(frozen=True, slots=True)
class CandidateSet:
    """The rules that can apply to one (kind, name), split by tier."""

    deny: tuple[CompiledRule, ...]
    approval: tuple[CompiledRule, ...]
    allow: tuple[CompiledRule, ...]
    shadow: tuple[CompiledRule, ...]  # shadow-mode rules, any tier


_CACHE_LIMIT = 8192


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
    _candidates: dict[tuple[str, str], CandidateSet] = field(default_factory=dict)

    @property
    def rule_ids(self) -> tuple[str, ...]:
        return tuple(rule.id for rule in self.rules)

    def candidates(self, kind: str, name: str) -> CandidateSet:
        key = (kind, name)
        found = self._candidates.get(key)
        if found is None:
            found = self._index(kind, name)
            if len(self._candidates) >= _CACHE_LIMIT:
                self._candidates.clear()
            self._candidates[key] = found
        return found

    def _index(self, kind: str, name: str) -> CandidateSet:
        tiers: dict[Verdict, list[CompiledRule]] = {v: [] for v in Verdict}
        shadow: list[CompiledRule] = []
        for rule in self.rules:
            if not rule.applies_to(kind, name):
                continue
            if rule.shadow or self.shadow_mode:
                shadow.append(rule)
            else:
                tiers[rule.verdict].append(rule)
        return CandidateSet(
            deny=tuple(tiers[Verdict.DENY]),
            approval=tuple(tiers[Verdict.REQUIRE_APPROVAL]),
            allow=tuple(tiers[Verdict.ALLOW]),
            shadow=tuple(shadow),
        )

    def pinned_scope(self, name: str) -> str | None:
        for globs, scope in self.scope_pins:
            if globs.matches(name):
                return scope
        return None

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
