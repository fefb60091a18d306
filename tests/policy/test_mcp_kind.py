"""MCP tools are ``kind: mcp`` actions, and a ``kind: tool`` rule applies to them too
(docs/adr/0017): a deny rule written for tools cannot be walked around by reaching
the same tool through MCP. Their trusted facts — the upstream server and the tool's
annotation hints — are parameters a rule matches, and no argument can forge them."""

from __future__ import annotations

from typing import Any

import pytest
from mcp_types import Tool, ToolAnnotations

from interlock import Action, Guard, Verdict, load_policy_text
from interlock.adapters.mcp import mcp_capabilities, tool_action

POLICY = load_policy_text(
    """
version: 1
default: deny
rules:
  - id: tools-ok
    decision: allow
    reason: tools are fine
    kind: tool
    name: "*"
  - id: no-shred
    decision: deny
    reason: no shredding, however it is reached
    kind: tool
    name: shred
  - id: mcp-only-audit
    decision: require_approval
    reason: MCP deletes need a human
    kind: mcp
    name: delete_*
  - id: destructive-github
    decision: deny
    reason: nothing destructive on github
    params:
      server: github
      destructive: true
  - id: in-process-only
    decision: deny
    reason: only in-process callers may reach the vault
    name: vault_read
    when: "action.kind != 'tool'"
budgets:
  - id: tool-calls
    limit: 2
    unit: tokens
    scope: tenant
    kind: tool
    default_estimate: 1
    max_overage: 0
""",
    file="mcp-kind.yaml",
)


def judge(action: Action) -> Any:
    return Guard(POLICY).check(action)


def mcp(name: str, args: dict[str, Any] | None = None, **kw: Any) -> Action:
    return tool_action(name, args or {}, **kw)


def read_only_tool(name: str) -> Tool:
    return Tool(
        name=name,
        input_schema={"type": "object"},
        annotations=ToolAnnotations(read_only_hint=True),
    )


def test_a_kind_tool_deny_rule_denies_the_mcp_call() -> None:
    assert judge(Action.tool("shred", {})).verdict is Verdict.DENY
    decision = judge(mcp("shred"))
    assert decision.verdict is Verdict.DENY
    assert decision.rule_ids == ("no-shred",)


def test_a_kind_tool_allow_rule_allows_the_mcp_call() -> None:
    decision = judge(mcp("search", tool=read_only_tool("search")))
    assert (decision.verdict, decision.rule_ids) == (Verdict.ALLOW, ("tools-ok",))


def test_a_kind_mcp_rule_never_matches_an_in_process_tool() -> None:
    assert judge(Action.tool("delete_row", {})).verdict is Verdict.ALLOW
    decision = judge(mcp("delete_row"))
    assert (decision.verdict, decision.rule_ids) == (Verdict.REQUIRE_APPROVAL, ("mcp-only-audit",))


def test_cel_tells_the_two_apart() -> None:
    assert judge(Action.tool("vault_read", {})).verdict is Verdict.ALLOW
    assert judge(mcp("vault_read")).verdict is Verdict.DENY


def test_the_server_and_annotations_are_facts() -> None:
    unknown = mcp("issue_close", server="github")  # no definition: destructive by default
    assert judge(unknown).rule_ids == ("destructive-github",)
    safe = mcp("issue_list", server="github", tool=read_only_tool("issue_list"))
    assert judge(safe).verdict is Verdict.ALLOW
    elsewhere = mcp("issue_close", server="gitlab")
    assert judge(elsewhere).verdict is Verdict.ALLOW


@pytest.mark.parametrize(
    "forged",
    [
        {"server": "gitlab", "destructive": False},
        {"read_only": True, "destructive": False, "target": "mcp:gitlab"},
        {"params": {"server": "gitlab"}},
    ],
)
def test_arguments_cannot_forge_the_facts(forged: dict[str, Any]) -> None:
    decision = judge(mcp("issue_close", forged, server="github"))
    assert decision.verdict is Verdict.DENY
    assert decision.rule_ids == ("destructive-github",)


def test_an_in_process_tool_has_no_mcp_facts() -> None:
    # The same name and a forged argument: not an MCP action, so the rule cannot match.
    decision = judge(Action.tool("issue_close", {"server": "github", "destructive": True}))
    assert decision.verdict is Verdict.ALLOW


@pytest.mark.parametrize(
    ("hints", "expected"),
    [
        (None, {"mcp:destructive", "mcp:open-world"}),
        ({}, {"mcp:destructive", "mcp:open-world"}),
        ({"read_only_hint": True}, {"mcp:read-only", "mcp:idempotent", "mcp:open-world"}),
        (
            {"read_only_hint": True, "destructive_hint": True, "open_world_hint": False},
            {"mcp:read-only", "mcp:idempotent"},
        ),
        (
            {"destructive_hint": False, "idempotent_hint": True},
            {"mcp:idempotent", "mcp:open-world"},
        ),
        (
            {"read_only_hint": False, "destructive_hint": None},
            {"mcp:destructive", "mcp:open-world"},
        ),
    ],
)
def test_hints_take_the_protocol_defaults(hints: dict[str, Any] | None, expected: set[str]) -> None:
    tool = None
    if hints is not None:
        tool = Tool(name="t", input_schema={"type": "object"}, annotations=ToolAnnotations(**hints))
    assert set(mcp_capabilities(tool)) == expected


def test_a_kind_tool_budget_counts_mcp_calls() -> None:
    guard = Guard(POLICY)
    assert guard.check(Action.tool("search", {})).verdict is Verdict.ALLOW
    assert guard.check(mcp("search")).verdict is Verdict.ALLOW
    third = guard.check(mcp("search"))
    assert third.verdict is Verdict.DENY
    assert "tool-calls" in (third.reason or "")


def test_a_refusal_names_an_mcp_tool() -> None:
    from interlock.adapters.base import verdict_outcome

    action = mcp("shred")
    assert "denied MCP tool 'shred'" in (verdict_outcome(judge(action), action).message or "")


def test_the_facts_hold_on_every_call_of_a_shape() -> None:
    # a call's shape is planned once and its facts then built by a generated function:
    # the trusted MCP parameters must be there on the later calls too
    guard = Guard(POLICY)
    for _ in range(4):
        decision = guard.check(mcp("issue_close", {"id": 7}, server="github"))
        assert (decision.verdict, decision.rule_ids) == (Verdict.DENY, ("destructive-github",))
