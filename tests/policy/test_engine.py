"""The pure engine: matching, tiers, certainty under errors, shadow mode."""

from __future__ import annotations

from typing import Any

import pytest

from interlock import Action, Context, Verdict, load_policy_text
from interlock.errors import EvaluationError
from interlock.policy import compile_policy, evaluate


def policy(*rules: dict[str, Any], **top: Any) -> Any:
    return compile_policy({"version": 1, "rules": list(rules), **top})


def rule(rule_id: str, decision: str, **fields: Any) -> dict[str, Any]:
    return {"id": rule_id, "decision": decision, "reason": f"because {rule_id}", **fields}


def test_every_matching_rule_of_the_deciding_tier_is_named_in_sorted_order() -> None:
    p = policy(rule("z-deny", "deny"), rule("a-deny", "deny"), rule("allow", "allow"))
    decision = evaluate(Action.tool("x"), p)
    assert decision.verdict is Verdict.DENY
    assert decision.rule_ids == ("a-deny", "z-deny")
    assert decision.reason == "because a-deny; because z-deny"


@pytest.mark.parametrize(
    ("context", "verdict"),
    [
        (Context(tenant="acme", agent="ops-bot"), Verdict.ALLOW),
        (Context(tenant="acme", agent="sales-bot"), Verdict.DENY),
        (Context(tenant="other", agent="ops-bot"), Verdict.DENY),
        (Context(tenant="acme"), Verdict.DENY),  # no agent never matches an agent glob
    ],
)
def test_agent_and_tenant_globs_match_the_trusted_context(
    context: Context, verdict: Verdict
) -> None:
    p = policy(rule("ops", "allow", agent="ops-*", tenant=["acme", "acme-*"]))
    assert evaluate(Action.tool("x", context=context), p).verdict is verdict


@pytest.mark.parametrize(
    ("params", "arguments", "verdict"),
    [
        ({"args.amount": {"gt": 10, "lte": 20}}, {"amount": 15}, Verdict.ALLOW),
        ({"args.amount": {"gt": 10, "lte": 20}}, {"amount": 25}, Verdict.DENY),
        ({"args.amount": {"gt": 10}}, {}, Verdict.DENY),  # absent: no match
        ({"args.amount": {"gt": 10}}, {"amount": "15"}, Verdict.UNDETERMINED),  # text vs number
        ({"args.amount": {"gt": 10}}, {"amount": float("nan")}, Verdict.UNDETERMINED),
        ({"args.amount": {"gt": 10}}, {"amount": True}, Verdict.UNDETERMINED),
        ({"args.to": {"in": ["a@x.io", "b@x.io"]}}, {"to": "a@x.io"}, Verdict.ALLOW),
        ({"args.to": {"not_in": ["a@x.io"]}}, {"to": "a@x.io"}, Verdict.DENY),
        ({"args.flag": True}, {"flag": True}, Verdict.ALLOW),
        ({"args.flag": True}, {"flag": 1}, Verdict.DENY),  # 1 is not True
        ({"args.n": 1}, {"n": 1.0}, Verdict.ALLOW),  # numbers compare as numbers
        ({"args.meta.owner": "team-*"}, {"meta": {"owner": "team-a"}}, Verdict.ALLOW),
        ({"args.items.0": "x*"}, {"items": ["xy"]}, Verdict.ALLOW),
        ({"args.to": "*@x.io"}, {"to": ["a@x.io"]}, Verdict.UNDETERMINED),  # a glob on a list
        ({"args.dry_run": {"exists": False}}, {}, Verdict.ALLOW),
        ({"args.dry_run": {"exists": True}}, {}, Verdict.DENY),
        ({"command": {"regex": "^git (status|log)"}}, {"command": "git log -1"}, Verdict.ALLOW),
        ({"command": {"not_regex": "[;&|]"}}, {"command": "ls; rm -rf /"}, Verdict.DENY),
        ({"command": {"not_glob": "sudo *"}}, {"command": "ls"}, Verdict.ALLOW),
    ],
)
def test_parameter_conditions(
    params: dict[str, Any], arguments: dict[str, Any], verdict: Verdict
) -> None:
    p = policy(rule("r", "allow", params=params))
    assert evaluate(Action.tool("x", arguments), p).verdict is verdict


