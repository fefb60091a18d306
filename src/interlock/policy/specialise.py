"""One generated decision function per set of candidate tiers.

:func:`interlock.policy.outcomes.judge` walks the tiers of a check's candidate rules
in loops: a tier, a rule, a test, a list of matches, then a ``Decision`` built from the
outcome. On the usual check — no shadow rule applies — the same answer comes from a
function made for those tiers once, when they are first used (:func:`decider_for`):

- every rule's checks are called straight from local variables, unrolled and
  AND-ed in line (``c1(facts) and c2(facts)``: without the call through the rule's
  own ``test``), and the matching rules of a tier are kept as the bits of an int;
- the decision's verdict, reason, rule ids and approval link for a set of matching
  rules are worked out once and remembered (per tier, by those bits), so a check
  builds nothing but the ``Decision`` itself and its id;
- a rule whose test is always true (no condition left after the index) is not called,
  and the tiers after the first one holding such a rule are left out: that tier
  always decides;
- **any exception** in a test sends the check to the reference path
  (:func:`~interlock.policy.outcomes.judge` then
  :func:`~interlock.policy.outcomes.decision_of`) from the start, so undetermined
  verdicts, their causes and the "allowed either way" case are the reference's own.

The code of a factory is generated from the tiers' *shape* alone — how many rules each
tier has and how many checks each rule has (none: always true) — and compiled once per
shape; the rules' checks and the remembered decisions are handed to the factory as
arguments. No text of a policy (an id, a reason, a pattern) is ever part of generated
source.

Sets of more than :data:`MAX_SPECIALISED_RULES` rules are decided by the reference
path (a very large generated function would cost more to compile than it saves).
Property tests (``tests/policy/test_specialised_equivalence.py``) hold the generated
functions to the reference on random policies and calls.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from interlock.core.decision import ApprovalRef, Decision, Verdict, decision_ids
from interlock.policy import fastpath
from interlock.policy.outcomes import decision_of, judge

if TYPE_CHECKING:
    from interlock.policy.compiled import CompiledPolicy, CompiledRule, Tier
    from interlock.policy.extract import Facts

__all__ = ["MAX_SPECIALISED_RULES", "Decide", "always", "decider_for"]

#: A function deciding one check's facts (no shadow rule applies).
Decide = Callable[["Facts"], Decision]
#: The verdict, reason, rule ids and approval of a decision, remembered.
_Head = tuple[Verdict, str, tuple[str, ...], ApprovalRef | None]

#: Candidate sets of more rules than this are decided by the reference path.
MAX_SPECIALISED_RULES: Final = 32
#: The most sets of matching rules a tier remembers the decision of.
_HEADS_LIMIT: Final = 256

_REQUIRE_APPROVAL: Final = Verdict.REQUIRE_APPROVAL


def always(facts: Facts) -> bool:
    """The test of a rule with nothing left to test once the index has chosen it."""
    return True


def decider_for(tiers: tuple[Tier, ...], policy: CompiledPolicy) -> Decide:
    """A function giving exactly ``decision_of(judge(facts, tiers, policy.default),
    policy, None)`` (but the decision's id) for any ``facts``."""
    default = policy.default

    def reference(facts: Facts) -> Decision:
        return decision_of(judge(facts, tiers, default), policy, None)

    if not fastpath.SPECIALISED:
        return reference
    kept: list[Tier] = []
    for verdict, rules in tiers:
        kept.append((verdict, rules))
        if any(not rule.checks for rule in rules):
            break  # this tier always has a match: no later tier is ever reached
    if sum(len(rules) for _, rules in kept) > MAX_SPECIALISED_RULES:
        return reference
    shape = tuple((len(rules), tuple(len(rule.checks) for rule in rules)) for _, rules in kept)
    tests = tuple(tuple(check for rule in rules for check in rule.checks) for _, rules in kept)
    heads: list[dict[int, _Head]] = []
    for verdict, rules in kept:
        found: dict[int, _Head] = {}
        for position, rule in enumerate(rules):
            found[1 << position] = _head(verdict, (rule,), policy)
        heads.append(found)

    def more(tier: int, bits: int) -> _Head:
        """The remembered decision of a set of matching rules not seen before."""
        verdict, rules = kept[tier]
        head = _head(verdict, tuple(r for i, r in enumerate(rules) if bits >> i & 1), policy)
        if len(heads[tier]) < _HEADS_LIMIT:
            heads[tier][bits] = head
        return head

    approval = _approval(policy) if default is _REQUIRE_APPROVAL else None
    fallback_head: _Head = (default, policy.default_reason, (), approval)
    made: Decide = _factory(shape)(tests, tuple(heads), fallback_head, reference, more)
    return made


def _head(verdict: Verdict, rules: tuple[CompiledRule, ...], policy: CompiledPolicy) -> _Head:
    """What :func:`decision_of` reports for these matching rules of a tier."""
    ids: tuple[str, ...]
    if len(rules) == 1:
        reason, ids = rules[0].reason, (rules[0].id,)
    else:
        reason, ids = "; ".join(rule.reason for rule in rules), tuple(r.id for r in rules)
    return (verdict, reason, ids, _approval(policy) if verdict is _REQUIRE_APPROVAL else None)


def _approval(policy: CompiledPolicy) -> ApprovalRef:
    return ApprovalRef(id=None, url=policy.approval_link(None))


#: each tier's number of rules and the number of checks of each rule (0: always true)
_Shape = tuple[tuple[int, tuple[int, ...]], ...]


@functools.lru_cache(maxsize=512)
def _factory(shape: _Shape) -> Callable[..., Decide]:
    """The factory of decision functions for tiers of this shape, compiled once."""
    lines = [
        "def make(T, H, DEFAULT, REFERENCE, MORE):",
    ]
    for tier, (_, counts) in enumerate(shape):
        names = [f"t{tier}_{i}_{j}" for i, count in enumerate(counts) for j in range(count)]
        if names:
            lines.append(f"    {', '.join(names)}, = T[{tier}]")
        lines.append(f"    h{tier} = H[{tier}]")
    lines += [
        "    def decide(facts):",
        "        try:",
    ]
    lines += _tier_lines(shape, 0, "            ")
    lines += [
        "        except Exception:",
        "            return REFERENCE(facts)",
        "        v, r, i, a = h",
        "        return NEW(DECISION, (v, r, i, None, next(IDS), a, None, False, None, None))",
        "    return decide",
    ]
    namespace: dict[str, Any] = {
        "__builtins__": {"Exception": Exception, "next": next},
        "NEW": tuple.__new__,
        "DECISION": Decision,
        "IDS": decision_ids(),
    }
    exec(compile("\n".join(lines), f"<interlock decide {_shape_name(shape)}>", "exec"), namespace)
    factory: Callable[..., Decide] = namespace["make"]
    return factory


def _tier_lines(shape: _Shape, tier: int, indent: str) -> list[str]:
    """The statements that leave in ``h`` the decision of tiers ``tier`` onwards."""
    if tier == len(shape):
        return [f"{indent}h = DEFAULT"]
    count, counts = shape[tier]
    always_bits = sum(1 << i for i, checks in enumerate(counts) if not checks)
    rest = _tier_lines(shape, tier + 1, indent + "    ")
    if count == 1 and not always_bits:  # one rule: its remembered decision, or on
        return [
            f"{indent}if {_matches(tier, 0, counts[0])}:",
            f"{indent}    h = h{tier}[1]",
            f"{indent}else:",
            *rest,
        ]
    out = [f"{indent}k = {always_bits}"]
    for i, checks in enumerate(counts):
        if checks:
            out += [f"{indent}if {_matches(tier, i, checks)}:", f"{indent}    k |= {1 << i}"]
    found = [
        f"h = h{tier}.get(k)",
        "if h is None:",
        f"    h = MORE({tier}, k)",
    ]
    if always_bits:  # this tier always decides: nothing after it
        return out + [indent + line for line in found]
    out.append(f"{indent}if k:")
    out += [indent + "    " + line for line in found]
    out.append(f"{indent}else:")
    return out + rest


def _matches(tier: int, rule: int, checks: int) -> str:
    """The expression of a rule's match: its checks AND-ed, in order (any error goes
    to the reference path, which then AND-s them in any order, as ``_all_of`` does)."""
    return " and ".join(f"t{tier}_{rule}_{j}(facts)" for j in range(checks))


def _shape_name(shape: _Shape) -> str:
    return " ".join(f"{count}/{counts.count(0)}" for count, counts in shape) or "empty"
