"""Candidate rules narrowed by the check's tenant and agent decide exactly as all of them.

A candidate set (below the prefilter's threshold) leaves out, per (tenant, agent), the
rules whose ``agent`` / ``tenant`` globs or whose ``when:`` conjuncts on
``context.tenant`` / ``context.agent`` are false for that pair
(``CandidateSet.narrowed``). The property below judges random policies and calls both
ways — narrowed, and with every candidate tested — and requires the same verdict, rule
ids, reason, cause and shadow verdict. The other tests pin where narrowing applies
and where it must not (a ``when:`` that reads ``params`` or ``shell``, arguments that
are not a dict, a tenant that is not text), and the other memos of the hot path.

``INTERLOCK_PROPERTY_EXAMPLES`` scales the example count.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from interlock import Action, Context, Decision
from interlock.policy import compile_policy, evaluate
from interlock.policy import compiled as compiled_module
from interlock.policy.celpartial import parse
from interlock.policy.engine import facts_for
from interlock.policy.extract import extract

EXAMPLES = int(os.environ.get("INTERLOCK_PROPERTY_EXAMPLES", "60"))

SETTINGS = settings(
    deadline=None,
    max_examples=EXAMPLES,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

#: ``when:`` texts: gates on the tenant and the agent alone, with other parts, and the
#: kinds that must not narrow (reading ``params`` or ``shell``, errors, null agents).
WHENS = (
    "context.tenant == 'acme'",
    "context.agent == 'bot'",
    "!(context.agent == 'ops')",
    "context.agent == null",
    "context.tenant in ['acme', 'globex']",
    "context.tenant.startsWith('ac')",
    "(context.tenant == 'acme' || context.tenant == 'globex') && args.n > 10",
    "has(args.q) && context.tenant == 'acme'",
    "(has(args.q) && args.q == 'alpha') && (context.agent == 'bot')",
    "args.q.startsWith('al') && context.agent == 'bot'",  # errors when q is not text
    "args.n > 10 && context.tenant == 'globex'",  # errors when n is not a number
    "context.tenant == 'acme' && params.path.startsWith('/tmp')",
    "context.tenant == 'acme' && shell.programs.exists(p, p == 'ls')",
    "shell.complete && context.tenant == 'acme'",  # raises on a command it cannot read
    "context.tenant == 'acme' && size(args) > 1",
    "context.agent_type == 'release' && context.tenant == 'acme'",
    "args.q",  # not a boolean
    "context.tenant == 'acme' && args.q",
)

TENANTS = ("default", "acme", "globex", "ac", "ACME")
AGENTS = (None, "bot", "Bot", "ops", "b")


@st.composite
def rule_bodies(draw: st.DrawFn) -> dict[str, Any]:
    body: dict[str, Any] = {
        "decision": draw(st.sampled_from(["allow", "allow", "deny", "require_approval"]))
    }
    if draw(st.integers(0, 3)):
        body["when"] = draw(st.sampled_from(WHENS))
    shape = draw(st.integers(0, 7))
    if shape == 0:
        body["tenant"] = draw(st.sampled_from(["acme", "ac*", ["acme", "globex"]]))
    elif shape == 1:
        body["agent"] = draw(st.sampled_from(["bot", "b*", "Bot"]))
    elif shape == 2:
        body["mode"] = "shadow"
    elif shape == 3:
        body["params"] = {
            draw(st.sampled_from(["args.q", "args.n", "path"])): draw(
                st.sampled_from(["alpha", "al*", {"gt": 5}, {"exists": True}])
            )
        }
    if draw(st.integers(0, 2)) == 0:
        body["name"] = draw(st.sampled_from(["search", "shell", "read_file", "se*"]))
    return body


@st.composite
def policies(draw: st.DrawFn) -> dict[str, Any]:
    stock = draw(st.lists(rule_bodies(), min_size=2, max_size=16))
    count = draw(st.integers(2, 20))  # under the prefilter's threshold: narrowed
    picks = draw(st.lists(st.integers(0, len(stock) - 1), min_size=count, max_size=count))
    data: dict[str, Any] = {
        "version": 1,
        "default": draw(st.sampled_from(["allow", "deny", "require_approval"])),
        "rules": [
            {"id": f"r{i:03d}", "reason": f"because r{i:03d}", **stock[pick]}
            for i, pick in enumerate(picks)
        ],
    }
    if draw(st.integers(0, 9)) == 0:
        data["mode"] = "shadow"
    return data


_VALUES = st.one_of(
    st.sampled_from(["alpha", "al", "beta", "", "/tmp/x"]),
    st.integers(-1, 20),
    st.sampled_from([None, 1.5, True, ["alpha"]]),
)


@st.composite
def actions(draw: st.DrawFn) -> Action:
    name = draw(st.sampled_from(["search", "shell", "read_file", "send"]))
    arguments = draw(
        st.fixed_dictionaries(
            {},
            optional={
                "q": _VALUES,
                "n": _VALUES,
                "path": st.sampled_from(["/tmp/a", "/etc/passwd", "/tmp/*.txt"]),
            },
        )
    )
    if name == "shell" and draw(st.booleans()):
        arguments["command"] = draw(st.sampled_from(["ls", "cat /tmp/a", 'eval "$X"']))
    return Action(
        kind="tool",
        name=name,
        arguments=arguments,
        context=Context(
            tenant=draw(st.sampled_from(TENANTS)),
            agent=draw(st.sampled_from(AGENTS)),
            agent_type=draw(st.sampled_from([None, "release"])),
        ),
    )


def essence(decision: Decision) -> tuple[Any, ...]:
    shadow, cause = decision.shadow, decision.cause
    return (
        decision.verdict,
        decision.rule_ids,
        decision.reason,
        None if cause is None else (type(cause).__name__, str(cause)),
        None if shadow is None else (shadow.verdict, shadow.rule_ids, shadow.reason),
    )


@contextmanager
def narrowing_off() -> Iterator[None]:
    patch = pytest.MonkeyPatch()
    try:
        patch.setattr(compiled_module, "NARROW_BY_CONTEXT", False)
        yield
    finally:
        patch.undo()


@SETTINGS
@given(data=policies(), calls=st.lists(actions(), min_size=1, max_size=8))
def test_narrowed_candidates_decide_as_every_candidate(
    data: dict[str, Any], calls: list[Action]
) -> None:
    narrowed = compile_policy(data)
    with narrowing_off():
        plain = compile_policy(data)
        expected = [essence(evaluate(call, plain)) for call in calls]
    for call, want in zip(calls, expected, strict=True):
        got = essence(evaluate(call, narrowed))
        event(f"verdict: {want[0].value}")
        assert got == want


# -- where narrowing applies -------------------------------------------------------------

POLICY = {
    "version": 1,
    "default": "deny",
    "rules": [
        {
            "id": "acme-ok",
            "decision": "allow",
            "name": "search",
            "when": "context.tenant == 'acme'",
        },
        {"id": "globex-ok", "decision": "allow", "name": "search", "tenant": "globex"},
        {"id": "bots-ok", "decision": "allow", "name": "search", "agent": "bot*"},
        {
            "id": "acme-tmp",
            "decision": "allow",
            "name": "search",
            "when": "context.tenant == 'acme' && params.path.startsWith('/tmp')",
        },
        {"id": "anyone", "decision": "require_approval", "name": "search", "when": "args.n > 3"},
    ],
}


for _rule in POLICY["rules"]:  # type: ignore[attr-defined]
    _rule["reason"] = f"because {_rule['id']}"


def _reasoned(rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"reason": f"because {rule['id']}", **rule} for rule in rules]


def _ids(tiers: Any) -> set[str]:
    return {rule.id for _, rules in tiers for rule in rules}


def test_a_rule_the_tenant_or_agent_rules_out_is_left_out() -> None:
    policy = compile_policy(POLICY)
    candidates = policy.candidates("tool", "search", "default")
    assert candidates.gated
    enforced, shadow = candidates.narrowed("globex", None)
    # acme-tmp reads params: a pattern path would make it raise, so it stays
    assert _ids(enforced) == {"globex-ok", "acme-tmp", "anyone"}
    assert shadow is None
    enforced, _ = candidates.narrowed("acme", "bot-7")
    assert _ids(enforced) == {"acme-ok", "bots-ok", "acme-tmp", "anyone"}
    assert candidates.narrowed("acme", "bot-7") is candidates.narrowed("acme", "bot-7")


def test_narrowing_is_used_only_for_dict_arguments_and_text_tenants() -> None:
    policy = compile_policy(POLICY)
    candidates = policy.candidates("tool", "search", "default")
    usual = Action.tool("search", {"n": 1}, context=Context(tenant="globex"))
    assert candidates.narrowed_for(facts_for(usual, policy)) is not None
    proxy = Action(
        kind="tool",
        name="search",
        arguments=MappingProxyType({"n": 1}),
        context=Context(tenant="globex"),
    )
    assert candidates.narrowed_for(facts_for(proxy, policy)) is None
    with pytest.raises(TypeError):  # refused where it is made ...
        Context(tenant=7)  # type: ignore[arg-type]
    forced = Context(tenant="globex")  # ... and still not narrowed when forced in
    object.__setattr__(forced, "tenant", 7)
    odd = Action.tool("search", {"n": 1}, context=forced)
    assert candidates.narrowed_for(facts_for(odd, policy)) is None
    # every way, the same decision
    assert essence(evaluate(proxy, policy)) == essence(evaluate(usual, policy))


def test_a_when_reading_shell_or_a_context_field_beyond_tenant_and_agent_has_no_gate() -> None:
    rules = [
        {"id": "a", "decision": "deny", "when": "context.tenant == 'x' && shell.complete"},
        {"id": "b", "decision": "deny", "when": "context.agent_type == 'release'"},
        {"id": "c", "decision": "deny", "when": "context.tenant == 'x' || args.n > 1"},
        {"id": "d", "decision": "deny", "when": "context.tenant == 'x' && args.n > 1"},
    ]
    policy = compile_policy({"version": 1, "rules": _reasoned(rules)})
    gates = {rule.id: rule.gate for rule in policy.rules}
    assert gates["a"] is None and gates["b"] is None and gates["c"] is None
    assert gates["d"] is not None and not gates["d"]("y", None) and gates["d"]("x", None)


def test_nested_conjunctions_are_flattened_in_order() -> None:
    node = parse("(has(args.a) && args.a > 1) && (context.tenant == 'x' && args.b)")
    assert [type(part).__name__ for part in node.parts] == [  # type: ignore[union-attr]
        "_Has",
        "_Compare",
        "_Compare",
        "_Flag",
    ]


# -- the other memos of the hot path -----------------------------------------------------


def test_the_prefilter_tiers_of_a_kept_set_are_remembered_and_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rules = [
        {"id": f"q{i:02d}", "decision": "deny", "params": {"args.q": f"v{i}"}} for i in range(30)
    ]
    policy = compile_policy({"version": 1, "default": "allow", "rules": _reasoned(rules)})
    filter_ = policy.candidates("tool", "t", "default").enforced_filter
    assert filter_ is not None
    monkeypatch.setattr(compiled_module, "_KEPT_LIMIT", 2)
    seen = []
    for value in ("v1", "v2", "v3", "v1", "none"):
        facts = facts_for(Action.tool("t", {"q": value}), policy)
        tiers = filter_.tiers(facts)
        assert tiers == filter_._tiers_of(frozenset(filter_.prefilter.keep(facts)))
        seen.append(_ids(tiers))
        assert len(filter_._kept) <= 2
    assert seen == [{"q01"}, {"q02"}, {"q03"}, {"q01"}, set()]


def test_arguments_of_another_mapping_are_read_as_a_dict_of_them() -> None:
    arguments = {"path": "/tmp/a", "url": "https://alpha.example/x", "cmd": None, "host": None}
    common = {
        "kind": "tool",
        "name": "fetch_file",
        "pinned_scope": None,
        "description": None,
        "context": Context(),
        "target": None,
        "capabilities": (),
        "default_scope": "data",
        "max_param_chars": 10_000,
    }
    plain = extract(arguments=arguments, **common)
    proxied = extract(arguments=MappingProxyType(arguments), **common)
    assert (plain.scope, plain.scopes, plain.params) == (
        proxied.scope,
        proxied.scopes,
        proxied.params,
    )
    assert plain.scopes == ("network", "filesystem")
