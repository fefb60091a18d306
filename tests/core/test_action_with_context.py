"""``Action.with_context`` builds the new action positionally (every check of a guard
with a context does it): it must be exactly ``dataclasses.replace`` — every field kept,
only the context changed — for every shape of action."""

from __future__ import annotations

import dataclasses

import pytest

from interlock import Action, Context

FULL = Action(
    kind="tool",
    name="deploy",
    arguments={"service": "billing", "nested": {"a": [1, 2]}},
    target="prod",
    scope="shell",
    description="deploys a service",
    schema={"type": "object", "properties": {"service": {"type": "string"}}},
    capabilities=("net", "write"),
    context=Context(tenant="old", agent="a0"),
)


@pytest.mark.parametrize(
    "action",
    [
        FULL,
        Action.tool("search", {"q": "x"}),
        Action.llm("gpt-5", arguments={"input_tokens": 10}),
        Action(kind="tool", name="bare"),
    ],
    ids=["every-field", "tool", "llm", "bare"],
)
def test_with_context_is_replace(action: Action) -> None:
    context = Context(tenant="acme", agent="bot", session_id="s-1")
    made = action.with_context(context)
    assert made == dataclasses.replace(action, context=context)
    assert made.context is context
    assert type(made) is Action
    for field in dataclasses.fields(Action):
        if field.name != "context":
            assert getattr(made, field.name) is getattr(action, field.name), field.name


def test_a_subclass_keeps_its_type() -> None:
    @dataclasses.dataclass(frozen=True, slots=True)
    class Marked(Action):
        mark: str = "m"

    action = Marked(kind="tool", name="x", mark="kept")
    made = action.with_context(Context(tenant="t"))
    assert type(made) is Marked and made.mark == "kept" and made.context.tenant == "t"
