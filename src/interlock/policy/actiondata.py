"""An action given as plain data — the CLI's ``--json`` and ``--name``/``--arg``, and
the cases of ``interlock policy test`` — turned into an :class:`Action`.

The pydantic models of :mod:`interlock.policy.testing` (``ActionSpec``,
``ContextSpec``) define what is valid and word what is not. Data whose every value has
its exact type (a ``str`` for a name, a ``dict`` for the arguments...) is taken here
without them, as they would take it; anything else goes to the models, which accept
it (by a coercion this does not make) or raise their ``ValidationError``. So
``interlock check`` imports pydantic only for an action it must refuse (ADR 0014).

Example::

    from interlock.policy.actiondata import action_from_data

    action = action_from_data({"name": "shell", "arguments": {"command": "ls"}})
"""

from __future__ import annotations

from typing import Any, Final

from interlock.core.action import Action, Context

__all__ = ["action_from_data"]

_ACTION_KEYS: Final = frozenset(
    {"kind", "name", "arguments", "target", "scope", "description", "schema", "capabilities"}
)
_CONTEXT_KEYS: Final = frozenset(
    {"tenant", "agent", "agent_type", "runtime", "session_id", "run_id", "call_id"}
    | {"idempotency_key"}
)
_KINDS: Final = frozenset({"tool", "llm", "mcp", "browser", "effect"})


def _text(value: Any) -> bool:
    # pydantic refuses a str it cannot encode (a lone surrogate).
    if type(value) is not str:
        return False
    if value.isascii():
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _opt_text(value: Any) -> bool:
    return value is None or _text(value)


def _text_keys(value: Any) -> bool:
    return type(value) is dict and all(_text(key) for key in value)


def _plain_action(action: Any) -> bool:
    """Whether ``action`` is valid for ``ActionSpec`` with every value of its exact type."""
    if type(action) is not dict or not all(type(k) is str and k in _ACTION_KEYS for k in action):
        return False
    get = action.get
    kind = get("kind", "tool")
    capabilities = get("capabilities", [])
    schema = get("schema")
    return (
        type(kind) is str
        and kind in _KINDS
        and _text(get("name"))
        and _text_keys(get("arguments", {}))
        and all(_opt_text(get(key)) for key in ("target", "scope", "description"))
        and (schema is None or _text_keys(schema))
        and type(capabilities) is list
        and all(_text(c) for c in capabilities)
    )


def _plain_context(context: Any) -> bool:
    if type(context) is not dict:
        return False
    for key, value in context.items():
        if type(key) is not str or key not in _CONTEXT_KEYS:
            return False
        if not (_text(value) if key == "tenant" else _opt_text(value)):
            return False
    return True


def action_from_data(action: dict[str, Any], context: dict[str, Any] | None = None) -> Action:
    """An Action from plain data. Raises pydantic's ``ValidationError`` on bad data."""
    context = context or {}
    if not (_plain_action(action) and _plain_context(context)):
        return _with_models(action, context)
    return Action(
        kind=action.get("kind", "tool"),
        name=action["name"],
        arguments=dict(action.get("arguments", {})),
        target=action.get("target"),
        scope=action.get("scope"),
        description=action.get("description"),
        schema=_copy(action.get("schema")),
        capabilities=tuple(action.get("capabilities", ())),
        context=Context(**{"tenant": "default", **context}),
    )


def _copy(schema: dict[str, Any] | None) -> dict[str, Any] | None:
    return None if schema is None else dict(schema)


def _with_models(action: dict[str, Any], context: dict[str, Any]) -> Action:
    from interlock.policy.testing import ActionSpec, ContextSpec

    spec = ActionSpec.model_validate(action)
    ctx = ContextSpec.model_validate(context)
    return Action(
        kind=spec.kind,
        name=spec.name,
        arguments=spec.arguments,
        target=spec.target,
        scope=spec.scope,
        description=spec.description,
        schema=spec.schema_,
        capabilities=tuple(spec.capabilities),
        context=Context(**ctx.model_dump()),
    )
