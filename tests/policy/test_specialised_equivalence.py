"""The specialised paths of a check decide exactly what the reference path decides.

ADR 0016: a check is judged through code made once per shape — extraction planned per
shape of call (``policy/shapes.py``), condition tests generated per kind of test
(``policy/conditiontests.py``), ``has(args.x)`` conjuncts tested before any CEL root
and used as prefilter discriminators, and a generated decision function per set of
candidate tiers (``policy/specialise.py``). ``fastpath.SPECIALISED`` off is the
reference: the full extraction, every condition by its general test, every tier by
``outcomes.judge``. The properties here judge random policies (1-60 rules: under
and over the prefilter's threshold, under and over the generated functions' size
limit) and random calls both ways, and require the same verdict, rule ids, reason,
cause, shadow verdict and approval link — and, below the verdict, the same facts from
a planned shape as from the full extraction, and the same answer (or error) from a
generated condition test as from the general one.

The last section breaks each specialisation on purpose and shows that these
comparisons see it.

``INTERLOCK_PROPERTY_EXAMPLES`` scales the example counts.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from interlock import Action, Context, Decision, Verdict
from interlock.core.action import Downstream
from interlock.errors import PolicyError
from interlock.policy import (
    celgen,
    celpartial,
    compile_policy,
    conditiontests,
    evaluate,
    fastpath,
    shapes,
)
from interlock.policy import compiled as compiled_module
from interlock.policy import specialise as specialise_module
from interlock.policy.engine import _extracted, facts_for
from interlock.policy.extract import Facts

EXAMPLES = int(os.environ.get("INTERLOCK_PROPERTY_EXAMPLES", "60"))

SETTINGS = settings(
    deadline=None,
    max_examples=EXAMPLES,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# -- the two sides -------------------------------------------------------------------------


@contextmanager
def reference() -> Iterator[None]:
    """Within the block, policies compiled and judged take the reference path: no
    specialisation, no prefilter, no narrowing by tenant and agent — every candidate
    rule tested in full, one by one."""
    patch = pytest.MonkeyPatch()
    try:
        patch.setattr(fastpath, "SPECIALISED", False)
        patch.setattr(compiled_module, "PREFILTER_MIN_RULES", 10**9)
        patch.setattr(compiled_module, "NARROW_BY_CONTEXT", False)
        yield
    finally:
        patch.undo()


@contextmanager
def prefiltered() -> Iterator[None]:
    """Within the block, every candidate set is prefiltered (the specialised side with
    the prefilter's dispatch on small sets too)."""
    patch = pytest.MonkeyPatch()
    try:
        patch.setattr(compiled_module, "PREFILTER_MIN_RULES", 1)
        yield
    finally:
        patch.undo()


def essence(decision: Decision) -> tuple[Any, ...]:
    """Everything a decision says but its id (and the cause as text)."""
    shadow, cause = decision.shadow, decision.cause
    return (
        decision.verdict,
        decision.rule_ids,
        decision.reason,
        None
        if cause is None
        else (type(cause).__name__, str(cause), getattr(cause, "rule_id", None)),
        None if shadow is None else (shadow.verdict, shadow.rule_ids, shadow.reason),
        None if decision.approval is None else (decision.approval.id, decision.approval.url),
        decision.fail_open,
    )


def _judged(data: dict[str, Any], calls: list[Action]) -> list[tuple[Any, ...]] | str:
    try:
        policy = compile_policy(data)
    except PolicyError as exc:
        return str(exc)
    # each call twice: the first plans its shape and builds its tiers' function, the
    # second uses them
    return [essence(evaluate(call, policy)) for call in calls for _ in (0, 1)]


def judge_all_ways(data: dict[str, Any], calls: list[Action]) -> list[tuple[Any, ...]] | str:
    """The calls judged by the reference, by the specialised paths, and by the
    specialised paths with every candidate set prefiltered: the same decisions (what
    the reference decides, returned)."""
    with reference():
        expected = _judged(data, calls)
    got = _judged(data, calls)
    with prefiltered():
        got_prefiltered = _judged(data, calls)
    assert got == expected
    assert got_prefiltered == expected
    return expected


# -- policies ------------------------------------------------------------------------------

WORDS = ("alpha", "Alpha", "al", "beta", "", "a/b", "é", "42", "x\ny")
_WORD = st.sampled_from(WORDS)
_NUMBER = st.sampled_from([-1, 0, 1, 10, 41.5, 42, 1e9])
_LITERAL = st.one_of(_WORD, st.sampled_from([0, 1, 42, 2.5, True, False, None]))

#: One test of a condition, as the policy file spells it.
_TESTS: dict[str, st.SearchStrategy[Any]] = {
    "glob": st.sampled_from(["al*", "*a", "alpha", "a?b", "[ab]*", "*"]),
    "not_glob": st.sampled_from(["al*", "beta", "*/*"]),
    "regex": st.sampled_from(["^al", "a$", "(?i)ALPHA", r"\d+", "^$", "b.t"]),
    "not_regex": st.sampled_from(["^al", r"\n"]),
    "eq": _LITERAL,
    "ne": _LITERAL,
    "in": st.lists(_LITERAL, min_size=0, max_size=3),
    "not_in": st.lists(_LITERAL, min_size=0, max_size=3),
    "gt": _NUMBER,
    "gte": _NUMBER,
    "lt": _NUMBER,
    "lte": _NUMBER,
    "exists": st.booleans(),
}

#: Kinds of condition, each as the generated test reads it (one kind of test), and
#: mixed ones (judged in general).
_KINDS = (
    ["glob"],
    ["regex"],
    ["not_glob"],
    ["not_regex"],
    ["eq"],
    ["ne"],
    ["in"],
    ["not_in"],
    ["gt"],
    ["lte"],
    ["gte", "lt"],
    ["gt", "gte", "lt", "lte"],
    ["exists"],
    ["in", "gt"],
    ["glob", "ne"],
    ["regex", "not_in"],
)


@st.composite
def conditions(draw: st.DrawFn) -> Any:
    names = draw(st.sampled_from(_KINDS))
    if names == ["glob"] and draw(st.booleans()):
        return draw(_TESTS["glob"])  # a bare string: one glob
    if names == ["eq"] and draw(st.booleans()):
        return draw(st.sampled_from([0, 1, 42, True, False]))  # equality
    return {name: draw(_TESTS[name]) for name in names}


KEYS = ("args.q", "args.q", "args.n", "args.mode", "args.meta.level", "args.items.0")
PARAMS = ("path", "domain", "url", "site", "verb", "session_id", "est_cost", "target")

WHENS = (
    "has(args.q) && args.q.startsWith('al')",
    "has(args.q) && args.q == 'alpha'",
    "has(args.n) && args.n > 10",
    "(has(args.q) && has(args.mode)) && args.mode != 'beta'",
    "has(args.mode) && context.tenant == 'acme'",
    "context.tenant == 'acme' && has(args.q)",
    "action.name == 'search' && has(args.q)",
    "has(args.q) && params.path.startsWith('/tmp')",  # reads params
    "has(args.q) && shell.complete",  # a root whose building can fail
    "shell.complete && has(args.q)",
    "has(args.q) && size(args) > 1",  # a part only CEL can judge
    "has(args.q) || has(args.n)",
    "!has(args.q)",
    "!has(args.q) && has(args.n)",
    "has(args.q) && args.q",  # not a boolean when q is
    "args.q.startsWith('al')",  # errors when q is missing or not text
    "args.n > 10",
    "context.agent == 'bot'",
)


@st.composite
def rule_bodies(draw: st.DrawFn) -> dict[str, Any]:
    body: dict[str, Any] = {
        "decision": draw(st.sampled_from(["allow", "allow", "deny", "require_approval"]))
    }
    keys = draw(st.lists(st.sampled_from(KEYS + PARAMS), min_size=0, max_size=2, unique=True))
    if keys:
        body["params"] = {key: draw(conditions()) for key in keys}
    extra = draw(st.integers(0, 9))
    if extra <= 3:
        body["when"] = draw(st.sampled_from(WHENS))
    elif extra == 4:
        body["tenant"] = draw(st.sampled_from(["acme", "ac*"]))
    elif extra == 5:
        body["agent"] = draw(st.sampled_from(["bot", "b*"]))
    elif extra == 6:
        body["mode"] = "shadow"
    if draw(st.integers(0, 2)) == 0:
        body["name"] = draw(st.sampled_from([*TOOLS, "se*", ["search", "fetch"]]))
    if draw(st.integers(0, 7)) == 0:
        body["scope"] = draw(st.sampled_from(["data", "network", "filesystem", "shell"]))
    return body


@st.composite
def policies(draw: st.DrawFn) -> dict[str, Any]:
    """A policy of 1-60 rules, drawn from a small stock and repeated under new ids, so
    that tiers hold rules that match, fail and cannot be judged together."""
    stock = draw(st.lists(rule_bodies(), min_size=1, max_size=24))
    count = draw(st.sampled_from([1, 2, 3, 5, 8, 12, 20, 30, 45, 60]))
    picks = draw(st.lists(st.integers(0, len(stock) - 1), min_size=count, max_size=count))
    data: dict[str, Any] = {
        "version": 1,
        "default": draw(st.sampled_from(["allow", "deny", "require_approval"])),
        "rules": [
            {"id": f"r{i:03d}", "reason": f"because r{i:03d}", **stock[pick]}
            for i, pick in enumerate(picks)
        ],
    }
    if draw(st.integers(0, 11)) == 0:
        data["mode"] = "shadow"
    if draw(st.booleans()):
        data["scopes"] = {"tools": {"search": "data", "se*": "data"}}
    if draw(st.booleans()):
        data["approvals"] = {"url": "https://approve.example/{id}"}
    return data


# -- calls ------------------------------------------------------------------------------------

TOOLS = ("search", "send_email", "read_file", "shell", "fetch_url")

_VALUES = st.one_of(
    _WORD,
    _WORD,
    st.integers(-2, 50),
    st.sampled_from([42, 1.5, math.nan, math.inf, True, None, 10**400]),
    st.lists(_WORD, max_size=2),
    st.fixed_dictionaries({"level": _WORD}),
)

ARGUMENTS = st.fixed_dictionaries(
    {},
    optional={
        "q": _VALUES,
        "n": st.one_of(st.integers(-2, 50), _VALUES),
        "mode": _VALUES,
        "meta": st.one_of(st.fixed_dictionaries({"level": _VALUES}), _VALUES),
        "items": st.one_of(st.lists(_VALUES, max_size=2), _VALUES),
    },
)

#: The alias names and the other names extraction reads, with the values a plan does
#: not assume (a few of them in a call at a time: most are refused when they clash).
SPECIAL = {
    "path": st.sampled_from(
        [
            *("/tmp/alpha", "/etc/passwd", "../x", "~/a", "", None, 7),
            ["/tmp/a", "/etc/b"],
            "/tmp/" + "x" * 600,
        ]
    ),
    "file_path": st.sampled_from(["/tmp/alpha", "/tmp/other", None]),
    "url": st.sampled_from(
        ["https://alpha.example/a", "file:///etc/passwd", "not a url", "http://[::1]/", None]
    ),
    "domain": st.sampled_from(["alpha.example", "ALPHA.example.", "beta", None]),
    "session_id": st.sampled_from(["s-1", None, 3]),
    "est_cost": st.sampled_from([1, 2.5, 1, 3, 0, 1, math.nan, True, "x"]),
}


CONTEXTS = (
    Context(),
    Context(tenant="acme", agent="bot"),
    Context(tenant="acme"),
    Context(agent="Bot"),
)


class _OddContext(Context):
    """A context of another class: narrowing and the has() checks stand aside."""

    __slots__ = ()


@st.composite
def actions(draw: st.DrawFn) -> Action:
    name = draw(st.sampled_from(TOOLS))
    arguments: Any = dict(draw(ARGUMENTS))
    for special in draw(st.lists(st.sampled_from(sorted(SPECIAL)), max_size=2, unique=True)):
        arguments[special] = draw(SPECIAL[special])
    shape = draw(st.integers(0, 11))
    if shape == 0 and name == "shell":
        arguments["command"] = draw(st.sampled_from(["ls", "cat /etc/passwd", "echo é"]))
    elif shape == 1:
        arguments = {"input": draw(st.sampled_from(["ls /tmp", "alpha"]))}
    elif shape == 2:
        arguments = MappingProxyType(arguments)  # not a dict: the full extraction
    context = draw(st.sampled_from(CONTEXTS))
    if draw(st.integers(0, 9)) == 0:
        context = _OddContext(tenant=context.tenant, agent=context.agent)
    capabilities: Any = draw(st.sampled_from([(), ("read",), ["read"]]))
    return Action(
        kind=draw(st.sampled_from(["tool", "tool", "tool", "mcp", "llm"])),
        name=name,
        arguments=arguments,
        scope=draw(st.one_of(st.none(), st.none(), st.sampled_from(["data", "shell"]))),
        description=draw(st.sampled_from([None, None, "reads a file", "runs a shell"])),
        target=draw(st.sampled_from([None, "order:1", "mcp:alpha"])),
        schema=draw(st.sampled_from([None, None, None, {"properties": {"q": {}, "path": {}}}])),
        capabilities=capabilities,
        context=context,
    )


# -- 1. the same decision either way -----------------------------------------------------------


@SETTINGS
@given(data=policies(), calls=st.lists(actions(), min_size=1, max_size=8))
def test_the_specialised_paths_decide_as_the_reference_rule_by_rule(
    data: dict[str, Any], calls: list[Action]
) -> None:
    expected = judge_all_ways(data, calls)
    for found in expected[::2] if isinstance(expected, list) else ():
        event(f"verdict: {found[0].value}, {min(len(found[1]), 3)} rule id(s)")


# -- 2. the same facts from a planned shape as from the full extraction ------------------------


def _facts_or_error(make: Any) -> tuple[Any, ...]:
    try:
        facts: Facts = make()
    except Exception as exc:
        return ("raised", type(exc).__name__, str(exc))
    return (
        facts.kind,
        facts.name,
        facts.scope,
        facts.verb,
        facts.args,
        list(facts.params.items()),  # in order: CEL and records read them so
        facts.context,
        facts.target,
        facts.capabilities,
        facts.scopes,
        facts.variants,
        facts.derived,
    )


#: The policy's limits on arguments: the default, and small ones that nested
#: arguments (``meta``, ``items``) reach.
LIMITS = (None, {"max_depth": 1, "max_items": 3}, {"max_depth": 2, "max_items": 5})


@SETTINGS
@given(
    calls=st.lists(actions(), min_size=1, max_size=8),
    limits=st.sampled_from(LIMITS),
)
def test_a_planned_shape_gives_the_facts_of_the_full_extraction(
    calls: list[Action], limits: dict[str, int] | None
) -> None:
    data: dict[str, Any] = {
        "version": 1,
        "scopes": {"tools": {"se*": "data"}, "default": "network"},
        "rules": [{"id": "a", "decision": "allow", "reason": "ok"}],
    }
    if limits is not None:
        data["limits"] = limits
    policy = compile_policy(data)
    for call in calls:
        for _ in (0, 1):  # planned on the first call, used on the second
            planned = _facts_or_error(lambda: facts_for(call, policy))  # noqa: B023
            full = _facts_or_error(lambda: _extracted(call, policy))  # noqa: B023
            assert planned == full


# -- 3. the same answer from a generated condition test as from the general one --------------


def _outcome(test: Any, facts: Facts) -> tuple[Any, ...]:
    try:
        return ("ok", test(facts))
    except Exception as exc:
        return ("raised", type(exc).__name__, str(exc))


@SETTINGS
@given(
    key=st.sampled_from(KEYS + PARAMS),
    condition=conditions(),
    decision=st.sampled_from(["allow", "deny"]),
    calls=st.lists(actions(), min_size=1, max_size=8),
)
def test_a_generated_condition_test_answers_as_the_general_one(
    key: str, condition: Any, decision: str, calls: list[Action]
) -> None:
    data = {
        "version": 1,
        "rules": [{"id": "c", "decision": decision, "reason": "c", "params": {key: condition}}],
    }
    try:
        specialised = compile_policy(data)
    except PolicyError:
        return  # (a test of a number on text the loader refuses, and the like)
    with reference():
        general = compile_policy(data)
    [fast] = specialised.rules[0].conditions
    [slow] = general.rules[0].conditions
    for call in calls:
        try:
            facts = _extracted(call, general)
        except Exception:
            continue
        got, want = _outcome(fast.test, facts), _outcome(slow.test, facts)
        event(f"{want[0]}")
        assert got == want


# -- 3b. the same answer from a generated `when:` test as from the tree ---------------------

#: What a `when:` reads: each root with keys that are there, are not, and hold values
#: of every type (a list for ``action.capabilities``, a dict for ``context.downstream``).
_WHEN_FIELDS = {
    "args": ("q", "n", "mode", "meta", "items", "absent"),
    "params": ("path", "verb", "session_id", "target", "est_cost", "absent"),
    "context": ("tenant", "agent", "agent_type", "session_id", "downstream", "absent"),
    "action": ("name", "kind", "verb", "target", "capabilities", "scope", "absent"),
}
_WHEN_LITERALS = (
    "'alpha'",
    "'al'",
    "''",
    '"acme"',
    "0",
    "1",
    "42",
    "-1",
    "2.5",
    "1e9",
    "true",
    "false",
    "null",
)


@st.composite
def _when_fields(draw: st.DrawFn) -> str:
    root = draw(st.sampled_from(sorted(_WHEN_FIELDS)))
    return f"{root}.{draw(st.sampled_from(_WHEN_FIELDS[root]))}"


@st.composite
def _when_atoms(draw: st.DrawFn) -> str:
    field = draw(_when_fields())
    shape = draw(st.integers(0, 8))
    if shape == 0:
        return f"has({field})"
    if shape == 1:
        op = draw(st.sampled_from(["==", "!=", "<", "<=", ">", ">="]))
        return f"{field} {op} {draw(st.sampled_from(_WHEN_LITERALS))}"
    if shape == 2:
        literals = draw(st.lists(st.sampled_from(_WHEN_LITERALS[:-1]), max_size=3))
        return f"{field} in [{', '.join(literals)}]"
    if shape == 3:
        method = draw(st.sampled_from(["startsWith", "endsWith", "contains"]))
        return f"{field}.{method}({draw(st.sampled_from(_WHEN_LITERALS[:3]))})"
    if shape == 4:
        return field  # a flag
    if shape == 5:
        return draw(st.sampled_from(["true", "false"]))
    if shape == 6:
        return draw(st.sampled_from(["size(args) > 1", "args.size() == 0"]))  # CEL's own
    if shape == 7:
        return f"{field} {draw(st.sampled_from(['==', '!=']))} {draw(_when_fields())}"
    return f"!has({field})"


def _when_expressions() -> st.SearchStrategy[str]:
    return st.recursive(
        _when_atoms(),
        lambda inner: st.one_of(
            st.lists(inner, min_size=2, max_size=4).map(" && ".join),
            st.lists(inner, min_size=2, max_size=4).map(" || ".join),
            inner.map(lambda part: f"({part})"),
            inner.map(lambda part: f"!({part})"),
        ),
        max_leaves=8,
    )


_WHEN_VALUES = st.one_of(
    _VALUES,
    st.sampled_from(
        ["alpha", "al", "", 0, 1, 42, -1, 2.5, 1e9, -0.0, 2**63, -(2**63) - 1, False, math.nan]
    ),
)


@st.composite
def _when_calls(draw: st.DrawFn) -> Action:
    """Calls for `when:` tests: the usual kind mostly, odd ones (a context of another
    class, arguments that are not a dict, capabilities that are a list) sometimes."""
    arguments: Any = {
        key: draw(_WHEN_VALUES)
        for key in draw(st.lists(st.sampled_from(["q", "n", "mode", "meta"]), unique=True))
    }
    arguments.update(draw(st.sampled_from([{}, {}, {"path": "/tmp/alpha"}, {"path": "*"}])))
    context = Context(
        tenant=draw(st.sampled_from(["default", "acme"])),
        agent=draw(st.sampled_from([None, "bot"])),
        agent_type=draw(st.sampled_from([None, "release"])),
        session_id=draw(st.sampled_from([None, "s-1"])),
        downstream=draw(st.sampled_from([None, Downstream("erp", "post")])),
    )
    odd = draw(st.integers(0, 9))
    if odd == 0:
        context = _OddContext(tenant=context.tenant, agent=context.agent)
    elif odd == 1:
        arguments = MappingProxyType(arguments)
    return Action(
        kind=draw(st.sampled_from(["tool", "mcp"])),
        name=draw(st.sampled_from(["search", "read_file"])),
        arguments=arguments,
        target=draw(st.sampled_from([None, "order:1"])),
        capabilities=draw(st.sampled_from([(), ("read",), ["read"]])),
        context=context,
    )


def _when_outcomes(source: str, calls: list[Action]) -> list[tuple[Any, ...]] | None:
    """Each call's answer (or error) from the rule's generated `when:` test and from
    the tree-walking one, in pairs; None when the expression does not compile."""
    data = {"version": 1, "rules": [{"id": "w", "decision": "deny", "when": source}]}
    try:
        specialised = compile_policy(data)
        with reference():
            general = compile_policy(data)
    except PolicyError:
        return None
    out = []
    for call in calls:
        try:
            facts = _extracted(call, general)
        except Exception:
            continue
        out.append(
            (_outcome(specialised.rules[0].test, facts), _outcome(general.rules[0].test, facts))
        )
    return out


@SETTINGS
@given(source=_when_expressions(), calls=st.lists(_when_calls(), min_size=1, max_size=8))
def test_a_generated_when_test_answers_as_the_tree(source: str, calls: list[Action]) -> None:
    found = _when_outcomes(source, calls)
    for got, want in found or ():
        event(f"{want[0]} {want[1] if want[0] == 'ok' else ''}")
        assert got == want


@pytest.mark.parametrize(
    "source",
    [
        "!" * 46 + "has(args.q)",
        " && ".join(f"has(args.k{i})" for i in range(47)),
        "(" * 40 + "has(args.q) || args.n > 1" + ")" * 40,
        " || ".join(f"(args.q == 'a{i}' && has(args.n))" for i in range(16)),
    ],
)
def test_deeply_nested_when_tests_answer_as_the_tree(source: str) -> None:
    calls = [
        Action.tool("search", arguments)
        for arguments in ({}, {"q": "a3"}, {"q": "a3", "n": 2}, {"k0": 1, "n": "x"})
    ]
    for got, want in _when_outcomes(source, calls) or ():
        assert got == want


def test_generated_when_tests_are_made_for_the_trees_python_decides() -> None:
    """The property above judges generated tests, not the fallback: a tree of the
    safe roots gets one, a tree reading ``shell`` keeps the tree-walking test."""
    policy = compile_policy(
        _policy(
            {"id": "g", "decision": "deny", "when": "has(args.q) && context.tenant == 'a'"},
            {"id": "s", "decision": "deny", "when": "shell.complete && has(args.q)"},
        )
    )
    tests = {rule.id: rule.test for rule in policy.rules}
    assert tests["g"].__code__.co_filename == "<interlock when>"
    assert tests["s"].__code__.co_filename != "<interlock when>"


# -- 4. tricky cases, each with what it decides ----------------------------------------------


def _policy(*rules: dict[str, Any], default: str = "allow") -> dict[str, Any]:
    return {
        "version": 1,
        "default": default,
        "rules": [{"reason": f"because {rule['id']}", **rule} for rule in rules],
    }


TRICKY: list[tuple[str, dict[str, Any], Action, tuple[Verdict, tuple[str, ...]]]] = [
    (
        # has() false: the rule cannot match, so the allow tier decides
        "has-false",
        _policy(
            {"id": "d", "decision": "deny", "when": "has(args.body) && args.body == 'x'"},
            {"id": "a", "decision": "allow"},
            default="deny",
        ),
        Action.tool("send", {"to": "ops"}),
        (Verdict.ALLOW, ("a",)),
    ),
    (
        # a root that fails to build before the has(): the rule cannot be evaluated
        "has-after-a-failing-root",
        _policy(
            {"id": "d", "decision": "deny", "when": "shell.complete && has(args.body)"},
            {"id": "a", "decision": "allow"},
        ),
        Action.tool("shell", {"command": 'eval "$X"'}),
        (Verdict.UNDETERMINED, ("d",)),
    ),
    (
        # has() of a present argument: the rest of the when decides
        "has-true",
        _policy({"id": "d", "decision": "deny", "when": "has(args.q) && args.q == 'x'"}),
        Action.tool("send", {"q": "x"}),
        (Verdict.DENY, ("d",)),
    ),
    (
        # a negated has() is no discriminator: it holds when q is missing
        "not-has",
        _policy({"id": "d", "decision": "deny", "when": "!has(args.q)"}),
        Action.tool("send", {}),
        (Verdict.DENY, ("d",)),
    ),
    (
        # arguments that are not a dict: has() is left to the tree
        "has-on-a-mapping",
        _policy({"id": "d", "decision": "deny", "when": "has(args.q) || true"}),
        Action("tool", "send", MappingProxyType({})),
        (Verdict.DENY, ("d",)),
    ),
    (
        # an int too large for a float: the bound raises, as the general test does
        "huge-int",
        _policy({"id": "d", "decision": "deny", "params": {"args.n": {"gt": 5}}}),
        Action.tool("pay", {"n": 10**400}),
        (Verdict.UNDETERMINED, ("d",)),
    ),
    (
        # NaN under a bound: not a finite number
        "nan",
        _policy({"id": "d", "decision": "deny", "params": {"args.n": {"lt": 5}}}),
        Action.tool("pay", {"n": math.nan}),
        (Verdict.UNDETERMINED, ("d",)),
    ),
    (
        # a bool is not a number to a bound
        "bool-bound",
        _policy({"id": "d", "decision": "deny", "params": {"args.n": {"gte": 0}}}),
        Action.tool("pay", {"n": True}),
        (Verdict.UNDETERMINED, ("d",)),
    ),
    (
        # text is never equal to a number, whatever the literal set holds
        "literal-types",
        _policy({"id": "d", "decision": "deny", "params": {"args.q": {"in": ["42", "x"]}}}),
        Action.tool("search", {"q": 42}),
        (Verdict.ALLOW, ()),
    ),
    (
        # an allowed tier with an always-true rule decides; the other rules are tested
        # for their ids, and an error among them does not count
        "always-and-error",
        _policy(
            {"id": "a1", "decision": "allow"},
            {"id": "a2", "decision": "allow", "params": {"args.n": {"gt": 1}}},
            {"id": "a3", "decision": "allow", "params": {"args.n": {"lt": 100}}},
            default="deny",
        ),
        Action.tool("pay", {"n": "x"}),
        (Verdict.ALLOW, ("a1",)),
    ),
    (
        # every matching rule of the deciding tier, sorted, with their reasons
        "several-match",
        _policy(
            {"id": "d2", "decision": "deny", "params": {"args.q": "al*"}},
            {"id": "d1", "decision": "deny", "params": {"args.q": {"regex": "^al"}}},
            {"id": "d3", "decision": "deny", "params": {"args.q": "z*"}},
        ),
        Action.tool("search", {"q": "alpha"}),
        (Verdict.DENY, ("d1", "d2")),
    ),
    (
        # an error in a stricter tier leaves the verdict open
        "error-in-deny-tier",
        _policy(
            {"id": "d", "decision": "deny", "params": {"args.n": {"gt": 1}}},
            {"id": "a", "decision": "allow"},
        ),
        Action.tool("pay", {"n": "x"}),
        (Verdict.UNDETERMINED, ("d",)),
    ),
    (
        # allowed either way: an allow tier's error under an allow default
        "allowed-either-way",
        _policy({"id": "a", "decision": "allow", "params": {"args.n": {"gt": 1}}}),
        Action.tool("pay", {"n": "x"}),
        (Verdict.ALLOW, ()),
    ),
    (
        # an approval carries the policy's link
        "approval-link",
        {
            **_policy({"id": "r", "decision": "require_approval", "params": {"args.n": {"gt": 1}}}),
            "approvals": {"url": "https://approve.example/{id}"},
        },
        Action.tool("pay", {"n": 5}),
        (Verdict.REQUIRE_APPROVAL, ("r",)),
    ),
    (
        # a None path is no path: the scope comes from the name alone
        "none-alias",
        {
            **_policy(
                {"id": "f", "decision": "deny", "scope": "filesystem"},
                {"id": "d", "decision": "allow", "scope": "data"},
                default="deny",
            ),
            "scopes": {"default": "data"},
        },
        Action.tool("lookup", {"path": None}),
        (Verdict.ALLOW, ("d",)),
    ),
    (
        # a long path is read in full, not from the memo
        "long-path",
        _policy({"id": "f", "decision": "deny", "params": {"path": "/tmp/*"}}),
        Action.tool("read_file", {"path": "/tmp/" + "x" * 600}),
        (Verdict.DENY, ("f",)),
    ),
    (
        # a part only CEL can judge leaves the generated `when:` unknown: CEL runs
        "when-unknown-runs-cel",
        _policy({"id": "d", "decision": "deny", "when": "has(args.q) && size(args) > 5"}),
        Action.tool("search", {"q": "alpha"}),
        (Verdict.ALLOW, ()),
    ),
    (
        # a rule's checks AND-ed in the generated decision function: the glob holds,
        # the `when:` does not
        "checks-in-line",
        _policy(
            {"id": "d", "decision": "deny", "params": {"args.q": "al*"}, "when": "has(args.n)"},
            {"id": "a", "decision": "allow"},
        ),
        Action.tool("search", {"q": "alpha"}),
        (Verdict.ALLOW, ("a",)),
    ),
    (
        # an int past int64 is unknown to the generated test: CEL judges it
        "when-huge-int",
        _policy({"id": "d", "decision": "deny", "when": "args.n > 10"}),
        Action.tool("pay", {"n": 2**70}),
        (Verdict.DENY, ("d",)),
    ),
    (
        # a bool is no number to CEL: `true > 2.5` has no overload (Python says False)
        "when-bool-under-a-bound",
        _policy({"id": "d", "decision": "deny", "when": "args.n > 2.5"}),
        Action.tool("pay", {"n": True}),
        (Verdict.UNDETERMINED, ("d",)),
    ),
    (
        # null equals no text: an unset agent type is not "release"
        "when-null-differs",
        _policy(
            {"id": "d", "decision": "deny", "when": "context.agent_type != 'release'"},
            default="deny",
        ),
        Action.tool("deploy", {}),
        (Verdict.DENY, ("d",)),
    ),
]


@pytest.mark.parametrize(("name", "data", "action", "expected"), TRICKY, ids=[c[0] for c in TRICKY])
def test_tricky_cases_decide_the_same_either_way(
    name: str, data: dict[str, Any], action: Action, expected: tuple[Verdict, tuple[str, ...]]
) -> None:
    judge_all_ways(data, [action])
    decision = evaluate(action, compile_policy(data))
    assert (decision.verdict, decision.rule_ids) == expected


# -- 5. a wrong specialisation is seen -------------------------------------------------------


def _differs(data: dict[str, Any], action: Action) -> bool:
    try:
        judge_all_ways(data, [action])
    except AssertionError:
        return True
    return False


def test_a_generated_function_that_drops_a_matching_rule_is_seen(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data, action, _ = next(case[1:] for case in TRICKY if case[0] == "several-match")
    assert not _differs(data, action)
    real = specialise_module._head
    monkeypatch.setattr(
        specialise_module, "_head", lambda verdict, rules, policy: real(verdict, rules[:1], policy)
    )
    assert _differs(data, action)


def test_a_has_check_that_reads_a_negated_has_is_seen(monkeypatch: pytest.MonkeyPatch) -> None:
    data = _policy({"id": "d", "decision": "deny", "when": "!has(args.q) && has(args.n)"})
    action = Action.tool("send", {"n": 1})
    assert not _differs(data, action)

    def every_has(node: Any, root: str) -> tuple[str, ...]:  # the `!` forgotten
        return tuple(key for key in ("q", "n") if f"key='{key}'" in repr(node))

    monkeypatch.setattr(celpartial, "required_keys", every_has)  # read when first needed
    assert _differs(data, action)


def test_a_shape_plan_that_loses_the_verb_is_seen(monkeypatch: pytest.MonkeyPatch) -> None:
    policy = compile_policy(_policy({"id": "a", "decision": "allow"}))
    action = Action.tool("read_file", {"path": "/tmp/a"})
    assert _facts_or_error(lambda: facts_for(action, policy)) == _facts_or_error(
        lambda: _extracted(action, policy)
    )
    monkeypatch.setattr(shapes, "verb_of", lambda name: None)
    policy = compile_policy(_policy({"id": "a", "decision": "allow"}))
    assert _facts_or_error(lambda: facts_for(action, policy)) != _facts_or_error(
        lambda: _extracted(action, policy)
    )


def test_a_bound_test_that_forgets_finiteness_is_seen(monkeypatch: pytest.MonkeyPatch) -> None:
    data, action, _ = next(case[1:] for case in TRICKY if case[0] == "nan")
    assert not _differs(data, action)
    monkeypatch.setattr(conditiontests, "math", _NoFinite())
    conditiontests._factory.cache_clear()
    try:
        assert _differs(data, action)
    finally:
        conditiontests._factory.cache_clear()


class _NoFinite:
    """``math`` for the generated bound tests, with every number finite."""

    @staticmethod
    def isfinite(value: float) -> bool:
        return True


def test_a_generated_when_test_that_decides_an_unknown_part_is_seen(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data, action, _ = next(case[1:] for case in TRICKY if case[0] == "when-unknown-runs-cel")
    assert not _differs(data, action)
    real = celgen._Writer._junction

    def unknown_as_true(self: Any, parts: Any, decisive: str) -> str:  # no CEL run
        return real(self, parts, decisive).replace("(None if ", "(True if ")

    monkeypatch.setattr(celgen._Writer, "_junction", unknown_as_true)
    assert _differs(data, action)


def test_a_generated_when_test_that_forgets_the_type_is_seen(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data, action, _ = next(case[1:] for case in TRICKY if case[0] == "when-bool-under-a-bound")
    assert not _differs(data, action)
    real = celgen._Writer._compare

    def any_type(self: Any, node: Any) -> str:  # compares a bool with a float
        return real(self, node).replace("(None if type(", "(None if False and type(")

    monkeypatch.setattr(celgen._Writer, "_compare", any_type)
    assert _differs(data, action)


def test_a_generated_when_test_that_misreads_an_unset_field_is_seen(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = _policy(
        {"id": "d", "decision": "deny", "when": "has(context.downstream)"},
        {"id": "a", "decision": "allow"},
    )
    action = Action.tool("deploy", {})
    assert not _differs(data, action)
    real = celgen._Writer.value

    def always_there(self: Any, root: str, key: str) -> str:  # downstream read as set
        return real(self, root, key).replace("(M if context.downstream is None", "(M if False")

    monkeypatch.setattr(celgen._Writer, "value", always_there)
    assert _differs(data, action)


def test_a_generated_function_that_ors_a_rules_checks_is_seen(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data, action, _ = next(case[1:] for case in TRICKY if case[0] == "checks-in-line")
    assert not _differs(data, action)
    real = specialise_module._matches
    monkeypatch.setattr(
        specialise_module,
        "_matches",
        lambda tier, rule, checks: real(tier, rule, checks).replace(" and ", " or "),
    )
    specialise_module._factory.cache_clear()
    try:
        assert _differs(data, action)
    finally:
        specialise_module._factory.cache_clear()


def test_a_shape_plan_that_skips_the_limits_on_nested_arguments_is_seen(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = {**_policy({"id": "a", "decision": "allow"}), "limits": {"max_depth": 1}}
    action = Action.tool("post", {"q": "x", "body": {"id": {"deep": 1}}})
    policy = compile_policy(data)
    planned = _facts_or_error(lambda: facts_for(action, policy))
    assert planned[0] == "raised"  # nested deeper than the policy judges
    assert planned == _facts_or_error(lambda: _extracted(action, policy))
    # the shape was planned, not left to the full extraction
    assert [shape is not None for shape in policy.shapes.values()] == [True]
    monkeypatch.setattr(shapes, "check_limits", lambda arguments, **limits: None)
    shapes._factory.cache_clear()
    try:
        policy = compile_policy(data)
        assert _facts_or_error(lambda: facts_for(action, policy)) != _facts_or_error(
            lambda: _extracted(action, policy)
        )
    finally:
        shapes._factory.cache_clear()


def test_a_generated_two_field_comparison_of_mixed_types_is_seen(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = _policy(
        {"id": "d", "decision": "deny", "when": "args.q == args.n"},
        {"id": "a", "decision": "allow"},
    )
    action = Action.tool("search", {"q": 1, "n": True})  # CEL: an int is no bool
    assert not _differs(data, action)
    real = celgen._Writer._compare_fields

    def mixed(self: Any, node: Any) -> str:  # the types' identity not required
        return real(self, node).replace(" or type(", " or False and type(")

    monkeypatch.setattr(celgen._Writer, "_compare_fields", mixed)
    assert _differs(data, action)
