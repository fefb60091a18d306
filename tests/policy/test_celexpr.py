"""The CEL rewrite (flat variables instead of nested maps) changes no result."""

from __future__ import annotations

from typing import Any

import cel
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from interlock.errors import EvaluationError
from interlock.policy import celpartial
from interlock.policy.celexpr import compile_condition, rewrite
from interlock.policy.celpartial import parse


@pytest.mark.parametrize(
    ("source", "flat", "whole"),
    [
        ("args.amount > 100", "__il_f_args_amount > 100", ()),
        ("has(args.amount) && args.amount > 1", "__il_h_args_amount && __il_f_args_amount > 1", ()),
        ("args.meta.owner == 'x'", "__il_f_args_meta.owner == 'x'", ()),
        ("'args.amount' == 'x' && args.a", "'args.amount' == 'x' && __il_f_args_a", ()),
        ("size(args) > 1 && args.a", "size(args) > 1 && args.a", ("args",)),
        ("args['a'] == 1", "args['a'] == 1", ("args",)),
        ("args.?a.orValue(1) == 1", "args.?a.orValue(1) == 1", ("args",)),
        ("params.command.startsWith('git')", "__il_f_params_command.startsWith('git')", ()),
        (
            "context.tenant == 'a' && action.scope == 's'",
            "__il_f_context_tenant == 'a' && __il_f_action_scope == 's'",
            (),
        ),
        ("[1].all(args, args > 0)", "[1].all(args, args > 0)", ("args",)),  # shadowed root
        ("x.args.a", "x.args.a", ()),  # a field called args, not the root
        ('r"args.a" == args.b', 'r"args.a" == __il_f_args_b', ()),
    ],
)
def test_rewrite(source: str, flat: str, whole: tuple[str, ...]) -> None:
    plan = rewrite(source)
    assert plan.source == flat
    assert plan.whole == whole


def _run(program: Any, activation: dict[str, Any]) -> tuple[str, Any]:
    try:
        return ("ok", program.execute(activation))
    except Exception:
        return ("error", None)


EXPRESSIONS = [
    "args.a > 1",
    "has(args.a) && args.a > 1",
    "args.a > 1 && has(args.a)",
    "!has(args.a) || args.a == 'x'",
    "args.a == args.b",
    "args.a > 1 || true",
    "has(args.m) && has(args.m.k) && args.m.k == 1",
    "args.l.exists(x, x == 2)",
    "size(args) > 1 || args.a == 1",
    "params.command.startsWith('rm') || context.tenant == 'acme'",
    "action.scope == 'shell' && has(params.command)",
    "'a' in args && args.a != null",
    # guard-shaped conjuncts, tested in Python before the program runs
    "context.tenant == 'acme' && has(args.a) && args.a > 1",
    "!(context.tenant in ['acme', 'x']) && args.a == 1",
    "args.b != 'x' && args.a > 0",
    "args.a == true && has(args.b)",
    "!has(args.a) && args.b == 'y'",
    "(has(args.a) && args.a > 1) && (context.tenant == 'other')",
    "args.a in ['x', 'y'] && args.b > 0",
    "(args.a == 'x' || args.b == 1) && has(args.l)",
    # the Python pre-evaluation (celpartial): every atom shape, with mixed types
    "args.a > 1 || args.b < -2",
    "args.a >= 1.5 && args.a <= 3.0",
    "args.a != 'x' || !has(args.b)",
    "!args.a == 'x'",  # (!args.a) == 'x': not a negated comparison
    "!args.a",
    "!!has(args.a)",
    "args.a == null || args.b == null",
    "args.a in [1, 2, 3] || args.a in ['x', 'y']",
    "args.a in ['x', 1]",
    "args.a.startsWith('x') || args.a.endsWith('y') || args.a.contains('z')",
    "args.a == true || args.a == false",
    "false && args.a",
    "true || args.a",
    "args.a < 'b'",
    "has(args.a) ? args.a > 1 : false",
    "(args.a > 1 ? true : false) && has(args.b)",
    "// it's a comment\nargs.a > 1",
    "// don't\nsize('args.x') == 6 && has(args.a)",
    "args.a + 1 > 2 && has(args.b)",
    "args.m.k == 1 || has(args.m)",
    "args.a > 9223372036854775807 || args.b == 1",
    # null against text and bools: decided in Python (never equal), on both sides
    "args.a == null",
    "args.a != null",
    "args.a == 'x' || args.b != 'x'",
    "!(args.a == 'x') && args.b == null",
    "args.a != true && args.b != null",
    "args.a == false",
    # two fields compared: decided in Python when both hold one plain type
    "args.a == args.b",
    "args.a != args.b",
    "has(args.a) && has(args.b) && args.a == args.b",
    "args.a != context.tenant",
    "args.a == args.b || args.b == 1",
    "args.a == args.b.k",  # a nested field: left to CEL
]