def test_globs_are_case_sensitive_and_star_crosses_slashes() -> None:
    p = policy(rule("r", "allow", params={"path": "/workspace/*"}))
    assert evaluate(Action.tool("x", {"path": "/workspace/a/b/c"}), p).allowed
    assert not evaluate(Action.tool("x", {"path": "/Workspace/a"}), p).allowed


@pytest.mark.parametrize(
    ("when", "arguments", "verdict"),
    [
        ("args.amount > 100", {"amount": 150}, Verdict.ALLOW),
        ("args.amount > 100", {"amount": 50}, Verdict.DENY),
        ("args.amount > 100", {}, Verdict.UNDETERMINED),  # no such key: cannot tell
        ("has(args.amount) && args.amount > 100", {}, Verdict.DENY),
        ("args.amount", {"amount": 5}, Verdict.UNDETERMINED),  # not a boolean
        ("context.tenant == 'acme' && action.scope == 'shell'", {}, Verdict.ALLOW),
        ("params.command.startsWith('git ')", {"command": "git status"}, Verdict.ALLOW),
        ("args.to.all(x, x.endsWith('@x.io'))", {"to": ["a@x.io", "b@x.io"]}, Verdict.ALLOW),
        ("args.to.all(x, x.endsWith('@x.io'))", {"to": ["a@x.io", "b@y.io"]}, Verdict.DENY),
    ],
)
def test_cel_when(when: str, arguments: dict[str, Any], verdict: Verdict) -> None:
    p = policy(rule("r", "allow", when=when))
    action = Action.tool("shell_run", arguments, context=Context(tenant="acme"))
    decision = evaluate(action, p)
    assert decision.verdict is verdict, decision.reason
    if verdict is Verdict.UNDETERMINED:
        assert isinstance(decision.cause, EvaluationError)
        assert decision.cause.rule_id == "r"


def test_a_matching_deny_is_certain_even_when_another_rule_errors() -> None:
    p = policy(rule("broken", "deny", when="args.missing > 1"), rule("deny", "deny"))
    assert evaluate(Action.tool("x"), p).rule_ids == ("deny",)


def test_an_error_in_a_stricter_tier_is_undetermined_even_if_allow_matches() -> None:
    p = policy(rule("broken", "deny", when="args.missing > 1"), rule("ok", "allow"))
    decision = evaluate(Action.tool("x"), p)
    assert decision.verdict is Verdict.UNDETERMINED
    assert decision.rule_ids == ("broken",)


def test_an_erroring_allow_rule_is_harmless_when_the_default_is_allow() -> None:
    p = policy(rule("broken", "allow", when="args.missing > 1"), default="allow")
    assert evaluate(Action.tool("x"), p).verdict is Verdict.ALLOW
    strict = policy(rule("broken", "allow", when="args.missing > 1"))
    assert evaluate(Action.tool("x"), strict).verdict is Verdict.UNDETERMINED


def test_kind_and_name_narrow_a_rule() -> None:
    p = policy(rule("models", "allow", kind="llm", name=["gpt-*", "claude-*"]))
    assert evaluate(Action.llm("gpt-5"), p).allowed
    assert not evaluate(Action.llm("llama"), p).allowed
    assert not evaluate(Action.tool("gpt-5"), p).allowed


def test_require_approval_carries_the_approval_link_template() -> None:
    p = policy(rule("big", "require_approval"), approvals={"url": "https://il.example/a/{id}"})
    decision = evaluate(Action.tool("x"), p)
    assert decision.verdict is Verdict.REQUIRE_APPROVAL
    assert decision.approval is not None
    assert decision.approval.url == "https://il.example/a/pending"


