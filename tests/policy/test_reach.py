"""``never_allowed``: a tool is hidden only when the policy certainly refuses every
call of it. Each row: a policy, the tool and caller, the facts every call shares, and
whether the tool is never allowed."""

from __future__ import annotations

from typing import Any

import pytest

from interlock import load_policy_text
from interlock.policy.reach import never_allowed


def policy(rules: str, default: str = "deny", mode: str = "") -> Any:
    text = f"version: 1\ndefault: {default}\n{mode}rules:\n{rules}"
    return load_policy_text(text, file="reach.yaml")


DENY_DELETE = """
  - {id: d, decision: deny, reason: r, name: delete_file}
"""
ALLOW_ECHO = """
  - {id: a, decision: allow, reason: r, name: echo}
"""
ALLOW_IF_SMALL = """
  - {id: a, decision: allow, reason: r, name: pay, when: "args.amount < 10"}
"""
APPROVE_MAIL = """
  - {id: m, decision: require_approval, reason: r, params: {server: mail}}
"""
DENY_DESTRUCTIVE_GITHUB = """
  - {id: a, decision: allow, reason: r, kind: mcp}
  - {id: d, decision: deny, reason: r, params: {server: github, destructive: true}}
"""
DENY_RM_IN_SHELL = """
  - {id: a, decision: allow, reason: r, name: shell}
  - {id: d, decision: deny, reason: r, name: shell, shell: {commands: [{program: rm}]}}
"""
AGENT_ONLY = """
  - {id: a, decision: allow, reason: r, name: echo, agent: "ops-*"}
"""
SHADOW_DENY = """
  - {id: d, decision: deny, reason: r, name: echo, mode: shadow}
  - {id: a, decision: allow, reason: r, name: echo}
"""

ROWS: list[tuple[str, Any, str, str | None, dict[str, Any], bool]] = [
    ("an unconditional deny", policy(ALLOW_ECHO + DENY_DELETE), "delete_file", None, {}, True),
    ("no rule for it, default deny", policy(ALLOW_ECHO), "lookup", None, {}, True),
    ("no rule for it, default allow", policy(ALLOW_ECHO, "allow"), "lookup", None, {}, False),
    ("default approval", policy(ALLOW_ECHO, "require_approval"), "lookup", None, {}, False),
    ("an allow rule", policy(ALLOW_ECHO), "echo", None, {}, False),
    ("a conditional allow", policy(ALLOW_IF_SMALL), "pay", None, {}, False),
    (
        "an approval rule on the server",
        policy(APPROVE_MAIL),
        "send",
        None,
        {"server": "mail"},
        False,
    ),
    (
        "an approval rule on another server",
        policy(APPROVE_MAIL),
        "send",
        None,
        {"server": "files"},
        True,
    ),
    (
        "a deny on known facts that hold",
        policy(DENY_DESTRUCTIVE_GITHUB),
        "close_issue",
        None,
        {"server": "github", "destructive": True},
        True,
    ),
    (
        "a deny on known facts that do not hold",
        policy(DENY_DESTRUCTIVE_GITHUB),
        "list_issues",
        None,
        {"server": "github", "destructive": False},
        False,
    ),
    ("a deny on facts not known", policy(DENY_DESTRUCTIVE_GITHUB), "close_issue", None, {}, False),
    ("a deny on what the command runs", policy(DENY_RM_IN_SHELL), "shell", None, {}, False),
    ("an allow for other agents", policy(AGENT_ONLY), "echo", "support-bot", {}, True),
    ("an allow for this agent", policy(AGENT_ONLY), "echo", "ops-1", {}, False),
    ("an allow for agents, no agent", policy(AGENT_ONLY), "echo", None, {}, True),
    ("a shadow deny", policy(SHADOW_DENY), "echo", None, {}, False),
    (
        "a shadow-mode policy",
        policy(DENY_DELETE, mode="mode: shadow\n"),
        "delete_file",
        None,
        {},
        False,
    ),
]


@pytest.mark.parametrize(
    ("label", "compiled", "name", "agent", "known", "expected"), ROWS, ids=[r[0] for r in ROWS]
)
def test_never_allowed(
    label: str, compiled: Any, name: str, agent: str | None, known: dict[str, Any], expected: bool
) -> None:
    assert never_allowed(compiled, "mcp", name, "default", agent, known) is expected
