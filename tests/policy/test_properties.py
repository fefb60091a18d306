"""Property-based tests of the engine and the guard facade.

1. Permuting a policy's rules never changes a decision.
2. Adding a deny rule that certainly matches never yields allow.
3. Hostile arguments never raise out of ``Guard.check``; the result is a Decision, and
   never an allow that no rule gave.
4. Huge and deep arguments are judged within a memory bound (time is left to
   pytest-timeout: no elapsed-time assertions).
5. ``Guard.acheck`` is the async twin of 3.
6. The same action under the same policy gets the same decision.
"""

from __future__ import annotations

import collections
import gc
import math
import secrets
import sys
import tracemalloc
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from interlock import Action, Context, Decision, Guard, Verdict
from interlock.core.events import MemorySink
from interlock.policy import CONFLICTING_ALIASES_RULE, CompiledPolicy, compile_policy, evaluate
from interlock.policy.engine import facts_for
from interlock.policy.extract import AliasConflict

SETTINGS = settings(
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# -- random policies and actions ----------------------------------------------------------

DECISIONS = ("allow", "deny", "require_approval")
KINDS = ("tool", "tool", "tool", "mcp", "llm", "browser")
NAMES = (
    "shell",
    "read_file",
    "pay",
    "pay_invoice",
    "fetch_url",
    "list_files",
    "delete_file",
    "send_email",
)
NAME_GLOBS: tuple[Any, ...] = (
    "shell",
    "read_file",
    "pay*",
    "fetch_url",
    "*_file*",
    "*",
    ["shell", "fetch_url"],
    ["pay?*", "read_*"],
)
SCOPES = ("shell", "filesystem", "network", "cost", "llm", "browser", "data")

CONDITIONS: dict[str, tuple[Any, ...]] = {
    "command": (
        "ls*",
        "rm *",
        {"regex": r"^rm\b"},
        {"not_glob": "echo *"},
        ["ls*", "cat *"],
        {"in": ["ls", "pwd"]},
    ),
    "path": (
        "/etc/*",
        {"glob": "/tmp/*"},
        {"regex": r"\.\."},
        {"not_regex": "^/home/"},
        {"exists": False},
    ),
    "domain": (
        {"in": ["example.com", "evil.test"]},
        "*.example.com",
        {"eq": "example.com"},
        {"ne": "evil.test"},
    ),
    "url": ("https://*", {"regex": "^http://"}),
    "args.amount": (
        {"gt": 10},
        {"lt": 5},
        {"gte": 0, "lte": 100},
        5,
        {"in": [1, 5, 10]},
        {"ne": 0},
        {"glob": "1*"},
        {"exists": True},
    ),
    "args.n": ({"exists": True}, {"exists": False}, {"lt": 3}, {"eq": True}, {"glob": "1*"}),
    "args.tags": ({"gt": 1}, {"regex": "x"}, {"exists": True}),
    "args.meta.level": ({"gt": 1}, {"in": [0, 2]}),
    "verb": ("read", {"in": ["write", "delete"]}),
    "est_cost": ({"lte": 1.5},),
}

WHENS = (
    "args.amount > 10",  # errors when amount is missing or not a number
    "has(args.amount) && args.amount > 10",
    "size(args) > 1",
    "action.scope == 'shell'",
    "params.command.startsWith('ls')",  # errors without a command
    "'tags' in args && size(args.tags) > 2",
    "args.amount / args.n > 1",  # errors on a zero or missing n
    "args.amount",  # not a boolean, or missing
    "context.tenant == 'default'",
    "action.name.startsWith('pay')",
    "has(args.tags) && args.tags.exists(t, t == 'x')",
)


#: The parameters whose tests can fail on a value of the wrong type.
TYPED_KEYS = ("args.amount", "args.n", "args.tags", "args.meta.level", "command", "path")


@st.composite
def conditions(
    draw: st.DrawFn, min_size: int = 0, keys: tuple[str, ...] = tuple(sorted(CONDITIONS))
) -> dict[str, Any]:
    keys = draw(st.lists(st.sampled_from(keys), min_size=min_size, max_size=2, unique=True))
    return {key: draw(st.sampled_from(CONDITIONS[key])) for key in keys}


RULE_BODIES = st.fixed_dictionaries(
    {"decision": st.sampled_from(DECISIONS)},
    optional={
        "kind": st.sampled_from(["tool", "mcp", ["tool", "llm"]]),
        "name": st.sampled_from(NAME_GLOBS),
        "scope": st.sampled_from([*SCOPES, ["shell", "network"]]),
        "params": conditions(),
        "when": st.sampled_from(WHENS),
        "tenant": st.just("acme"),
        "mode": st.sampled_from(["enforce", "shadow"]),
    },
)


@st.composite
def policies(draw: st.DrawFn, *, conditioned: bool = False) -> dict[str, Any]:
    """A policy of 3-15 rules. ``conditioned``: every rule applies to every tool and
    tests parameters, so that rules of one tier disagree, or cannot be judged, together
    far more often than they would by chance."""
    bodies = draw(st.lists(RULE_BODIES, min_size=3, max_size=15))
    if conditioned:
        bodies = [
            {
                **{k: v for k, v in body.items() if k not in ("kind", "name", "scope", "tenant")},
                "params": draw(conditions(min_size=1, keys=TYPED_KEYS)),
            }
            for body in bodies
        ]
    rules = [{"id": f"r{i}", "reason": f"because r{i}", **body} for i, body in enumerate(bodies)]
    data: dict[str, Any] = {
        "version": 1,
        "default": draw(st.sampled_from(DECISIONS)),
        "rules": rules,
    }
    if draw(st.integers(0, 9)) == 0:
        data["mode"] = "shadow"
    extra = draw(
        st.fixed_dictionaries(
            {},
            optional={
                "limits": st.sampled_from(
                    [{"max_depth": 2}, {"max_items": 4}, {"max_param_chars": 12}]
                    if not conditioned
                    else [{"max_depth": 8}]
                ),
                "scopes": st.sampled_from(
                    [{"tools": {"pay*": "cost"}}, {"default": "data"}, {"tools": {"*": "shell"}}]
                ),
            },
        )
    )
    data.update(extra)
    return data


COMMANDS = st.sampled_from(["ls", "ls -la", "rm -rf /", "echo hi", "cat /etc/passwd", "", "pwd"])
TEXTISH = st.one_of(
    COMMANDS, st.lists(COMMANDS, max_size=3), st.integers(-3, 3), st.none(), st.binary(max_size=4)
)
PATHS = st.sampled_from(["/etc/passwd", "/tmp/x", "a/../../etc", "", "/home/u/f", "/tmp/../etc"])
URLS = st.sampled_from(
    [
        "https://example.com/a",
        "http://evil.test/x",
        "https://a.example.com",
        "not a url",
        "http://[::1",
        "example.com/p",
        "",
    ]
)

ARGUMENT_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "command": TEXTISH,
    "cmd": TEXTISH,
    "path": st.one_of(PATHS, st.integers(0, 3), st.none()),
    "file_path": st.one_of(PATHS, st.none()),
    "url": st.one_of(URLS, st.integers(0, 3)),
    "domain": st.one_of(
        st.sampled_from(["example.com", "EVIL.test.", "a.example.com", ""]), st.none()
    ),
    "amount": st.one_of(
        st.integers(-5, 200), st.floats(), st.sampled_from(["5", "15", True, None, [1, 2]])
    ),
    "n": st.one_of(st.integers(-2, 5), st.just("x"), st.booleans()),
    "tags": st.lists(st.sampled_from(["x", "y", "z"]), max_size=4),
    "meta": st.fixed_dictionaries({}, optional={"level": st.one_of(st.integers(0, 3), st.text())}),
    "est_cost": st.one_of(st.floats(), st.integers(0, 3), st.just("1")),
    "input": COMMANDS,
}


