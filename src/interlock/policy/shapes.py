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
on any value the plan did not assume: a session id or an estimated cost that is not
a scalar, or a path, URL or host name that is not short text (a list of them, a
``None`` that would change the scopes, a long one). An argument extraction does not
read (a JSON body, a list of items) may hold anything: when one is not a scalar the
policy's limits on depth and size are checked on the whole arguments first, by the
full extraction's own function and in its order, so the same error is raised.
Everything it does build comes from the same functions as the full extraction, in
the same order, so the parameters, their order and any error are the same; a
property test (``tests/policy/test_specialised_equivalence.py``) holds the two to
the same facts and errors.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
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
    check_limits,
    est_cost_param,
    kind_params,
    verb_of,
)

if TYPE_CHECKING:
    from interlock.core.decision import Decision

__all__ = ["Shape", "shape_of"]

#: The arguments of a shape as the scope inference reads them: each name there, with
#: a value (the plan assumes no alias value is ``None``; :meth:`Shape.facts` checks).
_PRESENT: Final = True


#: ``facts(action, arguments, max_param_chars)``: the facts of a call of the shape, or
#: None when a value is not what the plan assumed.
FactsOf = Callable[[Any, dict[Any, Any], int], "Facts | None"]


@dataclass(frozen=True, slots=True)
class Shape:
    """What extraction derives from a call's shape alone."""

    #: the argument names, in the call's order
    names: tuple[Any, ...]
    #: the path, URL and host argument names the call has, in the order they are read
    aliases: tuple[str, ...]
    verb: str | None
    scope: str
    scopes: tuple[str, ...] | None  # every scope, when there are several
    #: the kind of the calls (calls of a kind equal to it share the shape)
    kind: str = "tool"
    #: the policy's limits, checked when an argument is not a scalar
    max_depth: int = 32
    max_items: int = 10_000
    #: the decision function of the shape's candidate set, when a call of this shape
    #: is one facet (one scope) and no shadow rule applies (set by the policy)
    decide: Callable[[Facts], Decision] | None = None
    #: the facts of a call of this shape (``action``, its ``arguments`` — a dict of
    #: exactly :attr:`names` — and the policy's ``max_param_chars``), or None when a
    #: value is not what the plan assumed: a value that is not a scalar, an alias
    #: value that is not short text. Raises what
    #: :func:`~interlock.policy.extract.extract` raises on the same call. Generated
    #: for the shape (:func:`_factory`).
    facts: FactsOf = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        roles = tuple(_role(name, self.aliases) for name in self.names)
        factory = _factory(roles, self.verb is not None, self.kind in _KINDS_WITH_PARAMS)
        made = factory(
            self.names,
            self.aliases,
            self.verb,
            self.scope,
            self.scopes,
            _FACTS_DEFAULTS,
            (self.max_depth, self.max_items),
        )
        object.__setattr__(self, "facts", made)


def _role(name: Any, aliases: tuple[str, ...]) -> str | int:
    """What extraction reads an argument as: an alias (its place in ``aliases``), the
    session id, the estimated cost, or nothing (any scalar)."""
    if name in aliases:
        return aliases.index(name)
    if name == "session_id":
        return "session"
    if name == "est_cost":
        return "est_cost"
    return "plain"


#: The fields of Facts the extraction leaves at their defaults, with those defaults.
_FACTS_SET: Final = (
    "kind",
    "name",
    "scope",
    "verb",
    "args",
    "params",
    "context",
    "target",
    "capabilities",
    "scopes",
)
_FACTS_DEFAULTS: Final = tuple(
    (f.name, f.default) for f in dataclasses.fields(Facts) if f.name not in _FACTS_SET
)
if any(default is dataclasses.MISSING for _, default in _FACTS_DEFAULTS):
    raise TypeError("a field of Facts has no default: extend shapes._FACTS_SET")


#: The kinds whose trusted fields add parameters (:func:`kind_params` is None for any
#: other: its call is left out of their facts functions).
_KINDS_WITH_PARAMS: Final = frozenset({"mcp", "llm"})


