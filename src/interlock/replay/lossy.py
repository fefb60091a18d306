"""What a record cannot say: redacted arguments and context never recorded.

A record's arguments are stored redacted (:mod:`interlock.core.redaction`): a secret
becomes ``[REDACTED]`` or ``[REDACTED:<kind>]``, bytes ``<bytes len=N>``, a value too
deep ``<truncated: depth>``, a cycle ``<cycle>``, a value with no JSON form
``<unrepresentable: T>``, an int too wide ``<int bits=N>``. The trusted context is
stored in part: tenant, agent, session and call id, not ``agent_type``, ``runtime``,
``run_id``, ``idempotency_key`` or ``downstream``.

A rule whose match reads such a value cannot be judged from the record: its match is
*unknown*. :class:`RuleReads` says, once per rule, which arguments, parameters and
context fields it reads (``params:`` conditions, ``shell:``, and the fields of a
``when:``); :func:`unknown_rules` gives the rules of a call whose match is unknown.
Whether that changes the verdict is :func:`verdict_unknown`'s question.

Example::

    >>> lossy_value({"to": "a@b.example", "api_key": "[REDACTED]"})
    True
    >>> lossy_value({"to": "a@b.example"})
    False
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from interlock.core.decision import Decision, Verdict
from interlock.policy.compiled import CompiledRule

__all__ = [
    "MARKERS",
    "UNRECORDED_CONTEXT",
    "LossyCall",
    "RuleReads",
    "body_may_be_lossy",
    "lossy_call",
    "lossy_value",
    "unknown_rules",
    "verdict_unknown",
]

#: What redaction writes in place of a value (lower case: parameters are normalised).
MARKERS: Final = (
    "[redacted",
    "<bytes len=",
    "<truncated: depth>",
    "<cycle>",
    "<unrepresentable: ",
    "<int bits=",
)
_BODY_MARKERS: Final = ("[REDACTED", *MARKERS[1:])
#: Context fields a decision record does not keep.
UNRECORDED_CONTEXT: Final = frozenset(
    {"agent_type", "runtime", "run_id", "idempotency_key", "downstream"}
)
#: Runs the shell facts are built from.
_COMMAND: Final = "command"
#: Whole-root reads.
_ALL: Final = "*"

_RANK: Final = {
    Verdict.ALLOW: 0,
    Verdict.REQUIRE_APPROVAL: 1,
    Verdict.DENY: 2,
    Verdict.UNDETERMINED: 3,
}


def body_may_be_lossy(body: str) -> bool:
    """A quick test on a stored body: False means no value of it was redacted."""
    if "[REDACTED" in body:
        return True
    return "<" in body and any(marker in body for marker in _BODY_MARKERS[1:])


def lossy_value(value: Any) -> bool:
    """Whether ``value`` (a recorded value or an extracted parameter) holds something
    redaction replaced, in a key or a value, at any depth."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if _lossy_text(item):
                return True
        elif isinstance(item, Mapping):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
        elif (
            not isinstance(item, (int, float, bool))
            and item is not None
            and _lossy_text(str(item))  # a parameter object (a path pattern, ...)
        ):
            return True
    return False


def _lossy_text(text: str) -> bool:
    lowered = text.lower()
    return any(marker in lowered for marker in MARKERS)


@dataclass(frozen=True, slots=True)
class LossyCall:
    """What of one call's record is lost: the top-level argument names whose value
    (or a key under it) was redacted, and whether an argument *name* itself was."""

    args: frozenset[str]
    renamed: bool

    def __bool__(self) -> bool:
        return bool(self.args) or self.renamed


_NOTHING_LOST: Final = LossyCall(frozenset(), False)


def lossy_call(arguments: Mapping[str, Any], body: str) -> LossyCall:
    """What redaction took from a recorded call's ``arguments`` (``body``: its stored
    record, tested first: most records lost nothing)."""
    if not body_may_be_lossy(body):
        return _NOTHING_LOST
    lost = frozenset(str(key) for key, value in arguments.items() if lossy_value(value))
    renamed = any(lossy_value(key) for key in arguments)
    return LossyCall(lost, renamed)