def actions(
    values: Mapping[str, st.SearchStrategy[Any]] = ARGUMENT_VALUES,
    required: tuple[str, ...] = (),
) -> st.SearchStrategy[Action]:
    return st.builds(
        Action,
        kind=st.sampled_from(KINDS),
        name=st.sampled_from(NAMES),
        arguments=st.fixed_dictionaries(
            {k: values[k] for k in required},
            optional={k: v for k, v in values.items() if k not in required},
        ),
        scope=st.one_of(st.none(), st.sampled_from(SCOPES)),
        context=st.sampled_from([Context(), Context(tenant="acme", agent="bot")]),
    )


ACTIONS = actions()
#: Arguments that extraction accepts, so that the rules themselves are judged (and often
#: cannot be: ``amount`` and ``n`` are always there, of any type).
JUDGED_ACTIONS = actions(
    {
        "command": COMMANDS,
        "path": PATHS,
        **{k: ARGUMENT_VALUES[k] for k in ("amount", "n", "tags", "meta", "input")},
    },
    required=("amount", "n"),
)


def essence(decision: Decision) -> tuple[Any, ...]:
    """What must not depend on rule order or repetition (everything but decision_id)."""
    shadow = decision.shadow
    return (
        decision.verdict,
        decision.rule_ids,
        decision.reason,
        None if shadow is None else (shadow.verdict, shadow.rule_ids, shadow.reason),
    )


# -- 1. permuting rules -------------------------------------------------------------------


