"""Skipping the rules that cannot match, in one pass per parameter.

A tool with many rules (thousands, in a policy generated per customer or per
endpoint) would otherwise have every rule of a tier tested one by one. The prefilter
picks, for each rule, one condition the rule needs — its *discriminator*:

- an ``eq`` / ``in`` of text on a parameter: an exact lookup in a dict;
- a ``glob`` on a parameter: one RE2 set of every such glob, matched once;
- a ``regex`` on a parameter: one RE2 set of every such regex, searched once;
- any other test on a parameter (a number bound, ``not_in``...): that the parameter is
  there, since every test but ``exists: false`` is false on a missing one;
- for a rule with no such condition, a ``has(args.x)`` its ``when:`` is AND-ed with
  (``has(args.body) && args.body.contains(...)``): that ``x`` is there, for the usual
  check (see :func:`~interlock.policy.celexpr.required_arguments`);

and at a check runs each set once over the parameter's value, keeping only the rules
whose discriminator holds (and every rule with none). The rules kept are then tested
in full, exactly as without the prefilter — and since a rule's checks are AND-ed in
any order (a false check makes the rule not match, whatever another would say;
:func:`interlock.policy.compiled._all_of`), skipping a rule whose discriminator is
false changes no verdict, no rule id and no reason. Property tests
(tests/policy/test_prefilter_equivalence.py) hold the two ways to the same answers.

RE2 refuses a set whose patterns together exceed its memory budget (each may fit
alone): such a set is halved until each part compiles, and a pattern no set can
hold leaves its rule unindexed — tested in full at every check.

A value the sets cannot read — not plain text (a list, a number, a path known only as
a pattern) — keeps every rule discriminated on that parameter.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from interlock.core.action import Context
from interlock.policy import fastpath
from interlock.policy.celexpr import required_arguments
from interlock.policy.matchers import (
    MISSING,
    CompiledCondition,
    Re2Set,
    RegexError,
    compile_re2_set,
    glob_to_re2,
    lookup,
)

if TYPE_CHECKING:
    from interlock.policy.compiled import CompiledRule
    from interlock.policy.extract import Facts

__all__ = ["PREFILTER_MIN_RULES", "Prefilter"]

#: Fewer candidate rules than this are tested one by one: a set's own cost (a few µs)
#: is more than testing a handful of rules.
PREFILTER_MIN_RULES: Final = 24


@dataclass(slots=True)
class _Key:
    """The discriminators on one parameter."""

    literals: dict[str, list[int]] = field(default_factory=dict)  # text -> rule indexes
    globs: list[tuple[str, bool, int]] = field(default_factory=list)  # (glob, fold, rule)
    regexes: list[tuple[str, int]] = field(default_factory=list)  # (regex, rule)
    rules: set[int] = field(default_factory=set)  # every rule discriminated here
    #: rules whose discriminator is only that the parameter is there (a number bound,
    #: a ``not_in``...): kept whenever it is
    present: set[int] = field(default_factory=set)
    #: (a set's match on UTF-8, the rule of each of its patterns): one set of the
    #: globs, one of the regexes — more when RE2 cannot hold them in one (its memory
    #: budget)
    sets: tuple[tuple[Callable[[bytes], list[int] | None], list[int]], ...] = ()

    def compile(self) -> set[int]:
        """Build the sets; the rules whose pattern no set can hold (to keep always)."""
        unheld: set[int] = set()
        sets: list[tuple[Re2Set, list[int]]] = []
        if self.globs:
            patterns = [glob_to_re2(glob, fold=fold) for glob, fold, _ in self.globs]
            owners = [rule for _, _, rule in self.globs]
            sets += _sets(patterns, owners, anchored=True, unheld=unheld)
        if self.regexes:
            patterns = [regex for regex, _ in self.regexes]
            owners = [rule for _, rule in self.regexes]
            sets += _sets(patterns, owners, anchored=False, unheld=unheld)
        self.sets = tuple((made.match_bytes, owner) for made, owner in sets)
        return unheld

    def bits(self) -> Callable[[Any], int]:
        """``bits(value)``: the rules discriminated here that ``value`` (MISSING for a
        missing parameter) can satisfy, as bits of their positions — none for a
        missing value (a condition on it is false), all for one that is not plain
        text (the rules judge it themselves)."""
        every = _mask(self.rules)
        present = _mask(self.present)
        literals = {value: _mask(rules) for value, rules in self.literals.items()}
        sets = tuple((match, [1 << owner for owner in owners]) for match, owners in self.sets)
        if not literals and not sets:

            def presence(value: Any) -> int:
                if value is MISSING:
                    return 0
                return present if type(value) is str else every

            return presence

        def passing(value: Any) -> int:
            if value is MISSING:
                return 0
            if type(value) is not str:
                return every
            found = present
            if literals:
                hit = literals.get(value)
                if hit is not None:
                    found |= hit
            if sets:
                data = value.encode("utf-8", "surrogatepass")  # once for every set
                for match, masks in sets:
                    matched = match(data)
                    if matched:
                        for i in matched:
                            found |= masks[i]
            return found

        return passing


def _mask(positions: Iterable[int]) -> int:
    found = 0
    for position in positions:
        found |= 1 << position
    return found


def _sets(
    patterns: list[str], owners: list[int], *, anchored: bool, unheld: set[int]
) -> list[tuple[Re2Set, list[int]]]:
    """``patterns`` in as few RE2 sets as RE2 accepts: halved until each set fits its
    memory budget. A pattern no set can hold adds its rule to ``unheld``."""
    try:
        return [(compile_re2_set(patterns, anchored=anchored), owners)]
    except RegexError:
        if len(patterns) == 1:
            unheld.add(owners[0])
            return []
    half = len(patterns) // 2
    return _sets(patterns[:half], owners[:half], anchored=anchored, unheld=unheld) + _sets(
        patterns[half:], owners[half:], anchored=anchored, unheld=unheld
    )


class Prefilter:
    """The rules of one candidate set that can match a check, found per parameter."""

    __slots__ = (
        "_flat",
        "_free",
        "_free_bits",
        "_keys",
        "_other",
        "_rules",
        "_unusual",
        "_unusual_bits",
    )

    def __init__(self, rules: Iterable[CompiledRule]) -> None:
        self._rules: tuple[CompiledRule, ...] = tuple(rules)
        self._keys: dict[str, _Key] = {}
        #: rules indexed by what their ``when:`` needs: kept for an unusual check
        self._unusual: set[int] = set()
        free: set[int] = set()
        for index, rule in enumerate(self._rules):
            if not self._index(index, rule):
                free.add(index)
        for key in self._keys.values():
            free |= key.compile()  # a rule no set can hold is tested in full, always
        self._free: frozenset[int] = frozenset(free)
        self._free_bits = _mask(free)
        self._unusual_bits = _mask(self._unusual)
        # ``args.<name>`` is one dict lookup; a nested path or an extracted parameter
        # goes through the general lookup
        self._flat: dict[str, Callable[[Any], int]] = {}
        self._other: list[tuple[str, Callable[[Any], int]]] = []
        for name, key in self._keys.items():
            if name.startswith("args.") and "." not in name[5:]:
                self._flat[name[5:]] = key.bits()
            else:
                self._other.append((name, key.bits()))

    def _index(self, index: int, rule: CompiledRule) -> bool:
        """Index ``rule`` by one of its conditions, else by an argument its ``when:``
        needs; False when nothing can be indexed."""
        best: tuple[int, CompiledCondition] | None = None
        for condition in rule.conditions:
            rank = _rank(condition)
            if rank is not None and (best is None or rank < best[0]):
                best = (rank, condition)
        if best is None:
            return self._index_when(index, rule)
        condition = best[1]
        key = self._keys.setdefault(condition.key, _Key())
        key.rules.add(index)
        if condition.eq is not MISSING or condition.in_ is not None:
            values = [condition.eq] if condition.eq is not MISSING else list(condition.in_ or ())
            for value in values:
                key.literals.setdefault(value, []).append(index)
        elif condition.glob is not None:
            fold = condition.glob.ignore_case
            for glob in condition.glob.patterns:
                key.globs.append((glob, fold, index))
        elif condition.regex is not None:
            for regex in condition.regex.patterns:
                key.regexes.append((regex, index))
        else:
            key.present.add(index)
        return True

    def _index_when(self, index: int, rule: CompiledRule) -> bool:
        """Index ``rule`` by the presence of an argument its ``when:`` is false
        without (``has(args.body) && ...``, see :func:`required_arguments`). Not when
        the ``when:`` reads ``params``: a parameter known only as a pattern makes the
        rule raise first. Such a rule is always kept for a check whose CEL roots could
        fail to build (:func:`plain_roots`), where that reasoning does not hold."""
        when = rule.when
        if when is None or "params" in when.variables or not fastpath.SPECIALISED:
            return False
        needed = required_arguments(when)
        if not needed:
            return False
        key = self._keys.setdefault(f"args.{needed[0]}", _Key())
        key.rules.add(index)
        key.present.add(index)
        self._unusual.add(index)
        return True

    def keep(self, facts: Facts) -> set[int]:
        """The positions of the rules to test in full."""
        found = self.bits(facts)
        return {position for position in range(len(self._rules)) if found >> position & 1}

    def bits(self, facts: Facts) -> int:
        """The rules to test in full, as bits of their positions."""
        found = self._free_bits
        args = facts.args
        # plain_roots, inlined (this runs on every check of a large candidate set)
        if self._unusual_bits and not (
            type(args) is dict
            and type(facts.context) is Context
            and type(facts.capabilities) is tuple
        ):
            found |= self._unusual_bits
        flat = self._flat
        if flat:
            if type(args) is dict:
                # whichever side is smaller: a call has a few arguments, a large policy
                # may index many parameter names
                if len(args) < len(flat):
                    for name, value in args.items():
                        passing = flat.get(name)
                        if passing is not None:
                            found |= passing(value)
                else:
                    for name, passing in flat.items():
                        found |= passing(args.get(name, MISSING))
            else:
                for name, passing in flat.items():
                    found |= passing(lookup("args." + name, {}, args))
        if self._other:
            params = facts.params
            for name, passing in self._other:
                found |= passing(lookup(name, params, args))
        return found

    def plan(self, names: Iterable[Any]) -> tuple[int, int, tuple[Any, ...], tuple[Any, ...]]:
        """What :meth:`bits` does for a call whose arguments are a dict of exactly
        ``names``: the bits of the rules always kept, of those kept for an unusual
        check, the (name, passing) of each of those arguments indexed here, and the
        (parameter, passing) of the parameters read otherwise."""
        pairs = tuple((name, self._flat[name]) for name in names if name in self._flat)
        return (self._free_bits, self._unusual_bits, pairs, tuple(self._other))

    @property
    def rules(self) -> tuple[CompiledRule, ...]:
        return self._rules

    @property
    def indexed(self) -> int:
        """How many rules have a discriminator."""
        return len(self._rules) - len(self._free)


def _rank(condition: CompiledCondition) -> int | None:
    """How good a discriminator the condition is (lower is better); None: it cannot
    be one (``exists: false``, which holds exactly when the parameter is missing)."""
    if condition.exists is False:
        return None
    literal = condition.eq if condition.eq is not MISSING else None
    if literal is not None and type(literal) is str:
        return 0
    if condition.in_ is not None and condition.in_ and all(type(v) is str for v in condition.in_):
        return 1
    if condition.glob is not None and not condition.glob.ignore_case:
        return 2  # (a case-insensitive glob: RE2's case folding is not Python's in every script)
    if condition.regex is not None:
        return 3
    # Any other test (a number bound, ``ne``, ``not_in``, ``not_glob``, ``exists: true``)
    # is false when the parameter is missing (CompiledCondition): its presence is
    # still a discriminator, and most calls lack most parameters a policy names.
    return 4
