"""The labels a policy gives an allowed call of a tool, read from its name and
arguments alone: for a tool result that arrives without the call's own step — a
proxy replica that did not judge the call, a restarted process, an agent that
reports the result of a call another process decided (``POST /v1/sessions/input``
with ``tool``).

The stricter reading wins whenever the arguments cannot be read (not a JSON object,
a label rule that raises): every label the policy's label rules could attach to a
call of that tool, so a result whose call cannot be judged is never less labelled
than the call would have made it. Example::

    labels_of_call(policy, Context(tenant="acme"), "read_file", {"path": "/srv/.env"})
    # frozenset({'secret'}) under a label rule that marks ``*/.env`` reads secret
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING

from interlock.core.action import Action, Context

if TYPE_CHECKING:
    from interlock.policy.compiled import CompiledPolicy

__all__ = ["labels_of_call"]


def labels_of_call(
    policy: CompiledPolicy | None, context: Context, name: str, arguments: object
) -> frozenset[str]:
    """The labels ``policy`` attaches to an allowed call of tool ``name`` with
    ``arguments`` (a mapping, or the JSON text a model wrote); empty when the policy
    reads no sessions; every label its label rules could attach when the arguments
    are not an object or a rule cannot be evaluated."""
    spec = policy.sessions if policy is not None else None
    if spec is None:
        return frozenset()
    labels = set(spec.tool_labels.get(name, ()))
    if not spec.label_rules or not spec.may_label("tool", name):
        return frozenset(labels)
    from interlock.policy.engine import facts_for
    from interlock.policy.sessionrules import SessionFacts, session_scope
    from interlock.session.history import SessionView

    assert policy is not None
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            arguments = None
    try:
        if not isinstance(arguments, Mapping):
            raise ValueError("the call's arguments are not an object")
        action = Action.tool(name, dict(arguments), context=context)
        facts = SessionFacts.of(SessionView(context.tenant, context.session_id or ""))
        with session_scope(facts):
            attach, _ = spec.labels_for(facts_for(action, policy))
        labels |= attach
    except Exception:
        labels |= {label for rule in spec.label_rules for label in rule.attach}
    return frozenset(labels)