@st.composite
def policy_and_permutation(
    draw: st.DrawFn, *, conditioned: bool = False
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    data = draw(policies(conditioned=conditioned))
    return data, draw(st.permutations(data["rules"]))


#: A third broad, two thirds rules that all test parameters against actions that
#: extraction accepts (where rules of one tier most often fail together).
_CONDITIONED_CASE = st.tuples(policy_and_permutation(conditioned=True), JUDGED_ACTIONS)
POLICY_ACTION_PERMUTATION = st.one_of(
    st.tuples(policy_and_permutation(), ACTIONS), _CONDITIONED_CASE, _CONDITIONED_CASE
)


def _rule(rule_id: str, decision: str, **fields: Any) -> dict[str, Any]:
    return {"id": rule_id, "decision": decision, "reason": f"because {rule_id}", **fields}


_TWO_ERRORING_CONDITIONS = [
    _rule("r0", "allow", params={"args.amount": {"gt": 10}}),
    _rule("r1", "allow", params={"args.n": {"lt": 3}}),
    _rule("r2", "deny", name="send_email"),
]


@settings(SETTINGS, max_examples=600)
@given(case=POLICY_ACTION_PERMUTATION)
@example(
    # Two rules of one tier whose *parameter conditions* cannot be judged: their errors
    # must be reported in an order that does not depend on the rules' order.
    case=(
        (
            {"version": 1, "default": "deny", "rules": _TWO_ERRORING_CONDITIONS},
            _TWO_ERRORING_CONDITIONS[::-1],
        ),
        Action.tool("pay", {"amount": "5", "n": "x"}),
    ),
)
def test_permuting_rules_never_changes_a_decision(
    case: tuple[tuple[dict[str, Any], list[dict[str, Any]]], Action],
) -> None:
    (data, permuted), action = case
    original = evaluate(action, compile_policy(data))
    shuffled = evaluate(action, compile_policy({**data, "rules": permuted}))
    event(f"verdict: {original.verdict.value}, {len(original.rule_ids)} rule id(s)")
    assert essence(shuffled) == essence(original)


# -- 2. a matching deny ---------------------------------------------------------------------

ADDED_DENY = "zz-added-deny"


@settings(SETTINGS, max_examples=500)
@given(
    data=policies(),
    action=ACTIONS,
    how=st.sampled_from(["bare", "name", "kind", "star"]),
    where=st.integers(0, 15),
)
def test_adding_a_matching_deny_rule_never_yields_allow(
    data: dict[str, Any], action: Action, how: str, where: int
) -> None:
    selector = {
        "bare": {},
        "name": {"name": action.name},
        "kind": {"kind": action.kind},
        "star": {"name": "*"},
    }[how]
    deny = {"id": ADDED_DENY, "decision": "deny", "reason": "added deny", **selector}
    rules = list(data["rules"])
    rules.insert(where % (len(rules) + 1), deny)
    before = evaluate(action, compile_policy(data))
    policy = compile_policy({**data, "rules": rules})
    after = evaluate(action, policy)
    event(f"before: {before.verdict.value}")

    try:
        facts_for(action, policy)
    except AliasConflict:
        # Refused before any rule is evaluated, with or without the new rule.
        assert after.verdict is Verdict.DENY
        assert after.rule_ids == (CONFLICTING_ALIASES_RULE,)
        assert essence(before) == essence(after)
        return
    except Exception:
        # The arguments cannot be judged at all (a limit, a type): no rule is consulted.
        assert after.verdict is Verdict.UNDETERMINED
        assert after.cause is not None
        assert essence(before) == essence(after)
        return

    if policy.shadow_mode:
        # Shadow mode lets everything run and records what enforcement would do.
        assert after.verdict is Verdict.ALLOW
        assert after.shadow is not None
        assert after.shadow.verdict is Verdict.DENY
        assert ADDED_DENY in after.shadow.rule_ids
        return

    assert after.verdict is Verdict.DENY, after
    assert after.rule_ids == tuple(sorted(after.rule_ids))
    earlier = set(before.rule_ids) if before.verdict is Verdict.DENY else set()
    assert set(after.rule_ids) == earlier | {ADDED_DENY}


# -- 6. determinism -------------------------------------------------------------------------


@settings(SETTINGS, max_examples=400)
@given(data=policies(), action=ACTIONS)
def test_the_same_action_gets_the_same_decision(data: dict[str, Any], action: Action) -> None:
    policy = compile_policy(data)
    first = evaluate(action, policy)
    second = evaluate(action, policy)  # the candidate cache is warm now
    fresh = evaluate(action, compile_policy(data))
    guarded = Guard(policy).check(action)
    assert essence(first) == essence(second) == essence(fresh) == essence(guarded)
    assert first.decision_id != second.decision_id


# -- hostile arguments: the policy ------------------------------------------------------------

#: Drawn at import so no generated value can know it: only a value containing it can be
#: allowed by the hostile policy.
SESAME = f"sesame{secrets.token_hex(8)}"


def hostile_policy(limits: Mapping[str, int] | None = None) -> CompiledPolicy:
    s = SESAME
    rules = [
        _rule("deny-rm", "deny", scope="shell", params={"command": "rm *"}),
        _rule("deny-etc", "deny", params={"path": "/etc/*"}),
        _rule("deny-evil", "deny", params={"domain": {"in": ["evil.test"]}}),
        _rule("deny-token", "deny", when="'token' in args && args.token == 'x'"),
        _rule("deny-amount", "deny", params={"args.amount": {"in": [-123456789, "stop"]}}),
        _rule("approve-big", "require_approval", name="pay*", params={"args.amount": {"gt": 100}}),
        _rule(
            "approve-meta",
            "require_approval",
            when="has(args.meta) && has(args.meta.level) && args.meta.level > 2",
        ),
        _rule("approve-tags", "require_approval", when="'tags' in args && size(args.tags) > 99"),
        _rule("approve-session", "require_approval", params={"session_id": {"eq": s}}),
        _rule("allow-command", "allow", params={"command": f"echo {s}*"}),
        _rule("allow-url", "allow", params={"url": f"https://{s}.test/*", "domain": f"{s}.test"}),
        _rule("allow-path", "allow", params={"path": f"/{s}/*"}),
        _rule("allow-key", "allow", params={"args.key": {"eq": s}, "args.amount": {"lt": 1e9}}),
        _rule("allow-when", "allow", when=f"'key' in args && args.key == '{s}' && size(args) > 0"),
        _rule("allow-agent", "allow", when=f"context.agent == '{s}' && size(params) >= 0"),
        _rule("allow-nested", "allow", params={"args.meta.level": {"in": [s]}}),
        _rule("allow-cost", "allow", params={"est_cost": {"lt": -1e300}}),
    ]
    data: dict[str, Any] = {"version": 1, "default": "deny", "rules": rules}
    if limits:
        data["limits"] = dict(limits)
    return compile_policy(data)


POLICY = hostile_policy()
#: Limits high enough that huge and deep arguments reach matching and CEL.
GENEROUS = hostile_policy({"max_depth": 1024, "max_items": 10_000_000, "max_param_chars": 10**8})


def plain_guard(policy: CompiledPolicy = POLICY) -> Guard:
    return Guard(policy)


def busy_guard(policy: CompiledPolicy = POLICY) -> Guard:
    """A guard that also merges a context, records events and calls hooks."""
    return Guard(
        policy,
        context=Context(tenant="acme", agent="bot", session_id="s-1"),
        sink=MemorySink(),
        on_decision=lambda decision, action: None,
        on_blocked=lambda decision, action: None,
    )


GUARDS = [pytest.param(plain_guard, id="plain"), pytest.param(busy_guard, id="busy")]


def _escaped(exc: BaseException) -> str:
    """Where ``exc`` left Interlock, without printing ``exc`` itself."""
    frames = []
    where = exc.__traceback__
    while where is not None:
        code = where.tb_frame.f_code
        if "interlock" in code.co_filename and "tests" not in code.co_filename:
            frames.append(
                f"{code.co_filename.rsplit('/src/', 1)[-1]}:{where.tb_lineno} {code.co_name}"
            )
        where = where.tb_next
    trail = "\n  ".join(frames) or "?"
    return f"{type(exc).__qualname__} escaped from the guard, through:\n  {trail}"


def no_raise(call: Callable[[], object]) -> object:
    """``call()``; an escaping exception fails the test by its type and place alone (a
    hostile exception may not survive being printed, so it is not chained either)."""
    try:
        return call()
    except Exception as exc:
        failure = _escaped(exc)
    pytest.fail(failure, pytrace=False)


async def no_raise_async(call: Callable[[], Awaitable[object]]) -> object:
    try:
        return await call()
    except Exception as exc:
        failure = _escaped(exc)
    pytest.fail(failure, pytrace=False)


def assert_safe(decision: object) -> None:
    """A Decision, at worst undetermined, and never an allow that no rule gave."""
    assert isinstance(decision, Decision)
    assert isinstance(decision.verdict, Verdict)
    assert isinstance(decision.reason, str)
    assert decision.verdict is not Verdict.ALLOW, decision
    if decision.verdict is Verdict.UNDETERMINED:
        assert decision.cause is not None


@pytest.mark.parametrize("make_guard", GUARDS)
@pytest.mark.parametrize(
    ("action", "rule"),
    [
        (Action.tool("shell", {"command": f"echo {SESAME} hi"}), "allow-command"),
        (Action.tool("fetch", {"url": f"https://{SESAME}.test/x"}), "allow-url"),
        (Action.tool("read_file", {"path": f"/{SESAME}/a/../b"}), "allow-path"),
        (Action.tool("x", {"key": SESAME, "amount": 3}), "allow-key"),
    ],
)
def test_the_hostile_policy_does_allow_what_it_names(
    make_guard: Callable[[], Guard], action: Action, rule: str
) -> None:
    """The control for ``assert_safe``: an allow is reachable, so "never allow" means
    something."""
    decision = make_guard().check(action)
    assert decision.verdict is Verdict.ALLOW, decision
    assert rule in decision.rule_ids


# -- hostile arguments: the values -------------------------------------------------------------


class Explosive:
    """Every protocol method raises."""

    def _boom(self, *_: Any) -> Any:
        raise RuntimeError("explosive")

    __eq__ = __ne__ = __lt__ = __gt__ = __le__ = __ge__ = _boom  # type: ignore[assignment]
    __hash__ = __repr__ = __str__ = __bool__ = __len__ = __iter__ = _boom  # type: ignore[assignment]
    __float__ = __int__ = __index__ = __format__ = __getitem__ = _boom  # type: ignore[assignment]


class TrickyInt(int):
    """An int whose comparisons raise."""

    def _boom(self, *_: Any) -> Any:
        raise RuntimeError("tricky int")

    __eq__ = __ne__ = __lt__ = __gt__ = __le__ = __ge__ = _boom  # type: ignore[assignment]
    __hash__ = int.__hash__


class TrickyStr(str):
    """A str whose comparisons raise."""

    def _boom(self, *_: Any) -> Any:
        raise RuntimeError("tricky str")

    __eq__ = __ne__ = _boom  # type: ignore[assignment]
    __hash__ = str.__hash__


class TrickyList(list):  # type: ignore[type-arg]
    """A list whose iteration raises."""

    def __iter__(self) -> Iterator[Any]:
        raise RuntimeError("tricky list")


class Custom:
    __slots__ = ("value",)

    def __init__(self, value: Any = None) -> None:
        self.value = value


class LyingMapping(Mapping[str, Any]):
    """Claims keys it cannot produce."""

    def __getitem__(self, key: str) -> Any:
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(["command", "url", "amount"])

    def __len__(self) -> int:
        return 3


class ExplodingMapping(Mapping[str, Any]):
    """Every read raises."""

    def __getitem__(self, key: str) -> Any:
        raise RuntimeError("exploding mapping")

    def __iter__(self) -> Iterator[str]:
        raise RuntimeError("exploding mapping")

    def __len__(self) -> int:
        raise RuntimeError("exploding mapping")

    def get(self, key: str, default: Any = None) -> Any:
        raise RuntimeError("exploding mapping")


class EndlessMapping(Mapping[str, Any]):
    """Keys without end."""

    def __getitem__(self, key: str) -> Any:
        return key

    def __iter__(self) -> Iterator[str]:
        i = 0
        while True:
            yield f"k{i}"
            i += 1

    def __len__(self) -> int:
        return sys.maxsize


class UnprintableError(Exception):
    """An exception that cannot be turned into text: its ``__str__`` raises itself."""

    def __str__(self) -> str:
        raise UnprintableError()

    __repr__ = __str__


class UnprintableInt(int):
    """An int whose comparisons raise an exception that cannot be printed."""

    def _boom(self, *_: Any) -> Any:
        raise UnprintableError()

    __eq__ = __ne__ = __lt__ = __gt__ = __le__ = __ge__ = _boom  # type: ignore[assignment]
    __hash__ = int.__hash__


class UnprintableMapping(Mapping[str, Any]):
    """Arguments whose every read raises an exception that cannot be printed."""

    def __getitem__(self, key: str) -> Any:
        raise UnprintableError()

    def __iter__(self) -> Iterator[str]:
        return iter(["command"])

    def __len__(self) -> int:
        return 1

    def get(self, key: str, default: Any = None) -> Any:
        raise UnprintableError()


def _generator() -> Iterator[int]:
    yield from range(3)


def self_list(items: list[Any]) -> list[Any]:
    items.append(items)
    return items


def self_dict(items: dict[str, Any]) -> dict[str, Any]:
    items["self"] = items
    return items


HUGE_INT = 10**5000

ODD_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    # Past 64 bits, up to ~1200 digits (10**5000, beyond the int-to-str limit, is in the
    # table below: hypothesis itself cannot print it).
    st.integers(min_value=2**63, max_value=2**4000),
    st.integers(min_value=2**63, max_value=2**4000).map(lambda i: -i),
    st.sampled_from([math.nan, math.inf, -math.inf, -0.0, Ellipsis, 1j]),
    st.floats(),
    st.text(max_size=20),
    st.binary(max_size=8),
    st.sampled_from([b"\xff\xfe", b"\x00", b"\xc3("]),
    st.binary(max_size=8).map(bytearray),
    st.binary(max_size=8).map(memoryview),
    st.sets(st.integers(), max_size=3),
    st.frozensets(st.text(max_size=3), max_size=3),
    st.builds(Explosive),
    st.builds(TrickyInt, st.integers()),
    st.builds(TrickyStr, st.text(max_size=5)),
    st.builds(TrickyList, st.lists(st.integers(), max_size=2)),
    st.builds(Custom, st.integers()),
    st.builds(LyingMapping),
    st.builds(_generator),
    st.builds(object),
    st.sampled_from([len, int, Custom, print]),
    st.fractions(),
    st.decimals(),
    st.complex_numbers(),
)

