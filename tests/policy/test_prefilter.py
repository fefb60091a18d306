"""The prefilter (one pass per parameter over the rules' sets and literals) decides
exactly what testing every rule one by one decides: same verdict, same rule ids, same
reason, same shadow verdict — on random policies, random calls, and many rules."""

from __future__ import annotations

import fnmatch
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_properties import ACTIONS, JUDGED_ACTIONS, SETTINGS, essence, policies

from interlock import Action, Context, Verdict
from interlock.policy import compile_policy, evaluate
from interlock.policy import compiled as compiled_module
from interlock.policy.engine import facts_for
from interlock.policy.matchers import compile_re2_set, glob_to_re2


def _decide_both(
    data: dict[str, Any], action: Action, monkeypatch: pytest.MonkeyPatch
) -> tuple[Any, Any]:
    with monkeypatch.context() as patch:
        patch.setattr(compiled_module, "PREFILTER_MIN_RULES", 1)
        filtered = evaluate(action, compile_policy(data))
    with monkeypatch.context() as patch:
        patch.setattr(compiled_module, "PREFILTER_MIN_RULES", 10**9)
        plain = evaluate(action, compile_policy(data))
    return filtered, plain


@st.composite
def many_rules(draw: st.DrawFn) -> dict[str, Any]:
    """A policy whose rules are repeated under new ids: many candidates per tool."""
    data = draw(policies(conditioned=draw(st.booleans())))
    copies = draw(st.integers(1, 6))
    rules = [
        {**rule, "id": f"{rule['id']}-{copy}"} for copy in range(copies) for rule in data["rules"]
    ]
    return {**data, "rules": rules}


@settings(SETTINGS, max_examples=400)
@given(data=many_rules(), action=st.one_of(ACTIONS, JUDGED_ACTIONS))
def test_the_prefilter_decides_as_every_rule_tested_one_by_one(
    data: dict[str, Any], action: Action
) -> None:
    monkeypatch = pytest.MonkeyPatch()
    try:
        filtered, plain = _decide_both(data, action, monkeypatch)
    finally:
        monkeypatch.undo()
    assert essence(filtered) == essence(plain)


def _domain_policy(count: int) -> dict[str, Any]:
    rules = [
        {
            "id": f"host-{i:05d}",
            "decision": "allow",
            "reason": f"host {i}",
            "scope": "network",
            "params": {"domain": f"h{i}.example.com"},
        }
        for i in range(count)
    ]
    rules += [
        {
            "id": f"path-{i:05d}",
            "decision": "deny",
            "reason": f"path {i}",
            "scope": "network",
            "params": {"url": {"regex": f"/secret{i}(/|$)"}},
        }
        for i in range(count)
    ]
    rules.append(
        {
            "id": "tenant-glob",
            "decision": "require_approval",
            "reason": "a glob",
            "scope": "network",
            "params": {"domain": "*.internal.example.com"},
        }
    )
    return {"version": 1, "default": "deny", "rules": rules}


@pytest.mark.parametrize(
    ("url", "verdict", "rule_ids"),
    [
        ("https://h42.example.com/x", Verdict.ALLOW, ("host-00042",)),
        ("https://h42.example.com/secret7/a", Verdict.DENY, ("path-00007",)),
        ("https://x.internal.example.com/", Verdict.REQUIRE_APPROVAL, ("tenant-glob",)),
        ("https://nobody.example.com/", Verdict.DENY, ()),
    ],
)
def test_a_large_policy_is_judged_through_the_prefilter(
    url: str, verdict: Verdict, rule_ids: tuple[str, ...]
) -> None:
    policy = compile_policy(_domain_policy(1000))
    action = Action.tool("fetch", {"url": url}, context=Context())
    candidates = policy.candidates("tool", "fetch", "network")
    assert candidates.enforced_filter is not None  # 2,001 rules: the prefilter is on
    kept = candidates.enforced_filter.tiers(facts_for(action, policy))
    assert sum(len(rules) for _, rules in kept) < 10  # not 2,001 rules tested
    decision = evaluate(action, policy)
    assert (decision.verdict, decision.rule_ids) == (verdict, rule_ids)


_GLOB_CHARS = st.sampled_from(list("ab/.*?[]!-x\\^é"))


@settings(max_examples=1500, deadline=None)
@given(
    glob=st.text(_GLOB_CHARS, max_size=8),
    text=st.text(st.sampled_from(list("ab/.x-!]^\\\né")), max_size=8),
)
def test_a_glob_in_re2_matches_what_fnmatch_matches(glob: str, text: str) -> None:
    matcher = compile_re2_set([glob_to_re2(glob)], anchored=True)
    assert bool(matcher.match(text)) is fnmatch.fnmatchcase(text, glob)
