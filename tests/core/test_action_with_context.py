"""``Action.with_context`` builds the new action positionally (every check of a guard
with a context does it): it must be exactly ``dataclasses.replace`` — every field kept,
only the context changed — for every shape of action. And a ``Context`` of the wrong
types is refused where it is made, naming the field."""

from __future__ import annotations

import dataclasses
from enum import StrEnum

import pytest

from interlock import Action, Context
from interlock.core.action import Downstream

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


# -- a context of the wrong types is refused where it is made ------------------------


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"tenant": 123}, "Context.tenant must be a str, not int"),
        ({"tenant": None}, "Context.tenant must be a str, not NoneType"),
        ({"session_id": 7}, "Context.session_id must be a str or None, not int"),
        ({"agent": b"bot"}, "Context.agent must be a str or None, not bytes"),
        ({"idempotency_key": ["k"]}, "Context.idempotency_key must be a str or None, not list"),
        ({"downstream": "stripe"}, "Context.downstream must be a Downstream or None, not str"),
    ],
)
def test_a_context_field_of_the_wrong_type_is_named(
    fields: dict[str, object], message: str
) -> None:
    with pytest.raises(TypeError) as caught:
        Context(**fields)  # type: ignore[arg-type]
    assert str(caught.value) == message


def test_a_str_subclass_is_kept_as_the_plain_str_it_holds() -> None:
    class Tenant(StrEnum):
        ACME = "acme"

    context = Context(tenant=Tenant.ACME, session_id=Tenant.ACME)
    assert type(context.tenant) is str and context.tenant == "acme"
    assert type(context.session_id) is str
    assert Context(tenant="acme", downstream=Downstream("stripe")).downstream == Downstream(
        "stripe"
    )


def test_a_wrong_context_never_reaches_a_check() -> None:
    """Before, a tenant of another type failed only when the record was written (an
    undetermined decision naming ``len()``); now the caller's own line raises."""
    with pytest.raises(TypeError, match=r"Context\.tenant"):
        Action.tool("search", {}, context=Context(tenant=42))  # type: ignore[arg-type]
