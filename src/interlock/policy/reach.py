"""Could a call of this tool ever run? A static reading of the policy, used to leave
out of a tool list the tools an agent would only ever be refused.

The answer errs towards *may run*: a tool is reported as never allowed only when
the policy certainly refuses every call of it, whatever its arguments — an
enforced deny rule applies to every call of it, or the default is not ``allow`` and
no enforced allow or approval rule could apply to any. What is known of every call
before any is made (``known``: the parameters a tool's definition fixes, such as an
MCP tool's ``server`` and annotation hints) is tested; a condition on anything else
counts as possibly true. Hiding is a convenience for the agent, never the guard:
every call is still judged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from interlock.core.decision import Verdict
from interlock.errors import EvaluationError

if TYPE_CHECKING:
    from interlock.policy.compiled import CompiledPolicy, CompiledRule

__all__ = ["never_allowed"]

Reach = Literal["never", "maybe", "always"]


@dataclass(frozen=True, slots=True)
class _Known:
    """Stands for the facts of every call of the tool (what a condition reads)."""

    params: Mapping[str, Any]
    args: Mapping[str, Any] = field(default_factory=dict)


def _selects(rule: CompiledRule, kind: str, name: str, tenant: str, agent: str | None) -> bool:
    """The rule's selectors (kind, name, tenant, agent) hold for this tool and caller."""
    if rule.kinds is not None and kind not in rule.kinds:
        return False
    if rule.names is not None and not rule.names.matches(name):
        return False
    if rule.tenants is not None and not rule.tenants.matches(tenant):
        return False
    return rule.agents is None or (agent is not None and rule.agents.matches(agent))


def _reach(rule: CompiledRule, known: _Known) -> Reach:
    """Whether the rule matches no call, some, or every call of the tool."""
    certain = (
        rule.scopes is None and rule.when is None and rule.shell is None and rule.session is None
    )
    for condition in rule.conditions:
        if condition.key not in known.params:
            certain = False
            continue
        try:
            if not condition.test(known):
                return "never"
        except EvaluationError:
            certain = False
    return "always" if certain else "maybe"


def never_allowed(
    policy: CompiledPolicy,
    kind: str,
    name: str,
    tenant: str,
    agent: str | None,
    known: Mapping[str, Any] | None = None,
) -> bool:
    """True when ``policy`` refuses every call of tool ``name`` (of ``kind``) by this
    tenant's ``agent``, whatever the call's arguments. A policy in shadow mode never
    refuses, so nothing is hidden under it.

    Example::

        never_allowed(policy, "mcp", "delete_repo", "acme", "triage-bot",
                      {"server": "github", "destructive": True})
    """
    if policy.shadow_mode:
        return False
    facts = _Known(dict(known or {}))
    reaches = [
        (rule.verdict, _reach(rule, facts))
        for rule in policy.rules
        if not rule.shadow and _selects(rule, kind, name, tenant, agent)
    ]
    if any(verdict is Verdict.DENY and reach == "always" for verdict, reach in reaches):
        return True
    if policy.default is not Verdict.DENY:
        return False
    return not any(verdict is not Verdict.DENY and reach != "never" for verdict, reach in reaches)
