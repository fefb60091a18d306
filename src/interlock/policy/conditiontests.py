"""The per-check test of one parameter condition, generated for its shape.

A :class:`~interlock.policy.matchers.CompiledCondition` judges a value by walking all
of its possible tests (``_judge``: a dozen attribute reads, whatever the condition
holds). Most conditions hold one kind of test — one glob or regex, a literal or a
list of text literals, number bounds — and most values are of the one type that
test reads. For those, :func:`condition_test` makes a test that reads the parameter
and answers for that type in one expression, and hands any other value to
``_judge`` itself (which then raises, or judges a path known only as a pattern,
exactly as before):

- ``text``: one glob, regex, ``not_glob`` or ``not_regex``, on ``str`` values;
- ``literal``: ``eq`` / ``ne`` / ``in`` / ``not_in`` whose literals are all exactly
  ``str``, on ``str`` values (text equals text by its contents, and never equals a
  number, a bool or null: ``matchers._equal``);
- ``bounds``: ``gt`` / ``gte`` / ``lt`` / ``lte`` alone, on ``int`` and ``float``
  values that are finite (``math.isfinite`` first, as ``_judge`` does, so an int
  too large for a float raises the same ``OverflowError``);
- anything else: the value handed to ``_judge``.

The code is generated from the kind of lookup (an extracted parameter, a flat
argument, a dotted path), the kind of test and the comparison operators, all from
this module's own tables; the key, the patterns and the literals are arguments of the
factory, never text of the generated source.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any, Final

__all__ = ["condition_test"]

#: How each kind of lookup reads the value (``MISSING`` when it is not there).
_GETTERS: Final = {
    "param": "value = facts.params.get(KEY, MISSING)",
    "flat": "value = facts.args.get(KEY, MISSING)",
    "path": "value = LOOKUP(KEY, facts.params, facts.args)",
}
#: The comparison of each bound, as the generated expression spells it.
_OPERATORS: Final = {"gt": ">", "gte": ">=", "lt": "<", "lte": "<="}

#: What ``Test`` returns: the check's own test, taking the check's facts.
Test = Callable[[Any], bool]


def condition_test(
    getter: str,
    key: str,
    kind: str,
    judge: Callable[[Any], bool],
    *,
    missing: object,
    lookup: Callable[..., Any],
    match: Callable[[str], object | None] | None = None,
    texts: frozenset[str] = frozenset(),
    wanted: bool = True,
    bounds: tuple[tuple[str, float], ...] = (),
) -> Test:
    """The test of a condition with a ``kind`` of test (``absent``: ``exists: false``;
    ``text``; ``literal``; ``bounds``; ``general``) on the value ``getter``
    (``param``, ``flat``, ``path``) reads at ``key`` (the argument's own name for
    ``flat``)."""
    operators = tuple(op for op, _ in bounds)
    factory = _factory(getter, kind, operators)
    constants = tuple(bound for _, bound in bounds)
    test: Test = factory(key, judge, missing, lookup, match, texts, wanted, constants)
    return test


@functools.lru_cache(maxsize=256)
def _factory(getter: str, kind: str, operators: tuple[str, ...]) -> Callable[..., Test]:
    lines = [
        "def make(KEY, JUDGE, MISSING, LOOKUP, MATCH, TEXTS, WANTED, BOUNDS):",
    ]
    if operators:
        names = [f"B{i}" for i in range(len(operators))]
        lines.append(f"    {', '.join(names)}, = BOUNDS")
    lines += ["    def test(facts):", f"        {_GETTERS[getter]}"]
    if kind == "absent":
        lines.append("        return value is MISSING")
    elif kind == "general":
        lines.append("        return value is not MISSING and JUDGE(value)")
    else:
        lines += ["        if value is MISSING:", "            return False"]
        if kind == "text":
            lines += [
                "        if type(value) is str:",
                "            return (MATCH(value) is not None) is WANTED",
            ]
        elif kind == "literal":
            lines += [
                "        if type(value) is str:",
                "            return (value in TEXTS) is WANTED",
            ]
        elif kind == "bounds":
            compared = " and ".join(
                f"value {_OPERATORS[op]} B{i}" for i, op in enumerate(operators)
            )
            lines += [
                "        kind = type(value)",
                "        if (kind is int or kind is float) and ISFINITE(value):",
                f"            return {compared}",
            ]
        else:
            raise ValueError(f"no condition test of kind {kind!r}")
        lines.append("        return JUDGE(value)")
    lines.append("    return test")
    namespace: dict[str, Any] = {
        "__builtins__": {"type": type, "str": str, "int": int, "float": float},
        "ISFINITE": math.isfinite,
    }
    exec(compile("\n".join(lines), f"<interlock condition {getter} {kind}>", "exec"), namespace)
    factory: Callable[..., Test] = namespace["make"]
    return factory