class TestShadowMode:
    def test_a_shadow_rule_is_recorded_but_not_enforced(self) -> None:
        p = policy(rule("trial-deny", "deny", mode="shadow"), rule("ok", "allow"))
        decision = evaluate(Action.tool("x"), p)
        assert decision.verdict is Verdict.ALLOW
        assert decision.rule_ids == ("ok",)
        assert decision.shadow is not None
        assert decision.shadow.verdict is Verdict.DENY
        assert decision.shadow.rule_ids == ("trial-deny",)

    def test_an_agreeing_shadow_rule_is_still_named_in_the_shadow_note(self) -> None:
        p = policy(rule("trial", "allow", mode="shadow"), rule("ok", "allow"))
        decision = evaluate(Action.tool("x"), p)
        assert decision.shadow is not None  # would name both rules
        assert decision.shadow.rule_ids == ("ok", "trial")
        nothing = evaluate(Action.tool("y", {"command": "z"}), policy(rule("ok", "allow")))
        assert nothing.shadow is None

    def test_a_shadow_policy_lets_everything_run_and_says_what_it_would_do(self) -> None:
        p = policy(rule("no", "deny", name="rm"), mode="shadow")
        denied = evaluate(Action.tool("rm"), p)
        assert denied.verdict is Verdict.ALLOW
        assert denied.shadow is not None and denied.shadow.verdict is Verdict.DENY
        assert denied.reason.startswith("shadow mode: would deny")
        defaulted = evaluate(Action.tool("other"), p)
        assert defaulted.verdict is Verdict.ALLOW
        assert defaulted.shadow is not None and defaulted.shadow.verdict is Verdict.DENY

    def test_a_shadow_rule_error_does_not_block(self) -> None:
        p = policy(rule("trial", "deny", mode="shadow", when="args.nope > 1"), rule("ok", "allow"))
        decision = evaluate(Action.tool("x"), p)
        assert decision.verdict is Verdict.ALLOW
        assert decision.shadow is not None and decision.shadow.verdict is Verdict.UNDETERMINED

    def test_conflicting_aliases_are_still_refused_in_shadow_mode(self) -> None:
        p = policy(mode="shadow", default="allow")
        decision = evaluate(Action.tool("x", {"command": "ls", "cmd": "rm"}), p)
        assert decision.verdict is Verdict.DENY


def test_the_candidate_index_is_memoised_per_kind_name_and_scope() -> None:
    p = load_policy_text(
        "version: 1\nrules:\n"
        "  - {id: a, decision: allow, reason: a, name: shell}\n"
        "  - {id: b, decision: deny, reason: b, name: 'sh*'}\n"
        "  - {id: c, decision: deny, reason: c, kind: llm}\n"
        "  - {id: d, decision: deny, reason: d, scope: network}\n"
    )

    def ids(kind: str, name: str, scope: str) -> dict[str, list[str]]:
        tiers = p.candidates(kind, name, scope).enforced
        return {verdict.value: [rule.id for rule in rules] for verdict, rules in tiers}

    first = p.candidates("tool", "shell", "shell")
    assert p.candidates("tool", "shell", "shell") is first
    assert ids("tool", "shell", "shell") == {"deny": ["b"], "allow": ["a"]}
    assert ids("tool", "shell", "network") == {"deny": ["b", "d"], "allow": ["a"]}
    assert ids("llm", "gpt", "llm") == {"deny": ["c"]}


@pytest.mark.parametrize("order", ["amount-first", "currency-first"])
def test_a_false_condition_decides_before_one_that_cannot_be_evaluated(order: str) -> None:
    conditions = {"args.amount": {"gt": 100}, "args.currency": {"in": ["EUR"]}}
    if order == "currency-first":
        conditions = dict(reversed(list(conditions.items())))
    policy = compile_policy(
        {
            "version": 1,
            "default": "allow",
            "rules": [
                {
                    "id": "big-eur",
                    "decision": "deny",
                    "reason": "x",
                    "name": "pay",
                    "params": conditions,
                },
            ],
        }
    )
    usd = evaluate(Action.tool("pay", {"amount": "lots", "currency": "USD"}), policy)
    assert (usd.verdict, usd.rule_ids) == (Verdict.ALLOW, ())  # USD: the rule cannot match
    eur = evaluate(Action.tool("pay", {"amount": "lots", "currency": "EUR"}), policy)
    assert (eur.verdict, eur.rule_ids) == (Verdict.UNDETERMINED, ("big-eur",))