@dataclass(frozen=True, slots=True)
class RuleReads:
    """What one rule's match reads: top-level argument names, parameter names and the
    context fields a record does not keep (``*``: the whole root)."""

    rule: CompiledRule
    args: frozenset[str]
    params: frozenset[str]
    unrecorded: frozenset[str]

    @classmethod
    def of(cls, rule: CompiledRule) -> RuleReads:
        args: set[str] = set()
        params: set[str] = set()
        unrecorded: set[str] = set()
        for condition in rule.conditions:
            key = condition.key
            if key.startswith("args."):
                args.add(key[5:].split(".", 1)[0])
            else:
                params.add(key)
        if rule.shell is not None:
            params.add(_COMMAND)
        when = rule.when
        if when is not None:
            for _, root, key in (*when.fields, *when.presence):
                _note(root, key, args, params, unrecorded)
            for root in when.whole:
                _note(root, _ALL, args, params, unrecorded)
        return cls(rule, frozenset(args), frozenset(params), frozenset(unrecorded))

    def unknown_for(self, lost: LossyCall, lossy_params: frozenset[str]) -> str | None:
        """Why this rule's match cannot be told from the record (``None``: it can)."""
        if self.unrecorded:
            return f"reads context.{sorted(self.unrecorded)[0]}, which records do not keep"
        if lost.renamed and self.args:
            return "reads arguments, and an argument's name was redacted"
        if self.args:
            hit = lost.args & self.args if _ALL not in self.args else lost.args
            if hit:
                return f"reads args.{sorted(hit)[0]}, which was redacted"
        if self.params and lossy_params:
            hit = lossy_params & self.params if _ALL not in self.params else lossy_params
            if hit:
                return f"reads parameter {sorted(hit)[0]!r}, which was redacted"
        return None


def _note(root: str, key: str, args: set[str], params: set[str], unrecorded: set[str]) -> None:
    if root == "args":
        args.add(key)
    elif root == "params":
        params.add(key)
    elif root == "shell":
        params.add(_COMMAND)
    elif root == "context" and (key == _ALL or key in UNRECORDED_CONTEXT):
        unrecorded.add(key)


def unknown_rules(
    reads: Iterable[RuleReads],
    facts: Any,
    lost: LossyCall,
) -> list[tuple[CompiledRule, str]]:
    """The enforced rules that select this call (kind, name, scope, tenant, agent) and
    whose match reads what the record lost, each with why."""
    lossy_params = _lossy_params(facts) if lost else frozenset()
    scopes = facts.scopes or (facts.scope,)
    context = facts.context
    found: list[tuple[CompiledRule, str]] = []
    for read in reads:
        rule = read.rule
        if not any(rule.applies_to(facts.kind, facts.name, scope) for scope in scopes):
            continue
        if rule.tenants is not None and not rule.tenants.matches(context.tenant):
            continue
        if rule.agents is not None and (
            context.agent is None or not rule.agents.matches(context.agent)
        ):
            continue
        why = read.unknown_for(lost, lossy_params)
        if why is not None:
            found.append((rule, why))
    return found


def _lossy_params(facts: Any) -> frozenset[str]:
    names = {key for key, value in facts.params.items() if lossy_value(value)}
    for variant in facts.variants or ():
        names.update(key for key, value in variant.items() if lossy_value(value))
    return frozenset(names)


def verdict_unknown(decision: Decision, unknown: list[tuple[CompiledRule, str]]) -> str | None:
    """Why the verdict itself cannot be told when the rules in ``unknown`` may or may
    not match (``None``: it is the same either way). Deny overrides, so a rule whose
    match is unknown changes the verdict only if it is stricter than the verdict
    reached, if the verdict came from the default and it says otherwise, or if it is
    one of the rules that decided and none of the others is known to match."""
    if not unknown:
        return None
    verdict = decision.verdict
    if verdict is Verdict.UNDETERMINED:
        rule, why = unknown[0]
        return f"rule {rule.id!r} {why}"
    decided = set(decision.rule_ids)
    unknown_ids = {rule.id for rule, _ in unknown}
    for rule, why in unknown:
        if _RANK[rule.verdict] > _RANK[verdict]:
            return f"rule {rule.id!r} {why}"
        if not decided and rule.verdict is not verdict:
            return f"rule {rule.id!r} {why}"
        if rule.id in decided and decided <= unknown_ids:
            return f"rule {rule.id!r} {why}"
    return None
