"""An action as plain data (interlock.policy.actiondata) against the pydantic models
that define it: the same Action from both, or the models' own ValidationError."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from interlock.core.action import Action, Context
from interlock.policy import actiondata
from interlock.policy.actiondata import action_from_data
from interlock.policy.testing import ActionSpec, ContextSpec


def by_models(action: Any, context: Any) -> Action | str:
    try:
        spec = ActionSpec.model_validate(action)
        ctx = ContextSpec.model_validate(context or {})
    except ValidationError as exc:
        return str(exc)
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


def outcome(action: Any, context: Any) -> Action | str:
    try:
        return action_from_data(action, context)
    except ValidationError as exc:
        return str(exc)


def _typed(action: Action | str) -> Any:
    if isinstance(action, str):
        return action
    return (action, {k: type(v) for k, v in action.arguments.items()})


@pytest.mark.parametrize(
    ("action", "context", "plain"),
    [
        ({"name": "shell", "arguments": {"command": "ls"}}, None, True),
        ({"name": "shell", "kind": "llm", "capabilities": ["net"]}, {"tenant": "t"}, True),
        ({"name": "x", "schema": {"type": "object"}, "target": "db:1"}, {"agent": None}, True),
        ({"name": "x", "schema": None}, {}, True),
        ({"name": "x", "arguments": {"n": 1.5, "deep": {"a": [1, None]}}}, None, True),
        ({"name": "é ✓"}, {"session_id": "s", "idempotency_key": "k"}, True),
        # refused, or taken only by the models' coercion: theirs to word or take
        ({"name": 5}, None, False),
        ({"name": "x", "kind": "robot"}, None, False),
        ({"name": "x", "arguments": []}, None, False),
        ({"name": "x", "arguments": {1: "a"}}, None, False),
        ({"name": "x", "capabilities": ("a",)}, None, False),
        ({"name": "x", "capabilities": [1]}, None, False),
        ({"name": "x", "schema_": {}}, None, False),
        ({"name": "x", "colour": "red"}, None, False),
        ({"name": "a\ud800"}, None, False),
        ({}, None, False),
        ({"name": "x"}, {"tenant": None}, False),
        ({"name": "x"}, {"downstream": "d"}, False),
        ({"name": "x"}, {"agent": 7}, False),
        (["name"], None, False),
    ],
)
def test_an_action_is_the_models_action_or_their_error(
    action: Any, context: Any, plain: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    used: list[str] = []
    real = actiondata._with_models
    monkeypatch.setattr(
        actiondata, "_with_models", lambda a, c: used.append("models") or real(a, c)
    )
    assert _typed(outcome(action, context)) == _typed(by_models(action, context))
    assert (used == []) is plain


def test_the_arguments_are_a_copy_of_the_data() -> None:
    arguments = {"command": "ls"}
    action = action_from_data({"name": "shell", "arguments": arguments})
    arguments["command"] = "rm -rf /"
    assert action.arguments == {"command": "ls"}


SCALAR = st.one_of(st.none(), st.text(max_size=4), st.integers(), st.floats(), st.booleans())
ANY = st.recursive(
    SCALAR,
    lambda inner: (
        st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=3), inner, max_size=2)
    ),
)
ACTION = st.fixed_dictionaries(
    {},
    optional={
        "kind": st.sampled_from(["tool", "llm", "mcp", "browser", "effect", "robot"]) | ANY,
        "name": st.text(max_size=4) | ANY,
        "arguments": st.dictionaries(st.text(max_size=3), ANY, max_size=3) | ANY,
        "target": st.none() | st.text(max_size=3) | ANY,
        "scope": st.none() | st.text(max_size=3),
        "description": st.none() | st.text(max_size=3),
        "schema": st.none() | st.dictionaries(st.text(max_size=3), ANY, max_size=2) | ANY,
        "capabilities": st.lists(st.text(max_size=3), max_size=2) | ANY,
        "bogus": ANY,
    },
)
CONTEXT = st.none() | st.fixed_dictionaries(
    {},
    optional={
        key: st.none() | st.text(max_size=3) | ANY
        for key in ("tenant", "agent", "agent_type", "runtime", "session_id", "run_id")
    }
    | {"call_id": st.none() | st.text(max_size=3), "idempotency_key": st.text(max_size=3)},
)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(action=ACTION, context=CONTEXT)
def test_random_actions_give_what_the_models_give(action: Any, context: Any) -> None:
    assert _typed(outcome(action, context)) == _typed(by_models(action, context))
