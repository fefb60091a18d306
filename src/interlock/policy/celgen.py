"""A ``when:`` test generated from its Python tree (:mod:`interlock.policy.celpartial`).

The tree decides most ``when:`` conditions exactly, but walking it costs a Python call
per node (``all_of``, each atom, the lazily built CEL roots behind ``facts.root``):
about ten calls for ``has(args.amount) && args.amount > 100 && context.tenant ==
'acme'``. For the usual check — arguments a ``dict``, a ``Context``, capabilities a
tuple (:func:`~interlock.policy.extract.plain_roots`), where building the roots cannot
raise — :func:`when_test` makes one function that reads each value straight from the
check's facts (``args.get(key)``, ``context.tenant``) and evaluates the whole tree as
one expression, with the tree's own three values (true, false, unknown):

- every atom keeps its exact rule for when Python and CEL agree (the value's type
  exactly the literal's, ints in int64, finite floats, null equal to no text and no
  bool) and is unknown otherwise;
- ``&&`` is false as soon as a part is false, else unknown if a part is, else true;
  ``||`` the same way round; ``!`` keeps unknown. No part can raise or change
  anything, so this is the tree's value whatever the order;
- unknown runs the CEL program, exactly as the tree's ``None`` does.

Any other check (a mapping that is not a ``dict``, a context of another class)
goes to the tree-walking test it replaces. A ``when:`` reading ``params`` still
refuses a parameter known only as a pattern first. Trees reading ``shell`` (whose
building can fail) are never generated.

The code is generated from the tree's structure and this module's own tables (the
operators, the context and action fields, the method names); keys and literals are
arguments of the factory, never text of the generated source, and one factory is
compiled per distinct source. Property tests
(``tests/policy/test_celgen_equivalence.py``) hold a generated test to the tree it
comes from on random expressions and values.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from interlock.core.action import CONTEXT_TEXTS, Context
from interlock.facts.paths import PathPattern
from interlock.policy import celpartial
from interlock.policy.celpartial import (
    _INT64,
    _NULL,
    _And,
    _Compare,
    _CompareFields,
    _Const,
    _Flag,
    _Has,
    _In,
    _Method,
    _Not,
    _Opaque,
    _Or,
)

if TYPE_CHECKING:
    from interlock.policy.celpartial import Node
    from interlock.policy.extract import Facts

__all__ = ["MAX_NODES", "when_test"]

#: Trees of more nodes than this keep the tree-walking test (a deeply nested
#: expression would cost more to compile than it saves).
MAX_NODES: Final = 48

#: The fields of a ``Context`` as the CEL root ``context`` has them, always present
#: (``Context.as_dict``); ``downstream`` is there only when set.
_CONTEXT_FIELDS: Final = frozenset(CONTEXT_TEXTS)
#: The fields of the CEL root ``action`` read from the facts as they are
#: (``Facts._build_root``); ``capabilities`` is a list there.
_ACTION_FIELDS: Final = frozenset({"kind", "name", "scope", "verb", "target"})
_OPERATORS: Final = {"==": "==", "!=": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}
_METHODS: Final = {"startsWith": "startswith", "endsWith": "endswith"}

Test = Callable[["Facts"], bool]


def when_test(
    node: Node,
    run: Callable[[Any, str], bool],
    rule_id: str,
    general: Test,
    inexact: Callable[[], None] | None,
) -> Test | None:
    """The generated test of ``node`` (the tree of a ``when:``), or None when it is
    not generated (a root other than ``args``, ``params``, ``action``, ``context``, or
    too many nodes). ``run(roots, rule_id)`` runs the CEL program; ``general`` is the
    test for any other check; ``inexact`` (given when the ``when:`` reads
    ``params``) raises the error of a parameter known only as a pattern."""
    if not celpartial.roots_read(node) <= {"args", "params", "action", "context"}:
        return None
    if _size(node) > MAX_NODES:
        return None
    writer = _Writer()
    expression = writer.expression(node)
    lines = ["def make(CONSTANTS, RUN, RULE_ID, GENERAL, INEXACT):"]
    if writer.constants:
        lines.append(f"    {', '.join(writer.constants)}, = CONSTANTS")
    lines.append("    def test(facts):")
    if inexact is not None:
        lines += [
            "        if PATTERN in map(TYPE, facts.params.values()):",
            "            INEXACT()",
        ]
    lines += [
        "        args = facts.args",
        "        context = facts.context",
        "        if type(args) is not dict or type(context) is not CONTEXT or "
        "type(facts.capabilities) is not tuple:",
        "            return GENERAL(facts)",
    ]
    if "params" in writer.roots:
        lines.append("        params = facts.params")
    lines += [
        f"        found = {expression}",
        "        if found is None:",
        "            return RUN(facts.root, RULE_ID)",
        "        return found",
        "    return test",
    ]
    try:
        factory = _factory("\n".join(lines))
    except (SyntaxError, RecursionError, MemoryError):  # nested past the compiler's limits
        return None
    test: Test = factory(tuple(writer.values), run, rule_id, general, inexact)
    return test


def _size(node: Node) -> int:
    if isinstance(node, (_And, _Or)):
        return 1 + sum(_size(part) for part in node.parts)
    if isinstance(node, _Not):
        return 1 + _size(node.part)
    return 1


@functools.lru_cache(maxsize=512)
def _factory(source: str) -> Callable[..., Test]:
    namespace: dict[str, Any] = {
        "__builtins__": {
            "type": type,
            "str": str,
            "int": int,
            "float": float,
            "bool": bool,
            "dict": dict,
            "tuple": tuple,
        },
        "M": _MISSING,
        "CONTEXT": Context,
        "PATTERN": PathPattern,
        "TYPE": type,
        "LIST": list,
        "ISFINITE": math.isfinite,
        "LOW": _INT64[0],
        "HIGH": _INT64[1],
        "A_DICT": {},
        "map": map,
    }
    exec(compile(source, "<interlock when>", "exec"), namespace)
    factory: Callable[..., Test] = namespace["make"]
    return factory


#: A key not in its root (never a value of one).
_MISSING: Final = object()


class _Writer:
    """The expression of a tree, and the constants it names (``K0``, ``L1``...)."""

    def __init__(self) -> None:
        self.constants: list[str] = []
        self.values: list[Any] = []
        self.roots: set[str] = set()
        self._temps = 0

    def constant(self, value: Any) -> str:
        name = f"C{len(self.constants)}"
        self.constants.append(name)
        self.values.append(value)
        return name

    def temp(self) -> str:
        self._temps += 1
        return f"t{self._temps}"

    def value(self, root: str, key: str) -> str:
        """The expression reading ``root.key`` (``M`` when it is not there)."""
        self.roots.add(root)
        if root in ("args", "params"):
            return f"{root}.get({self.constant(key)}, M)"
        if root == "context":
            if key in _CONTEXT_FIELDS:
                return f"context.{key}"  # (the name from this module's own table)
            if key == "downstream":
                # a dict when set: what the atoms read of it is its type alone
                return "(M if context.downstream is None else A_DICT)"
            return "M"
        if key in _ACTION_FIELDS:
            return f"facts.{key}"
        if key == "capabilities":
            return "LIST(facts.capabilities)"
        return "M"

    def expression(self, node: Node) -> str:
        if isinstance(node, _And):
            return self._junction(node.parts, "False")
        if isinstance(node, _Or):
            return self._junction(node.parts, "True")
        if isinstance(node, _Not):
            inner = self.temp()
            return f"(None if ({inner} := {self.expression(node.part)}) is None else not {inner})"
        if isinstance(node, _Const):
            return "True" if node.constant else "False"
        if isinstance(node, _Opaque):
            return "None"
        if isinstance(node, _Has):
            return f"({self.value(node.root, node.key)} is not M)"
        if isinstance(node, _Compare):
            return self._compare(node)
        if isinstance(node, _CompareFields):
            return self._compare_fields(node)
        if isinstance(node, _In):
            return self._membership(node)
        if isinstance(node, _Method):
            return self._method(node)
        if isinstance(node, _Flag):
            v = self.temp()
            return f"({v} if type({v} := {self.value(node.root, node.key)}) is bool else None)"
        raise TypeError(f"no generated test for {type(node).__name__}")

    def _junction(self, parts: tuple[Node, ...], decisive: str) -> str:
        """``&&`` (``decisive`` False) or ``||`` (True): the decisive value as soon as
        a part has it, else unknown if a part is unknown, else the other value."""
        names = [self.temp() for _ in parts]
        other = "True" if decisive == "False" else "False"
        unknown = " or ".join(f"{name} is None" for name in names)
        text = f"(None if {unknown} else {other})"
        for name, part in reversed(list(zip(names, parts, strict=True))):
            text = f"({decisive} if ({name} := {self.expression(part)}) is {decisive} else {text})"
        return text

    def _compare(self, node: _Compare) -> str:
        op, literal = node.op, node.literal
        ordering = op not in ("==", "!=")
        v = self.temp()
        read = self.value(node.root, node.key)
        if literal is _NULL:
            if ordering:
                return "None"
            equal = "True" if op == "==" else "False"
            other = "False" if op == "==" else "True"
            return (
                f"(None if ({v} := {read}) is M else ({equal} if {v} is None else "
                f"({other} if type({v}) is str or type({v}) is bool else None)))"
            )
        kind = type(literal)
        if kind is bool and ordering:
            return "None"  # left to CEL
        kind_name = {str: "str", int: "int", float: "float", bool: "bool"}[kind]
        compared = f"{v} {_OPERATORS[op]} {self.constant(literal)}"
        if kind is int:
            compared = f"(None if not (LOW <= {v} <= HIGH) else {compared})"
        elif kind is float:
            compared = f"(None if not ISFINITE({v}) else {compared})"
        typed = f"(None if type({v}) is not {kind_name} else {compared})"
        if (kind is str or kind is bool) and not ordering:
            differs = "True" if op == "!=" else "False"
            typed = f"({differs} if {v} is None else {typed})"
        return f"(None if ({v} := {read}) is M else {typed})"

    def _compare_fields(self, node: _CompareFields) -> str:
        """Two fields of one type (text, a bool, an int in int64, a finite float):
        equal or not; unknown otherwise, and when either is missing."""
        v, w = self.temp(), self.temp()
        first = self.value(node.root, node.key)
        second = self.value(node.other_root, node.other_key)
        compared = f"{v} == {w}" if node.op == "==" else f"{v} != {w}"
        return (
            f"(None if ({v} := {first}) is M or ({w} := {second}) is M "
            f"or type({v}) is not type({w}) else "
            f"({compared} if type({v}) is str or type({v}) is bool else "
            f"(({compared} if LOW <= {v} <= HIGH and LOW <= {w} <= HIGH else None) "
            f"if type({v}) is int else "
            f"(({compared} if ISFINITE({v}) and ISFINITE({w}) else None) "
            f"if type({v}) is float else None))))"
        )

    def _membership(self, node: _In) -> str:
        literals = node.literals
        v = self.temp()
        read = self.value(node.root, node.key)
        if not literals:
            return f"(None if {read} is M else False)"
        kinds = {type(literal) for literal in literals}
        if len(kinds) != 1:
            return "None"  # no value is comparable with all of them
        kind = kinds.pop()
        kind_name = {str: "str", int: "int", float: "float", bool: "bool"}[kind]
        within = f"{v} in {self.constant(frozenset(literals))}"
        if kind is int:
            within = f"(None if not (LOW <= {v} <= HIGH) else {within})"
        elif kind is float:
            within = f"(None if not ISFINITE({v}) else {within})"
        return f"(None if type({v} := {read}) is not {kind_name} else {within})"

    def _method(self, node: _Method) -> str:
        v = self.temp()
        read = self.value(node.root, node.key)
        literal = self.constant(node.literal)
        if node.method == "contains":
            called = f"({literal} in {v})"
        else:
            called = f"{v}.{_METHODS[node.method]}({literal})"
        return f"(None if type({v} := {read}) is not str else {called})"
