"""The YAML source: its data, the line of every value and the errors found while reading
it — the same whichever way the lines are found (ADR 0014: walked from the nodes)."""

from __future__ import annotations

import re

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from interlock import PolicyError, load_policy_text
from interlock.policy import source
from interlock.policy.celtokens import tokens

NESTED = """\
version: 1
rules:
  - id: a
    decision: deny
    reason: x
    params:
      command: {glob: 'rm *'}
      path: &p
        glob: ['/etc/*', '/root/*']
  - {id: b, decision: allow, reason: z, params: {path: *p}}
scopes:
  tools: {t1: a, t2: b, t3: c, t4: d, t5: e, t6: f, t7: g, t8: h, t9: i, 10: j, 1.5: k}
"""


def _full_map(node: yaml.Node, path: source.Path, found: dict[source.Path, int]) -> None:
    """Every value's line by its path, as the loader kept them before (a map built
    while the data was)."""
    found[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = yaml.safe_load(yaml.serialize(key_node))
            _full_map(value_node, (*path, str(key)), found)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _full_map(item, (*path, index), found)


def test_every_line_is_the_line_of_its_value() -> None:
    document = source.parse_yaml(NESTED)
    expected: dict[source.Path, int] = {}
    _full_map(yaml.compose(NESTED, Loader=yaml.SafeLoader), (), expected)
    assert document.lines == expected
    for path, line in expected.items():
        assert document.line_of(path) == line, path
        # a path beyond what the source has: the line of its deepest known prefix
        assert document.line_of((*path, "absent", 3)) == line, path
    assert document.line_of(("scopes", "tools", "10")) == 12  # a number key, an indexed map
    assert document.line_of(("rules", 1, "params", "path", "glob", 1)) == 9  # via the alias
    assert document.line_of(("rules", 7)) == 3  # no 8th rule: the line of the list
    assert document.line_of(("rules", "0")) == 3  # a text index into a list is not one


@pytest.mark.parametrize(
    ("text", "line", "field"),
    [
        ("version: 1\nversion: 1\n", 2, "version"),
        (
            "version: 1\nrules:\n  - id: a\n    params:\n      command: x\n      command: y\n",
            6,
            "rules.0.params.command",
        ),
        ("a:\n  - [1, 2]\n  - {x: 1, y: 2, x: 3}\n", 3, "a.1.x"),
        ("a: {1: x, '1': y}\n", 1, "a.1"),
    ],
)
def test_a_duplicate_key_names_its_line_and_path(text: str, line: int, field: str) -> None:
    with pytest.raises(PolicyError) as info:
        source.parse_yaml(text, file="p.yaml")
    assert info.value.line == line
    assert info.value.field == field
    assert f"duplicate key {field.rsplit('.', 1)[-1]!r}" in str(info.value)


@pytest.mark.parametrize("key", ["true", "~", "2001-12-14", "[a, b]", "{a: 1}"])
def test_a_key_that_is_not_text_or_a_number_is_refused(key: str) -> None:
    with pytest.raises(PolicyError, match="mapping keys must be strings") as info:
        source.parse_yaml(f"version: 1\nrules:\n  - {{{key}: x}}\n", file="p.yaml")
    assert info.value.line == 3


def test_each_rule_with_the_same_bad_regex_is_reported_with_its_own_line() -> None:
    rule = (
        "  - id: r{n}\n    decision: deny\n    reason: x\n"
        "    params: {{command: {{regex: '(a)\\1'}}}}\n"
    )
    text = "version: 1\nrules:\n" + "".join(rule.format(n=n) for n in range(3))
    for _ in range(2):  # the second load meets the compiled patterns cached by the first
        with pytest.raises(PolicyError) as info:
            load_policy_text(text)
        assert [(i.rule_id, i.line) for i in info.value.issues] == [
            ("r0", 6),
            ("r1", 10),
            ("r2", 14),
        ]


def test_cel_tokens_are_a_new_list_each_time() -> None:
    first = tokens("has(args.x) && args.x > 1")
    first.clear()
    assert [t.text for t in tokens("has(args.x) && args.x > 1")][:3] == ["has", "(", "args"]


def _reference_tokens(source: str) -> list[tuple[str, str, int, int]]:
    """The scanner as it was before its regexes were joined into one (ADR 0014): each
    kind tried in turn at each position."""
    space, comment = re.compile(r"\s+"), re.compile(r"//[^\n]*")
    string = re.compile(r"(?i:[rb]{0,2})('''|\"\"\"|'|\")")
    ident = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
    number = re.compile(r"0[xX][0-9a-fA-F]+[uU]?|(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?[uU]?")
    found: list[tuple[str, str, int, int]] = []
    i = 0
    while i < len(source):
        skip = space.match(source, i) or comment.match(source, i)
        if skip:
            i = skip.end()
            continue
        opening = string.match(source, i)
        if opening:
            quote, j = opening.group(1), opening.end()
            raw = "r" in opening.group(0)[: opening.start(1) - opening.start()].lower()
            while j < len(source) and not source.startswith(quote, j):
                j += 2 if not raw and source[j] == "\\" else 1
            end = min(j + len(quote), len(source)) if j < len(source) else len(source)
            found.append(("string", source[i:end], i, end))
            i = end
            continue
        for kind, pattern in (("ident", ident), ("number", number)):
            token = pattern.match(source, i)
            if token:
                found.append((kind, token.group(), i, token.end()))
                i = token.end()
                break
        else:
            found.append(("punct", source[i], i, i + 1))
            i += 1
    return found


_CEL_PIECES = [
    *"abrRBxz_019.eE+-uUX \t\n/\\'\"()[]{}<>=!&|?:,é٣ſ",
    "'''",
    '"""',
    'r"',
    "b'",
    "Rb'",
    "//",
    "args",
    "has(",
    "0x1F",
    "1e5",
    ".5",
]


@given(st.lists(st.sampled_from(_CEL_PIECES), max_size=30).map("".join))
@settings(max_examples=2000, deadline=None)
def test_cel_tokens_are_those_of_the_scanner_that_tried_each_kind_in_turn(text: str) -> None:
    assert [(t.kind, t.text, t.start, t.end) for t in tokens(text)] == _reference_tokens(text)
