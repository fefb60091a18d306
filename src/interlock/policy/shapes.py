"""Extraction for the usual call, planned once per shape of call.

:func:`interlock.policy.extract.extract` works out, on every check, which alias names
a call uses, its verb and its scopes — though for calls of one tool with the same
argument names (a *shape*) these never change. For a call whose arguments are a plain
``dict`` and whose tool declares no schema, :func:`shape_of` works them out once per
(kind, name, pinned scope, description, argument names), and :meth:`Shape.facts`
builds the check's :class:`~interlock.policy.extract.Facts` from the plan and the
values alone.

A shape is planned only where the plan is exact — no ``command`` / ``cmd`` (a shell
call), no argument text read as a command, no more arguments than the policy's limit
— and :meth:`Shape.facts` gives up (returns None, and the caller extracts in full)
on any value the plan did not assume: a value that is not a scalar (the limits are
then checked in full), or a path, URL or host name that is not short text (a list
of them, a ``None`` that would change the scopes, a long one). Everything it does
build comes from the same functions as the full extraction, in the same order, so
the parameters, their order and any error are the same; a property test
(``tests/policy/test_shapes.py``) holds the two to the same facts and errors.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from interlock.policy.extract import (
    _ALIAS_KEYS,
    _COMMAND_KEYS,
    _MEMO_CHARS,
    _SCALARS,
    Facts,
    _alias_plan,
    _scopes,
    _text_params,
    est_cost_param,
    verb_of,
)

if TYPE_CHECKING:
    from interlock.core.decision import Decision

__all__ = ["Shape", "shape_of"]

#: The arguments of a shape as the scope inference reads them: each name there, with
#: a value (the plan assumes no alias value is ``None``; :meth:`Shape.facts` checks).
_PRESENT: Final = True


@dataclass(frozen=True, slots=True)
class Shape:
    """What extraction derives from a call's shape alone."""

    #: the path, URL and host argument names the call has, in the order they are read
    aliases: tuple[str, ...]
    session: bool  # a ``session_id`` argument
    est_cost: bool  # an ``est_cost`` argument
    verb: str | None
    scope: str
    scopes: tuple[str, ...] | None  # every scope, when there are several
    #: the decision function of the shape's candidate set, when a call of this shape
    #: is one facet (one scope) and no shadow rule applies (set by the policy)
    decide: Callable[[Facts], Decision] | None = None

    def facts(
        self,
        action: Any,
        arguments: dict[str, Any],
        max_param_chars: int,
    ) -> Facts | None:
        """The facts of ``action`` (whose arguments are ``arguments``, of this shape),
        or None when a value is not what the plan assumed. Raises what
        :func:`~interlock.policy.extract.extract` raises on the same call."""
        for value in arguments.values():
            if type(value) not in _SCALARS:
                return None  # nested: the limits are checked in full
        params: dict[str, Any] = {}
        names = self.aliases
        if names:
            values = tuple([arguments[name] for name in names])
            for value in values:
                if type(value) is not str or len(value) > _MEMO_CHARS:
                    return None
            found = _text_params(names, values, max_param_chars)
            if found is None:
                return None
            params.update(found)
        if self.session:
            params["session_id"] = arguments["session_id"]
        if self.est_cost:
            params["est_cost"] = est_cost_param(arguments["est_cost"])
        verb = self.verb
        if verb is not None:
            params["verb"] = verb
        target = action.target
        if target is not None:
            params["target"] = target
        facts = Facts(
            action.kind,
            action.name,
            self.scope,
            verb,
            arguments,
            params,
            action.context,
            target,
            action.capabilities,
        )
        if self.scopes is not None:
            facts.scopes = self.scopes
        return facts


def shape_of(
    kind: str,
    name: str,
    arguments: Mapping[str, Any],
    pinned_scope: str | None,
    description: str | None,
    default_scope: str,
    max_items: int,
) -> Shape | None:
    """The plan for calls like this one (only its argument names are read), or None
    when calls of this shape are extracted in full (also for a kind, name, scope or
    description that is not text: the full extraction reports what it makes of it)."""
    if len(arguments) > max_items:
        return None
    if not (
        type(kind) is str
        and type(name) is str
        and (pinned_scope is None or type(pinned_scope) is str)
        and (description is None or type(description) is str)
    ):
        return None
    names = dict.fromkeys(arguments, _PRESENT)
    if not _COMMAND_KEYS.isdisjoint(names):
        return None
    present = _ALIAS_KEYS.intersection(names)
    plan = _alias_plan(present)
    if pinned_scope is not None:
        scopes: tuple[str, ...] = (pinned_scope,)
    else:
        scopes = _scopes(kind, name, description, names, default_scope, present, plan)
    if scopes[0] == "shell" and set(names) == {"input"}:
        return None  # the input is read as a command
    return Shape(
        aliases=plan[4],
        session="session_id" in names,
        est_cost="est_cost" in names,
        verb=verb_of(name),
        scope=scopes[0],
        scopes=scopes if len(scopes) > 1 else None,
    )
