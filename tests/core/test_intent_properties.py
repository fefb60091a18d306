"""Intent hashes, as properties (RFC 8785): any change to any field of the action or of
its trusted context is a new intent; the key order, the whitespace and the number
formatting of the JSON the arguments arrived in are not. Random actions and contexts."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

import rfc8785
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from interlock import Action, Context, Downstream
from interlock.core.intent import intent_hash

TEXT = st.text(min_size=1, max_size=12)
OPTIONAL = st.none() | TEXT
# JSON values in the I-JSON range (an integer beyond 2**53 has no exact JSON form)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False, width=64)
    | st.text(max_size=12)
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=8,
)
ARGUMENTS = st.dictionaries(TEXT, VALUES, max_size=5)
DOWNSTREAM = st.none() | st.builds(Downstream, TEXT, OPTIONAL, OPTIONAL)
CONTEXTS = st.builds(
    Context,
    tenant=TEXT,
    agent=OPTIONAL,
    session_id=OPTIONAL,
    run_id=OPTIONAL,
    idempotency_key=OPTIONAL,
    downstream=DOWNSTREAM,
)
ACTIONS = st.builds(
    Action,
    kind=st.sampled_from(["tool", "llm", "mcp", "browser", "effect"]),
    name=TEXT,
    arguments=ARGUMENTS,
    target=OPTIONAL,
    capabilities=st.lists(TEXT, max_size=3, unique=True).map(tuple),
    context=CONTEXTS,
)
#: what the intent binds: every field of the action and its trusted context but the
#: framework's call id (correlation only) and the description / schema / scope hints
FIELDS = [
    "kind",
    "name",
    "target",
    "capabilities",
    "arguments",
    "tenant",
    "agent",
    "session_id",
    "run_id",
    "idempotency_key",
    "downstream",
]


def changed(action: Action, field: str, value: Any) -> Action:
    if field in ("kind", "name", "target", "capabilities", "arguments"):
        return dataclasses.replace(action, **{field: value})
    return dataclasses.replace(
        action, context=dataclasses.replace(action.context, **{field: value})
    )


def new_value(data: st.DataObject, action: Action, field: str) -> Any:
    if field == "kind":
        return data.draw(st.sampled_from(["tool", "llm", "mcp", "browser", "effect"]))
    if field == "capabilities":
        return data.draw(st.lists(TEXT, max_size=3, unique=True).map(tuple))
    if field == "arguments":
        return data.draw(ARGUMENTS)
    if field == "downstream":
        return data.draw(DOWNSTREAM)
    if field in ("name", "tenant"):
        return data.draw(TEXT)
    return data.draw(OPTIONAL)


@settings(max_examples=300, deadline=None)
@given(ACTIONS, st.sampled_from(FIELDS), st.data())
def test_any_change_to_any_field_is_a_new_intent(
    action: Action, field: str, data: st.DataObject
) -> None:
    value = new_value(data, action, field)
    before = (
        getattr(action, field)
        if field in ("kind", "name", "target", "capabilities", "arguments")
        else getattr(action.context, field)
    )
    if field == "capabilities":
        assume(sorted(value) != sorted(before))  # their order is not the call's
    elif field == "arguments":
        assume(rfc8785.dumps(value) != rfc8785.dumps(dict(before)))  # 1 and 1.0 are one
    else:
        assume(value != before)
    assert intent_hash(changed(action, field, value)) != intent_hash(action)


def _reformat(value: Any, data: st.DataObject) -> str:
    """``value`` as JSON text, its keys in a drawn order, drawn whitespace and number
    spellings of the same number (``100.0``, ``100e0``, ``100.00E+0``)."""
    space = data.draw(st.sampled_from(["", " ", "\n  ", "\t"]))
    if isinstance(value, dict):
        keys = data.draw(st.permutations(list(value)))
        inner = f",{space}".join(
            f"{json.dumps(k)}{space}:{space}{_reformat(value[k], data)}" for k in keys
        )
        return "{" + space + inner + space + "}"
    if isinstance(value, list):
        return "[" + f",{space}".join(_reformat(v, data) for v in value) + "]"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        whole = int(value)
        return data.draw(st.sampled_from([f"{whole}.0", f"{whole}e0", f"{whole}.00E+0"]))
    return json.dumps(value)


@settings(max_examples=300, deadline=None)
@given(ACTIONS, st.data())
def test_key_order_whitespace_and_number_spelling_are_not_the_intent(
    action: Action, data: st.DataObject
) -> None:
    text = _reformat(dict(action.arguments), data)
    again = json.loads(text)
    assert all(
        not isinstance(v, float) or math.isfinite(v) for v in again.values()
    )  # a spelling is a spelling
    assert intent_hash(dataclasses.replace(action, arguments=again)) == intent_hash(action)
    # and as the adapters receive arguments: a JSON string (OpenAI's function calls)
    assert intent_hash(Action.tool(action.name, text, context=action.context)) == intent_hash(
        Action.tool(action.name, dict(action.arguments), context=action.context)
    )
