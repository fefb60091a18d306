"""Deciding simple CEL conditions in Python, exactly, before the program runs.

Feeding the CEL binding costs about 1 µs per string variable, while testing
``context.tenant == 'acme'`` in Python costs about 0.1 µs. At load a ``when:``
expression is parsed into a tree of ``&&``, ``||`` and ``!`` over *atoms* Interlock
can judge itself:

- ``has(root.key)``;
- ``root.key == lit`` / ``!=`` / ``<`` / ``<=`` / ``>`` / ``>=`` and ``root.key in [lits]``
  with a plain string, an int, a float or a bool literal (``== null`` too);
- ``root.key == other.key`` / ``!=``: two fields, decided when both hold values of
  one type — text, bools, ints in int64 or finite floats — and left to CEL otherwise
  (mixed types, null, lists and maps);
- ``root.key.startsWith(lit)`` / ``endsWith`` / ``contains`` with a plain string;
- a bare ``root.key`` holding a bool, and ``true`` / ``false``.

Anything else is an *opaque* sub-expression. Each check evaluates the tree with
three values — true, false, unknown — where an atom is unknown unless the value has
exactly the literal's type (no int/float mixing, int64 range, finite floats): that is
where Python and CEL are sure to agree. CEL's ``&&`` and ``||`` are commutative and
absorb errors (``false && error`` is false, ``true || error`` is true), so a definite
result of the tree is exactly what the program would return. Only when the tree is
unknown does the program run.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from interlock.policy.celtokens import ROOTS, Token, roots_shadowed, tokens

__all__ = ["Node", "context_gates", "parse", "required_keys", "roots_read"]

RootGetter = Callable[[str], Mapping[str, Any]]

_INT64: Final = (-(2**63), 2**63 - 1)
_PLAIN_STRING: Final = re.compile(r"""^(?:'[^'\\\n]*'|"[^"\\\n]*")$""")
_INT: Final = re.compile(r"^\d+$")
_FLOAT: Final = re.compile(r"^(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?$")
_NULL: Final = object()
# The operator module's functions are the plain comparisons, without a Python frame.
_COMPARE: Final[dict[str, Callable[[Any, Any], Any]]] = {
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
_METHODS: Final = {
    "startsWith": str.startswith,
    "endsWith": str.endswith,
    "contains": str.__contains__,
}


Value = Callable[[RootGetter], bool | None]


class Node:
    """A parsed sub-expression. ``value(roots)`` is True, False or None (unknown).

    ``value`` is a closure each node builds once, when it is made, rather than a
    method: it reads its operands from cells instead of attributes, and it runs for
    most ``when:`` on every check.
    """

    __slots__ = ()
    value: Value


def _set_value(node: Node, value: Value) -> None:
    object.__setattr__(node, "value", value)


@dataclass(frozen=True, slots=True)
class _Opaque(Node):
    value: Value = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _set_value(self, lambda roots: None)


_OPAQUE: Final = _Opaque()


@dataclass(frozen=True, slots=True)
class _And(Node):
    parts: tuple[Node, ...]
    value: Value = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        values = tuple(part.value for part in self.parts)

        def all_of(roots: RootGetter) -> bool | None:
            result: bool | None = True
            for part_value in values:
                value = part_value(roots)
                if value is False:
                    return False
                if value is None:
                    result = None
            return result

        _set_value(self, all_of)


@dataclass(frozen=True, slots=True)
class _Or(Node):
    parts: tuple[Node, ...]
    value: Value = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        values = tuple(part.value for part in self.parts)

        def any_of(roots: RootGetter) -> bool | None:
            result: bool | None = False
            for part_value in values:
                value = part_value(roots)
                if value is True:
                    return True
                if value is None:
                    result = None
            return result

        _set_value(self, any_of)


@dataclass(frozen=True, slots=True)
class _Not(Node):
    part: Node
    value: Value = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        part_value = self.part.value

        def negation(roots: RootGetter) -> bool | None:
            value = part_value(roots)
            return None if value is None else not value

        _set_value(self, negation)


@dataclass(frozen=True, slots=True)
class _Const(Node):
    constant: bool
    value: Value = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        constant = self.constant
        _set_value(self, lambda roots: constant)


@dataclass(frozen=True, slots=True)
class _Has(Node):
    root: str
    key: str
    value: Value = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        root, key = self.root, self.key
        _set_value(self, lambda roots: key in roots(root))


def _comparable(value: Any, literal: Any) -> bool:
    """Whether Python and CEL certainly agree on comparing these two."""
    kind = type(literal)
    if type(value) is not kind:
        return False
    if kind is int:
        return bool(_INT64[0] <= value <= _INT64[1])
    if kind is float:
        return math.isfinite(value)
    return True


@dataclass(frozen=True, slots=True)
class _Compare(Node):
    root: str
    key: str
    op: str
    literal: Any  # str, int, float, bool or _NULL
    value: Value = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        root, key, op, literal = self.root, self.key, self.op, self.literal
        compare = _COMPARE[op]
        ordering = op not in ("==", "!=")
        if literal is _NULL:
            equal = op == "=="

            def null_test(roots: RootGetter) -> bool | None:
                mapping = roots(root)
                if key not in mapping:
                    return None  # CEL fails here
                if ordering:
                    return None
                value = mapping[key]
                if value is None:
                    return equal
                if type(value) is str or type(value) is bool:
                    return not equal  # text or a bool is never null (CEL agrees)
                return None

            _set_value(self, null_test)
            return
        kind = type(literal)
        checked = kind is int or kind is float  # a range or finiteness to check
        undecided = kind is bool and ordering  # `<` and the like: left to CEL
        # null is equal to no text and no bool (CEL agrees): `context.agent_type ==
        # "release"` is false, not unknown, when it is unset
        null_differs = (kind is str or kind is bool) and not ordering
        differs = op == "!="

        def comparison(roots: RootGetter) -> bool | None:
            mapping = roots(root)
            if key not in mapping:
                return None  # CEL fails here
            value = mapping[key]
            if value is None and null_differs:
                return differs
            if type(value) is not kind or undecided:
                return None
            if checked and not _comparable(value, literal):
                return None
            result: bool = compare(value, literal)
            return result

        _set_value(self, comparison)


@dataclass(frozen=True, slots=True)
class _CompareFields(Node):
    root: str
    key: str
    op: str  # "==" or "!="
    other_root: str
    other_key: str
    value: Value = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        root, key, other_root, other_key = self.root, self.key, self.other_root, self.other_key
        equal = self.op == "=="

        def fields_compared(roots: RootGetter) -> bool | None:
            mapping, other = roots(root), roots(other_root)
            if key not in mapping or other_key not in other:
                return None  # CEL fails here
            value, other_value = mapping[key], other[other_key]
            if type(value) not in _SAME_TYPE_KINDS or not _comparable(other_value, value):
                return None
            if not _comparable(value, value):
                return None  # (an int outside int64, a float that is not finite)
            return (value == other_value) is equal

        _set_value(self, fields_compared)


#: The types two fields compared in Python may hold (both the same one).
_SAME_TYPE_KINDS: Final = frozenset({str, bool, int, float})


@dataclass(frozen=True, slots=True)
class _In(Node):
    root: str
    key: str
    literals: tuple[Any, ...]
    value: Value = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        root, key, literals = self.root, self.key, self.literals
        kinds = {type(literal) for literal in literals}
        # One type of literal, or none is comparable with all of them.
        kind = kinds.pop() if len(kinds) == 1 else None

        def membership(roots: RootGetter) -> bool | None:
            mapping = roots(root)
            if key not in mapping:
                return None
            value = mapping[key]
            if not literals:
                return False  # `x in []`: nothing to compare with
            if kind is None or not _comparable(value, literals[0]):
                return None
            return value in literals

        _set_value(self, membership)


@dataclass(frozen=True, slots=True)
class _Method(Node):
    root: str
    key: str
    method: str
    literal: str
    value: Value = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        root, key, literal = self.root, self.key, self.literal
        method = _METHODS[self.method]

        def call(roots: RootGetter) -> bool | None:
            mapping = roots(root)
            if key not in mapping:
                return None
            value = mapping[key]
            if type(value) is not str:
                return None
            result: bool = method(value, literal)
            return result

        _set_value(self, call)


@dataclass(frozen=True, slots=True)
class _Flag(Node):
    root: str
    key: str
    value: Value = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        root, key = self.root, self.key

        def flag(roots: RootGetter) -> bool | None:
            mapping = roots(root)
            if key not in mapping:
                return None
            value = mapping[key]
            return value if type(value) is bool else None

        _set_value(self, flag)


def parse(source: str) -> Node | None:
    """The tree of ``source``, or None when nothing in it can be decided in Python."""
    if roots_shadowed(source):
        return None
    try:
        node = _expression(tokens(source))
    except (IndexError, ValueError):
        return None
    return None if isinstance(node, _Opaque) else node


_OPEN: Final = frozenset("([{")
_CLOSE: Final = frozenset(")]}")


def _split(found: list[Token], operator: str) -> list[list[Token]] | None:
    """Split at a two-character operator (``&&``, ``||``) outside brackets; None if a
    ``?`` (ternary) sits at this level."""
    parts: list[list[Token]] = []
    depth, start, i = 0, 0, 0
    while i < len(found):
        token = found[i]
        if token.kind == "punct":
            if token.text in _OPEN:
                depth += 1
            elif token.text in _CLOSE:
                depth -= 1
            elif depth == 0 and token.text == "?":
                return None
            elif (
                depth == 0
                and token.text == operator
                and i + 1 < len(found)
                and found[i + 1].text == operator
                and found[i + 1].start == token.end
            ):
                parts.append(found[start:i])
                start = i = i + 2
                continue
        i += 1
    parts.append(found[start:])
    return parts


def _closing(found: list[Token], start: int) -> int:
    depth = 0
    for i in range(start, len(found)):
        token = found[i]
        if token.kind != "punct":
            continue
        if token.text in _OPEN:
            depth += 1
        elif token.text in _CLOSE:
            depth -= 1
            if depth == 0:
                return i
    return -1


def _expression(found: list[Token]) -> Node:
    if not found:
        return _OPAQUE
    parts = _split(found, "|")
    if parts is None:
        return _OPAQUE
    if len(parts) > 1:
        return _combine(_Or, [_conjunction(part) for part in parts])
    return _conjunction(found)


def _conjunction(found: list[Token]) -> Node:
    parts = _split(found, "&")
    if parts is None:
        return _OPAQUE
    if len(parts) > 1:
        return _combine(_And, [_unary(part) for part in parts])
    return _unary(found)


def _combine(kind: type[_And] | type[_Or], parts: list[Node]) -> Node:
    if all(isinstance(part, _Opaque) for part in parts):
        return _OPAQUE
    # ``(a && b) && c`` as ``a && b && c``: the same parts in the same order, so the
    # same value and the same first part to decide it (three-valued ``&&`` and ``||``
    # are associative), with one call fewer at every check.
    flat: list[Node] = []
    for part in parts:
        flat.extend(part.parts if isinstance(part, kind) else (part,))
    return kind(tuple(flat))


def _unary(found: list[Token]) -> Node:
    if not found:
        return _OPAQUE
    first = found[0]
    if first.kind == "punct" and first.text == "(" and _closing(found, 0) == len(found) - 1:
        return _expression(found[1:-1])
    if first.kind == "punct" and first.text == "!":
        rest = found[1:]
        # `!` binds tighter than comparisons: only `!(...)`, `!has(...)`, `!!x`, or a
        # bare flag can be negated as a whole.
        if rest and (rest[0].text in ("(", "!") or _is_has(rest) or _is_flag(rest)):
            operand = _unary(rest)
            return _OPAQUE if isinstance(operand, _Opaque) else _Not(operand)
        return _OPAQUE
    return _atom(found)


def _is_has(found: list[Token]) -> bool:
    texts = [t.text for t in found]
    return (
        len(found) == 6
        and texts[:2] == ["has", "("]
        and texts[2] in ROOTS
        and texts[3] == "."
        and found[4].kind == "ident"
        and texts[5] == ")"
    )


def _is_flag(found: list[Token]) -> bool:
    return (
        len(found) == 3
        and found[0].text in ROOTS
        and found[1].text == "."
        and found[2].kind == "ident"
    )


def _literal(found: list[Token]) -> Any:
    """A literal from one or two tokens, or raise ValueError."""
    negative = False
    if len(found) == 2 and found[0].text == "-" and found[1].kind == "number":
        negative, found = True, found[1:]
    if len(found) != 1:
        raise ValueError("not a literal")
    token = found[0]
    if token.kind == "ident" and token.text in ("true", "false") and not negative:
        return token.text == "true"
    if token.kind == "ident" and token.text == "null" and not negative:
        return _NULL
    if token.kind == "string" and _PLAIN_STRING.match(token.text) and not negative:
        return token.text[1:-1]
    if token.kind == "number" and _INT.match(token.text):
        return -int(token.text) if negative else int(token.text)
    if token.kind == "number" and _FLOAT.match(token.text):
        return -float(token.text) if negative else float(token.text)
    raise ValueError("not a literal")


def _atom(found: list[Token]) -> Node:
    texts = [t.text for t in found]
    if len(found) == 1 and found[0].kind == "ident" and texts[0] in ("true", "false"):
        return _Const(texts[0] == "true")
    if _is_has(found):
        return _Has(texts[2], texts[4])
    if len(found) < 3 or texts[0] not in ROOTS or texts[1] != "." or found[2].kind != "ident":
        return _OPAQUE
    root, key, rest = texts[0], texts[2], found[3:]
    if not rest:
        return _Flag(root, key)
    try:
        return _relation(root, key, rest)
    except ValueError:
        return _OPAQUE


def _relation(root: str, key: str, rest: list[Token]) -> Node:
    first = rest[0].text
    second = rest[1].text if len(rest) > 1 and rest[1].start == rest[0].end else ""
    if first in "=!<>" and rest[0].kind == "punct":
        op = first + "=" if second == "=" else first
        if op not in _COMPARE:
            raise ValueError("not a comparison")
        operand = rest[len(op) :]
        if op in ("==", "!=") and _is_flag(operand):
            return _CompareFields(root, key, op, operand[0].text, operand[2].text)
        literal = _literal(operand)
        return _Compare(root, key, op, literal)
    if first == "in" and len(rest) >= 3 and rest[1].text == "[" and rest[-1].text == "]":
        literals = []
        items = rest[2:-1]
        chunk: list[Token] = []
        for token in [*items, None]:
            if token is None or token.text == ",":
                literal = _literal(chunk)
                if literal is _NULL:
                    raise ValueError("null in a list")
                literals.append(literal)
                chunk = []
            else:
                chunk.append(token)
        return _In(root, key, tuple(literals))
    if (
        first == "."
        and len(rest) == 5
        and rest[1].text in _METHODS
        and rest[2].text == "("
        and rest[4].text == ")"
    ):
        literal = _literal(rest[3:4])
        if not isinstance(literal, str):
            raise ValueError("not a string")
        return _Method(root, key, rest[1].text, literal)
    raise ValueError("not an atom")


_ATOMS: Final = (_Has, _Compare, _In, _Method, _Flag)


def roots_read(node: Node) -> frozenset[str]:
    """The root variables the tree reads (an opaque part reads none: it is unknown)."""
    if isinstance(node, _CompareFields):
        return frozenset((node.root, node.other_root))
    if isinstance(node, _ATOMS):
        return frozenset((node.root,))
    if isinstance(node, (_And, _Or)):
        return frozenset().union(*(roots_read(part) for part in node.parts))
    if isinstance(node, _Not):
        return roots_read(node.part)
    return frozenset()


#: The context fields a gate may read: what a check's candidate rules are narrowed by.
GATE_FIELDS: Final = frozenset({"tenant", "agent"})


def context_gates(node: Node) -> tuple[Node, ...]:
    """The conjuncts of the tree (``node`` itself when it is no ``&&``) that read
    nothing but ``context.tenant`` and ``context.agent``: when one is false for a
    check's tenant and agent, so is the whole tree."""
    parts = node.parts if isinstance(node, _And) else (node,)
    return tuple(part for part in parts if _reads_only_gate_fields(part))


def _reads_only_gate_fields(node: Node) -> bool:
    if isinstance(node, _CompareFields):
        return (
            node.root == "context"
            and node.key in GATE_FIELDS
            and node.other_root == "context"
            and node.other_key in GATE_FIELDS
        )
    if isinstance(node, _ATOMS):
        return node.root == "context" and node.key in GATE_FIELDS
    if isinstance(node, (_And, _Or)):
        return all(_reads_only_gate_fields(part) for part in node.parts)
    if isinstance(node, _Not):
        return _reads_only_gate_fields(node.part)
    return False  # a constant or an opaque part: nothing to narrow by


def required_keys(node: Node, root: str) -> tuple[str, ...]:
    """The keys of ``root`` whose presence a top-level conjunct of the tree tests
    (``has(args.body) && ...``): when one is missing that conjunct is false, and so is
    the whole tree — provided nothing before it raises (the caller's to make sure)."""
    parts = node.parts if isinstance(node, _And) else (node,)
    return tuple(
        dict.fromkeys(part.key for part in parts if isinstance(part, _Has) and part.root == root)
    )