values = st.one_of(
    st.integers(-5, 5),
    st.text(max_size=3),
    st.booleans(),
    st.none(),
    st.floats(allow_nan=False),
    st.lists(st.integers(0, 3), max_size=3),
    st.dictionaries(st.sampled_from(["k", "j"]), st.integers(0, 2)),
)
mappings = st.dictionaries(st.sampled_from(["a", "b", "l", "m"]), values, max_size=4)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    source=st.sampled_from(EXPRESSIONS),
    args=mappings,
    command=st.one_of(st.none(), st.sampled_from(["rm -rf /", "ls"])),
    tenant=st.sampled_from(["acme", "other"]),
)
def test_the_rewritten_program_agrees_with_the_original(
    source: str, args: dict[str, Any], command: str | None, tenant: str
) -> None:
    params = {} if command is None else {"command": command}
    roots = {
        "args": args,
        "params": params,
        "context": {"tenant": tenant},
        "action": {"scope": "shell"},
    }
    original = _run(cel.compile(source), roots)
    condition = compile_condition(source)
    try:
        result: tuple[str, Any] = ("ok", condition.evaluate(roots.__getitem__, "r"))
    except EvaluationError:
        result = ("error", None)
    if original[0] == "ok" and not isinstance(original[1], bool):
        original = ("error", None)  # a non-boolean result is an evaluation error to the engine
    assert result == original


@pytest.mark.parametrize(
    ("source", "decidable"),
    [
        ("(context.tenant == 'g') && (has(args.amount) && args.amount > 300)", True),
        ("!(context.tenant in ['a', 'b']) && args.x > 1", True),
        ("args.a.size() > 2", False),
        ("args.a == 'x\\'y'", False),  # an escaped literal is left to CEL
        ("[1].all(args, args > 0) && has(context.agent)", False),  # a shadowed root
        ("has(args.a) ? true : false", False),
        ("args.a == args.b", True),
        ("args.a != context.tenant", True),
        ("args.a == args.b.k", False),  # a nested field
        ("args.a < args.b", False),  # only equality of two fields
    ],
)
def test_only_exact_shapes_are_decided_in_python(source: str, decidable: bool) -> None:
    assert (parse(source) is not None) is decidable


_MISSING = object()
GRID = [
    _MISSING,
    None,
    True,
    False,
    0,
    1,
    2,
    -2,
    -3,
    1.5,
    2.0,
    3.0,
    float("nan"),
    "x",
    "y",
    "xz",
    "b",
    "",
    2**63,
    [2],
    {"k": 1},
]


@pytest.mark.parametrize("source", EXPRESSIONS)
def test_the_condition_agrees_with_cel_on_a_grid_of_values(source: str) -> None:
    """Exhaustive over boundary values for `a` and `b`: catches an off-by-one that
    random search can miss."""
    program = cel.compile(source)
    condition = compile_condition(source)
    for a in GRID:
        for b in (_MISSING, 1, "x", None, -2):
            args = {k: v for k, v in (("a", a), ("b", b)) if v is not _MISSING}
            roots = {
                "args": args,
                "params": {},
                "context": {"tenant": "acme"},
                "action": {"scope": "shell"},
            }
            expected = _run(program, roots)
            if expected[0] == "ok" and not isinstance(expected[1], bool):
                expected = ("error", None)
            try:
                got: tuple[str, Any] = ("ok", condition.evaluate(roots.__getitem__, "r"))
            except EvaluationError:
                got = ("error", None)
            assert got == expected, (source, args)


def test_errors_name_the_original_field() -> None:
    condition = compile_condition("args.amount > 1")
    with pytest.raises(EvaluationError, match=r"args\.amount"):
        condition.evaluate({"args": {}}.__getitem__, "r")


def test_a_parse_error_points_at_the_users_text() -> None:
    with pytest.raises(ValueError, match=r"args\.amount >"):
        compile_condition("args.amount >")


def test_two_fields_of_different_types_compared_in_python_are_seen(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The grid above holds the two-field comparison to CEL: comparing mixed types in
    Python (``1 == True``, ``1 == 1.0``) would disagree with it."""
    source = "args.a == args.b"
    program, condition = cel.compile(source), compile_condition(source)

    def disagreements() -> int:
        found = 0
        for a in (1, True, 1.0, "1"):
            for b in (1, True, 1.0, "1"):
                roots = {"args": {"a": a, "b": b}, "params": {}, "context": {}, "action": {}}
                expected = _run(program, roots)
                try:
                    got: tuple[str, Any] = ("ok", condition.evaluate(roots.__getitem__, "r"))
                except EvaluationError:
                    got = ("error", None)
                found += got != expected
        return found

    assert disagreements() == 0
    monkeypatch.setattr(celpartial, "_comparable", lambda value, literal: True)
    assert disagreements() > 0