HOSTILE_VALUES = st.recursive(
    ODD_LEAVES,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.tuples(children, children),
        st.dictionaries(st.text(max_size=5), children, max_size=4),
        st.dictionaries(
            st.one_of(st.integers(), st.none(), st.booleans(), st.text(max_size=3)),
            children,
            max_size=3,
        ),
        st.lists(children, max_size=2).map(self_list),
        st.dictionaries(st.text(max_size=3), children, max_size=2).map(self_dict),
        st.lists(children, max_size=3).map(collections.deque),
    ),
    max_leaves=12,
)

ARGUMENT_KEYS = st.one_of(
    st.sampled_from(
        [
            "command",
            "cmd",
            "path",
            "file_path",
            "url",
            "domain",
            "amount",
            "n",
            "tags",
            "meta",
            "key",
            "token",
            "session_id",
            "est_cost",
            "input",
        ]
    ),
    st.text(max_size=6),
)

HOSTILE_ARGUMENTS = st.one_of(
    st.dictionaries(ARGUMENT_KEYS, HOSTILE_VALUES, max_size=6),
    st.dictionaries(ARGUMENT_KEYS, HOSTILE_VALUES, max_size=3).map(self_dict),
    st.dictionaries(st.one_of(ARGUMENT_KEYS, st.integers(), st.none()), HOSTILE_VALUES, max_size=3),
    # Not a mapping at all, for an Action built directly.
    HOSTILE_VALUES,
)

