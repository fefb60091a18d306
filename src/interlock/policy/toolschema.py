"""Rules checked against the tools they judge: ``args.ammount`` is a typo the policy
can catch when it loads, not an undetermined verdict when the agent runs.

The tools' argument schemas come from the policy's ``tools:`` section, or from an
agent object (``interlock policy lint --tools module:obj``: its tools, as the adapters
see them). A rule reading ``args.<name>`` is an error when it applies to some known
tool and none of those tools declares ``<name>``.

Example::

    from interlock.policy import load_policy
    from interlock.policy.toolschema import argument_issues, schemas_of

    issues = argument_issues(load_policy("interlock.yaml"), schemas_of(agent))
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from interlock.errors import PolicyIssue
from interlock.policy.compiled import CompiledPolicy, CompiledRule

__all__ = ["ArgumentRef", "argument_issues", "load_object", "schemas_of"]


@dataclass(frozen=True, slots=True)
class ArgumentRef:
    """An argument a rule reads: ``path`` is ``amount`` for ``args.amount``."""

    path: str
    line: int | None
    field: str


def argument_issues(
    policy: CompiledPolicy | Sequence[CompiledRule],
    tools: Mapping[str, Mapping[str, Any] | None],
    *,
    source: str | None = None,
) -> list[PolicyIssue]:
    """Every argument a rule reads that none of the tools it applies to declares."""
    issues: list[PolicyIssue] = []
    known = dict(tools)
    if isinstance(policy, CompiledPolicy):
        rules: Sequence[CompiledRule] = policy.rules
        source = source or policy.source
    else:
        rules = policy
    for rule in rules:
        if rule.kinds is not None and not rule.kinds & {"tool", "mcp", "effect", "browser"}:
            continue  # a model-call rule reads the request, not a tool's arguments
        applies = [name for name in known if rule.names is None or rule.names.matches(name)]
        if not applies:
            continue
        for ref in rule.arguments:
            if any(_declares(known[name], ref.path) for name in applies):
                continue
            issues.append(
                PolicyIssue(
                    _message(ref, applies, known),
                    file=source,
                    line=ref.line,
                    rule_id=rule.id,
                    field=ref.field,
                )
            )
    return issues


def _message(
    ref: ArgumentRef, applies: list[str], known: Mapping[str, Mapping[str, Any] | None]
) -> str:
    names = sorted(applies)
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    first = ref.path.split(".", 1)[0]
    declared = sorted({key for name in applies for key in _properties(known[name]) or ()})
    import difflib  # only to word an error

    close = difflib.get_close_matches(first, declared, n=1)
    hint = f"; did you mean args.{close[0]}?" if close else ""
    return (
        f"reads args.{ref.path}, but no tool it applies to has an argument {first!r} "
        f"(tools: {shown}){hint}"
    )


def _properties(schema: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The declared properties; None when the schema admits any name."""
    if not isinstance(schema, Mapping):
        return None
    properties = schema.get("properties")
    extra = schema.get("additionalProperties", False)
    if not isinstance(properties, Mapping) or extra is True or isinstance(extra, Mapping):
        return None
    return properties


def _declares(schema: Mapping[str, Any] | None, path: str) -> bool:
    """Whether ``schema`` (an object schema) has the argument at ``path``."""
    node: Any = schema
    for part in path.split("."):
        if not isinstance(node, Mapping):
            return True  # nothing more is declared: cannot tell, so no error
        if node.get("type") == "array" or "items" in node:
            if part.isdigit():
                node = node.get("items")
                continue
            return False
        properties = _properties(node)
        if properties is None:
            return True
        if part not in properties:
            return False
        node = properties[part]
    return True


def load_object(spec: str) -> object:
    """``module:attribute`` (``myapp.agent:agent``), imported."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"expected module:object, not {spec!r}")
    if os.getcwd() not in sys.path:  # as `python -m` would: the project's own modules
        sys.path.insert(0, os.getcwd())
    module = importlib.import_module(module_name)
    found: Any = module
    for part in attribute.split("."):
        found = getattr(found, part)
    return found


def schemas_of(obj: object) -> dict[str, Mapping[str, Any] | None]:
    """Tool name → argument schema, for an agent (or a tool, a list of tools, an MCP
    server...) as Interlock's adapters see it."""
    from interlock.core.registry import adapter_for

    items = obj if isinstance(obj, (list, tuple)) else [obj]
    found: dict[str, Mapping[str, Any] | None] = {}
    for item in items:
        for binding in adapter_for(item).tool_bindings(item):
            found[binding.name] = binding.schema
    return found