@functools.lru_cache(maxsize=256)
def _factory(
    roles: tuple[str | int, ...], has_verb: bool, kind_has_params: bool
) -> Callable[..., FactsOf]:
    """The factory of the facts functions of shapes whose arguments have these roles
    (the names themselves are arguments of the factory, never generated text)."""
    lines = ["def make(NAMES, ALIASES, VERB, SCOPE, SCOPES, DEFAULTS, LIMITS):"]
    if roles:
        lines.append(f"    {', '.join(f'n{i}' for i in range(len(roles)))}, = NAMES")
    defaults = [f"d_{name}" for name, _ in _FACTS_DEFAULTS]
    if defaults:
        lines.append(f"    {', '.join(defaults)}, = [value for _, value in DEFAULTS]")
    lines.append("    max_depth, max_items = LIMITS")
    lines.append("    def facts(action, arguments, max_param_chars):")
    body: list[str] = []
    aliases: dict[int, str] = {}
    plain = [i for i, role in enumerate(roles) if role == "plain"]
    if plain:
        body.append("nested = False")
    for i, role in enumerate(roles):
        body.append(f"v{i} = arguments[n{i}]")
        if isinstance(role, int):  # an alias: short text, for the memo
            aliases[role] = f"v{i}"
            body += [f"if type(v{i}) is not str or len(v{i}) > MEMO:", "    return None"]
        elif role == "plain":  # not read: anything, within the limits
            body += [f"if type(v{i}) not in SCALARS:", "    nested = True"]
        else:  # the session id, the estimated cost: any scalar, else in full
            body += [f"if type(v{i}) not in SCALARS:", "    return None"]
    if plain:
        # as the full extraction does, before anything else it could raise
        body += [
            "if nested:",
            "    CHECK_LIMITS(arguments, max_depth=max_depth, max_items=max_items)",
        ]
    if aliases:
        values = ", ".join(aliases[place] for place in range(len(aliases)))
        body += [
            f"found = TEXT_PARAMS(ALIASES, ({values},), max_param_chars)",
            "if found is None:",
            "    return None",
            "params = found.copy()",
        ]
    else:
        body.append("params = {}")
    # in the full extraction's order (session_id, then est_cost), whatever the order of
    # the arguments: CEL and the records read the parameters in order
    for i, role in enumerate(roles):
        if role == "session":
            body.append(f"params['session_id'] = v{i}")
    for i, role in enumerate(roles):
        if role == "est_cost":
            body.append(f"params['est_cost'] = EST_COST(v{i})")
    if has_verb:
        body.append("params['verb'] = VERB")
    body += [
        "target = action.target",
        "if target is not None:",
        "    params['target'] = target",
    ]
    if kind_has_params:
        body += [
            "trusted = KIND_PARAMS(action.kind, target, action.capabilities)",
            "if trusted:",
            "    params.update(trusted)",
        ]
    body += [
        "facts = NEW(FACTS)",
        "facts.kind = action.kind",
        "facts.name = action.name",
        "facts.scope = SCOPE",
        "facts.verb = VERB",
        "facts.args = arguments",
        "facts.params = params",
        "facts.context = action.context",
        "facts.target = target",
        "facts.capabilities = action.capabilities",
        "facts.scopes = SCOPES",
        *(f"facts.{name} = d_{name}" for name, _ in _FACTS_DEFAULTS),
        "return facts",
    ]
    lines += ["        " + line for line in body]
    lines.append("    return facts")
    namespace: dict[str, Any] = {
        "__builtins__": {"type": type, "str": str, "len": len},
        "MEMO": _MEMO_CHARS,
        "SCALARS": _SCALARS,
        "TEXT_PARAMS": _text_params,
        "EST_COST": est_cost_param,
        "KIND_PARAMS": kind_params,
        "CHECK_LIMITS": check_limits,
        "NEW": object.__new__,
        "FACTS": Facts,
    }
    exec(compile("\n".join(lines), f"<interlock facts {len(roles)}>", "exec"), namespace)
    factory: Callable[..., FactsOf] = namespace["make"]
    return factory


def shape_of(
    kind: str,
    name: str,
    arguments: Mapping[str, Any],
    pinned_scope: str | None,
    description: str | None,
    default_scope: str,
    max_items: int,
    max_depth: int = 32,
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
        names=tuple(names),
        aliases=plan[4],
        verb=verb_of(name),
        scope=scopes[0],
        scopes=scopes if len(scopes) > 1 else None,
        kind=kind,
        max_depth=max_depth,
        max_items=max_items,
    )