SCHEMAS = st.sampled_from(
    [
        None,
        {"properties": {"command": {}}},
        {"properties": {"command": {}, "url": {}}, "additionalProperties": True},
        {"properties": 5},
        {"properties": {"path": {}}, "additionalProperties": {}},
    ]
)

HOSTILE_ACTIONS = st.builds(
    Action,
    kind=st.sampled_from([*KINDS, "effect", "weird"]),
    name=st.one_of(st.sampled_from(NAMES), st.text(max_size=10)),
    arguments=HOSTILE_ARGUMENTS,
    target=st.one_of(st.none(), st.text(max_size=5)),
    scope=st.one_of(st.none(), st.sampled_from(SCOPES)),
    description=st.one_of(st.none(), st.text(max_size=20)),
    schema=SCHEMAS,
    capabilities=st.lists(st.text(max_size=5), max_size=2).map(tuple),
)


@pytest.mark.parametrize("make_guard", GUARDS)
@pytest.mark.timeout(120)
@settings(SETTINGS, max_examples=300)
@given(action=HOSTILE_ACTIONS)
def test_hostile_arguments_never_raise_out_of_check(
    make_guard: Callable[[], Guard], action: Action
) -> None:
    assert_safe(no_raise(lambda: make_guard().check(action)))


@pytest.mark.timeout(120)
@settings(SETTINGS, max_examples=150)
@given(action=HOSTILE_ACTIONS)
def test_hostile_arguments_never_raise_under_generous_limits(action: Action) -> None:
    assert_safe(no_raise(lambda: plain_guard(GENEROUS).check(action)))


