"""Intents declared per tool, and grants asked for per rule or per tool.

A tool's entry in the policy can say what its calls act on — a target built from the
arguments (``shopify:order:{order_id}``) and the downstream system, operation and
endpoint — so that no hand-written mapper has to. The guard fills them into the
action before it is judged: ``Action.target`` and ``Context.downstream``, which rules
see and the intent hash covers (:mod:`interlock.core.intent`). The framework's call id
stays what it was, correlation only. A call whose target cannot be built — the
argument missing, or not a string or integer, or a text no resource name holds — is
undetermined, as is a call whose runtime already states another target or downstream
system than the policy declares: the guard cannot know which one is true.

A rule's or a tool's ``grant:`` asks for a signed, single-use grant with each allow
(:mod:`interlock.approvals.grants`); the rules that decided come first, then the tool.

Example::

    from interlock import Action
    from interlock.policy import load_policy_text

    policy = load_policy_text('''
    version: 1
    default: allow
    tools:
      refund_order:
        intent: {target: "shopify:order:{order_id}", system: shopify, operation: refund}
    ''')
    action = policy.tool_intents["refund_order"].declare(
        Action.tool("refund_order", {"order_id": 42})
    )
    assert action.target == "shopify:order:42"
    assert action.context.downstream.system == "shopify"
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Final

from interlock.core.action import Action, Downstream
from interlock.core.decision import Decision, Verdict
from interlock.errors import MappingError

if TYPE_CHECKING:
    from interlock.core.action import Action as ActionType

__all__ = ["MAX_GRANT_TTL", "GrantPolicy", "GrantSpec", "TargetTemplate", "ToolIntent"]

#: The longest a grant may live (seconds): a policy's ``grant.ttl`` and
#: ``issue_grant(ttl=...)`` are bounded by it, and a retired signing key verifies this
#: long after its retirement (:mod:`interlock.store.grant_keys`).
MAX_GRANT_TTL: Final = 3600

#: The longest argument value a target is built from.
_MAX_VALUE: Final = 256
#: A value a resource name can hold: printable, no whitespace (one token).
_VALUE: Final = re.compile(r"[^\s\x00-\x1f\x7f]+")
_FORMATTER: Final = string.Formatter()


@dataclass(frozen=True, slots=True)
class TargetTemplate:
    """``shopify:order:{order_id}``: literal text and top-level argument names."""

    text: str
    parts: tuple[tuple[str, str | None], ...]  # (literal, argument name or None)

    @classmethod
    def parse(cls, text: str) -> TargetTemplate:
        """The template, or ``ValueError`` saying what is wrong with it."""
        parts: list[tuple[str, str | None]] = []
        try:
            parsed = list(_FORMATTER.parse(text))
        except ValueError as exc:
            raise ValueError(f"target template {text!r}: {exc}") from None
        for literal, name, spec, conversion in parsed:
            if name is not None and (not name.isidentifier() or spec or conversion):
                raise ValueError(
                    f"target template {text!r}: {{{name}}} is not an argument name "
                    "(write {order_id}: a top-level argument, no format or index)"
                )
            parts.append((literal, name))
        return cls(text, tuple(parts))

    @property
    def arguments(self) -> tuple[str, ...]:
        return tuple(name for _, name in self.parts if name is not None)

    def render(self, tool: str, arguments: Mapping[str, Any]) -> str:
        """The target of a call; :class:`MappingError` when an argument cannot name it."""
        out: list[str] = []
        for literal, name in self.parts:
            out.append(literal)
            if name is not None:
                out.append(_value(tool, name, arguments))
        return "".join(out)


def _value(tool: str, name: str, arguments: Mapping[str, Any]) -> str:
    if name not in arguments:
        raise MappingError(
            f"{tool}: the policy builds the call's target from argument {name!r}, "
            "which the call does not have"
        )
    value = arguments[name]
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise MappingError(
            f"{tool}: argument {name!r} is a {type(value).__name__}, not a string or "
            "integer: it cannot name the call's target"
        )
    text = str(value)
    if not 0 < len(text) <= _MAX_VALUE or not _VALUE.fullmatch(text):
        raise MappingError(
            f"{tool}: argument {name!r} is empty, longer than {_MAX_VALUE} characters, "
            "or holds whitespace or control characters: it cannot name the call's target"
        )
    return text


@dataclass(frozen=True, slots=True)
class ToolIntent:
    """What the policy declares a tool's calls act on."""

    target: TargetTemplate | None
    downstream: Downstream

    def declare(self, action: ActionType) -> ActionType:
        """``action`` with the declared target and downstream system in it; a call whose
        runtime states others is refused (:class:`MappingError`)."""
        context = action.context
        target = action.target
        if self.target is not None:
            declared = self.target.render(action.name, action.arguments)
            if target is not None and target != declared:
                raise MappingError(
                    f"{action.name}: the call names target {target!r}, the policy declares "
                    f"{declared!r}: the guard cannot know which one is acted on"
                )
            target = declared
        downstream = context.downstream
        if downstream is not None and downstream != self.downstream:
            raise MappingError(
                f"{action.name}: the runtime states downstream {downstream.system!r} "
                f"({downstream.operation}, {downstream.endpoint}), the policy declares "
                f"{self.downstream.system!r} ({self.downstream.operation}, "
                f"{self.downstream.endpoint})"
            )
        if target == action.target and downstream is self.downstream:
            return action
        return replace(action, target=target, context=replace(context, downstream=self.downstream))


@dataclass(frozen=True, slots=True)
class GrantSpec:
    """A grant asked for: its audience (``None``: the call's downstream system) and
    its lifetime in seconds."""

    audience: str | None
    ttl: float


@dataclass(frozen=True, slots=True)
class GrantPolicy:
    """Which allows carry a grant: those of the rules in ``rules``, else those of the
    tools in ``tools``. A claimed approval carries one whenever an audience is known."""

    rules: Mapping[str, GrantSpec] = field(default_factory=dict)
    tools: Mapping[str, GrantSpec] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.rules or self.tools)

    def for_decision(
        self, action: Action, decision: Decision, default_ttl: float
    ) -> GrantSpec | None:
        """The grant an allow of ``action`` asks for, or ``None``."""
        if decision.verdict is not Verdict.ALLOW:
            return None
        asked = [self.rules[rule] for rule in decision.rule_ids if rule in self.rules]
        if asked:
            audiences = {spec.audience for spec in asked if spec.audience is not None}
            if len(audiences) > 1:
                raise MappingError(
                    f"{action.name}: the rules that allowed it ask for grants for "
                    f"different audiences ({', '.join(sorted(audiences))})"
                )
            return GrantSpec(next(iter(audiences), None), min(spec.ttl for spec in asked))
        spec = self.tools.get(action.name)
        if spec is not None:
            return spec
        approval = decision.approval
        claimed = approval is not None and approval.status == "claimed"
        if claimed and action.context.downstream is not None:
            return GrantSpec(None, default_ttl)
        return None