# -- hostile arguments: the nastiest cases, by hand ----------------------------------------------

MB = 1 << 20
DEEP = 10_000


def nested(wrap: Callable[[Any], Any], depth: int = DEEP, leaf: Any = 0) -> Any:
    value = leaf
    for _ in range(depth):
        value = wrap(value)
    return value


def tool(name: str, **arguments: Any) -> Callable[[], Any]:
    return lambda: Action.tool(name, arguments)


def raw(**fields: Any) -> Callable[[], Any]:
    """An Action built directly, skipping ``Action.tool``'s normalisation."""
    fields.setdefault("kind", "tool")
    fields.setdefault("name", "shell")
    return lambda: Action(**fields)


def cycle() -> dict[str, Any]:
    a: dict[str, Any] = {}
    b: list[Any] = [a]
    a["b"] = b
    return a


def built(name: str, arguments: Callable[[], dict[str, Any]]) -> Callable[[], Action]:
    """A tool call whose (large) arguments are built only when the test runs."""
    return lambda: Action.tool(name, arguments())


#: Built lazily: each factory returns the thing to pass to ``check``.
HUGE_OR_DEEP: list[Any] = [
    pytest.param(built("shell", lambda: {"v": nested(lambda v: [v])}), id="deep-list"),
    pytest.param(built("shell", lambda: {"v": nested(lambda v: {"k": v})}), id="deep-dict"),
    pytest.param(built("shell", lambda: {"v": nested(lambda v: (v,))}), id="deep-tuple"),
    pytest.param(
        built("shell", lambda: {"v": nested(lambda v: frozenset([v]))}), id="deep-frozenset"
    ),
    pytest.param(
        built("shell", lambda: {"v": nested(lambda v: collections.deque([v]))}), id="deep-deque"
    ),
    pytest.param(
        built("shell", lambda: {"command": nested(lambda v: [v], leaf="rm")}), id="deep-command"
    ),
    pytest.param(built("pay", lambda: {"amount": nested(lambda v: {"k": v})}), id="deep-amount"),
    pytest.param(
        lambda: Action(kind="tool", name="x", arguments=nested(lambda v: {"k": v})), id="deep-args"
    ),
    pytest.param(built("shell", lambda: {"command": "rm " + "x" * (5 * MB)}), id="huge-command"),
    pytest.param(built("f", lambda: {"url": "https://a.test/" + "x" * (5 * MB)}), id="huge-url"),
    pytest.param(built("f", lambda: {"domain": "d" * (5 * MB)}), id="huge-domain"),
    pytest.param(built("read_file", lambda: {"path": "/a" * (3 * MB)}), id="huge-slashy-path"),
    pytest.param(built("x", lambda: {"note": "n" * (5 * MB)}), id="huge-arg-through-cel"),
    pytest.param(built("x", lambda: {"key": SESAME + "!" * (5 * MB)}), id="huge-near-sesame"),
    pytest.param(
        # 5 MB, one byte in eight not UTF-8 (each one costs the decoder a callback).
        built("shell", lambda: {"command": b"rm " + b"xxxxxxx\xff" * (5 * MB // 8)}),
        id="huge-non-utf8-bytes",
    ),
    pytest.param(
        built("shell", lambda: {"command": [f"{i:05d}" + "y" * 495 for i in range(9_000)]}),
        id="huge-list-command",
    ),
    pytest.param(
        built("x", lambda: {f"k{i}": "v" * 500 + str(i) for i in range(9_000)}), id="wide-dict"
    ),
    pytest.param(built("x", lambda: {"tags": list(range(1_000_000))}), id="million-item-list"),
    pytest.param(built("pay", lambda: {"amount": HUGE_INT, "n": HUGE_INT}), id="huge-int"),
    pytest.param(built("x", lambda: {"v": self_list([1, 2])}), id="self-list"),
    pytest.param(built("x", lambda: {"v": self_dict({"a": 1})}), id="self-dict"),
    pytest.param(built("x", lambda: {"v": cycle()}), id="dict-list-cycle"),
    pytest.param(raw(arguments=self_dict({"command": "ls"})), id="self-arguments"),
    pytest.param(raw(arguments=EndlessMapping()), id="endless-mapping"),
]

ODD: list[Any] = [
    pytest.param(tool("pay", amount=math.nan), id="nan"),
    pytest.param(tool("pay", amount=math.inf, est_cost=-math.inf), id="inf"),
    pytest.param(tool("pay", amount=-0.0, n=-0.0), id="negative-zero"),
    pytest.param(tool("x", est_cost=math.nan), id="nan-cost"),
    pytest.param(tool("x", est_cost=HUGE_INT), id="huge-int-cost"),
    pytest.param(tool("shell", command=b"\xff\xfe"), id="bytes-command"),
    pytest.param(tool("read_file", path=b"\xff/etc/passwd"), id="bytes-path"),
    pytest.param(tool("f", url=b"http://\xff"), id="bytes-url"),
    pytest.param(tool("shell", command=bytearray(b"rm -rf /")), id="bytearray-command"),
    pytest.param(tool("shell", command=memoryview(b"rm -rf /")), id="memoryview-command"),
    pytest.param(tool("x", v={1, 2, 3}, w=frozenset({"a"})), id="sets"),
    pytest.param(tool("x", v=_generator()), id="generator"),
    pytest.param(tool("x", v=object(), w=Custom(Custom())), id="objects"),
    pytest.param(tool("x", v=Explosive()), id="explosive"),
    pytest.param(tool("shell", command=Explosive()), id="explosive-command"),
    pytest.param(tool("pay", amount=TrickyInt(500), n=TrickyInt(0)), id="tricky-int"),
    pytest.param(tool("shell", command=TrickyStr("ls"), cmd=TrickyStr("ls")), id="tricky-str"),
    pytest.param(tool("shell", command=TrickyList(["ls"])), id="tricky-list"),
    pytest.param(tool("f", url="http://[::1", domain="x"), id="bad-url"),
    pytest.param(tool("x", meta={"level": Explosive()}), id="explosive-nested"),
    pytest.param(raw(arguments={1: "a", None: "b", (1, 2): "c"}), id="non-str-keys"),
    pytest.param(raw(arguments={"command": "ls", 1: "x"}), id="mixed-keys"),
    pytest.param(raw(arguments=[1, 2, 3]), id="arguments-list"),
    pytest.param(raw(arguments=5), id="arguments-int"),
    pytest.param(raw(arguments="rm -rf /"), id="arguments-str"),
    pytest.param(raw(arguments=None), id="arguments-none"),
    pytest.param(raw(arguments=b"\xff"), id="arguments-bytes"),
    pytest.param(raw(arguments=LyingMapping()), id="lying-mapping"),
    pytest.param(raw(arguments=ExplodingMapping()), id="exploding-mapping"),
    pytest.param(raw(arguments=Explosive()), id="explosive-arguments"),
    pytest.param(raw(name=None), id="name-none"),
    pytest.param(raw(name=["shell"]), id="name-list"),
    pytest.param(raw(kind=None), id="kind-none"),
    pytest.param(raw(kind={}), id="kind-dict"),
    pytest.param(raw(scope=[]), id="scope-list"),
    pytest.param(raw(schema=5), id="schema-int"),
    pytest.param(raw(schema={"properties": Explosive()}), id="schema-explosive"),
    pytest.param(raw(capabilities=None), id="capabilities-none"),
    pytest.param(raw(target=5, description=5), id="target-description-int"),
    pytest.param(raw(context=None), id="context-none"),
    pytest.param(raw(context="acme"), id="context-str"),
    pytest.param(object, id="not-an-action-object"),
    pytest.param(lambda: None, id="not-an-action-none"),
    pytest.param(lambda: "shell", id="not-an-action-str"),
    pytest.param(lambda: {"kind": "tool", "name": "shell"}, id="not-an-action-dict"),
    pytest.param(Explosive, id="not-an-action-explosive"),
    pytest.param(tool("pay", amount=UnprintableInt(500)), id="unprintable-error-in-matching"),
    pytest.param(raw(arguments=UnprintableMapping()), id="unprintable-error-in-extraction"),
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("make_guard", GUARDS)
@pytest.mark.parametrize("make", [*HUGE_OR_DEEP, *ODD])
def test_the_nastiest_arguments_never_raise_out_of_check(
    make_guard: Callable[[], Guard], make: Callable[[], Any]
) -> None:
    assert_safe(no_raise(lambda: make_guard().check(make())))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("make", HUGE_OR_DEEP)
def test_the_nastiest_arguments_never_raise_under_generous_limits(
    make: Callable[[], Any],
) -> None:
    assert_safe(no_raise(lambda: plain_guard(GENEROUS).check(make())))


# -- 4. bounded memory ---------------------------------------------------------------------------


def size_of(root: Any) -> int:
    """Bytes held by ``root`` and everything it contains (shared parts once)."""
    seen: set[int] = set()
    total = 0
    stack = [root]
    while stack:
        value = stack.pop()
        if id(value) in seen:
            continue
        seen.add(id(value))
        total += sys.getsizeof(value)
        if isinstance(value, Action):
            stack.append(value.arguments)
        elif isinstance(value, dict):
            stack.extend(value.keys())
            stack.extend(value.values())
        elif isinstance(value, (list, tuple, set, frozenset, collections.deque)):
            stack.extend(value)
    return total


def peak_memory(run: Callable[[], object]) -> int:
    gc.collect()
    tracemalloc.start()
    try:
        run()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak


BOUNDED = [p for p in HUGE_OR_DEEP if p.id not in {"endless-mapping"}]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("policy", [POLICY, GENEROUS], ids=["default-limits", "generous-limits"])
@pytest.mark.parametrize("make", BOUNDED)
def test_huge_and_deep_arguments_are_judged_in_bounded_memory(
    policy: CompiledPolicy, make: Callable[[], Any]
) -> None:
    action = make()
    guard = Guard(policy)
    bound = 4 * size_of(action) + 50 * MB
    decisions: list[Decision] = []
    peak = peak_memory(lambda: decisions.append(guard.check(action)))
    assert_safe(decisions[0])
    assert peak < bound, f"peak {peak / MB:.1f} MB over the {bound / MB:.1f} MB bound"


@pytest.mark.timeout(60)
def test_endless_arguments_stop_at_the_item_limit() -> None:
    """Keys without end are cut off by ``limits.max_items``, not read forever."""
    action = Action(kind="tool", name="x", arguments=EndlessMapping())
    decisions: list[Decision] = []
    peak = peak_memory(lambda: decisions.append(Guard(POLICY).check(action)))
    assert decisions[0].verdict is Verdict.UNDETERMINED
    assert peak < 50 * MB


# -- 5. the async twin ----------------------------------------------------------------------------

ASYNC_CASES = [
    p
    for p in [*HUGE_OR_DEEP, *ODD]
    if p.id
    in {
        "deep-list",
        "deep-frozenset",
        "huge-command",
        "huge-arg-through-cel",
        "self-dict",
        "dict-list-cycle",
        "nan",
        "explosive",
        "tricky-int",
        "non-str-keys",
        "arguments-int",
        "exploding-mapping",
        "context-none",
        "not-an-action-object",
        "unprintable-error-in-matching",
    }
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("make_guard", GUARDS)
@pytest.mark.parametrize("make", ASYNC_CASES)
async def test_the_nastiest_arguments_never_raise_out_of_acheck(
    make_guard: Callable[[], Guard], make: Callable[[], Any]
) -> None:
    assert_safe(await no_raise_async(lambda: make_guard().acheck(make())))


@pytest.mark.timeout(120)
@settings(SETTINGS, max_examples=60)
@given(action=HOSTILE_ACTIONS)
async def test_hostile_arguments_never_raise_out_of_acheck(action: Action) -> None:
    assert_safe(await no_raise_async(lambda: busy_guard().acheck(action)))
