"""redact_value's fast path for plain values gives exactly what the full walk gives."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from interlock.core.redaction import REDACTED, Redactor, _NotPlain, _Walk

SECRETISH = st.sampled_from(
    [
        "password",
        "api_key",
        "X-Api-Key",
        "token",
        "amount",
        "order_id",
        "Authorization",
        "sk-live-abcdef1234567890abcd",
        "Bearer abc.def.ghi",
        "user@example.com",
        "ghp_" + "a" * 36,
        "plain text",
        "",
    ]
)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False),
    SECRETISH,
    st.text(max_size=30),
)
KEYS = st.one_of(SECRETISH, st.text(max_size=12))
VALUES = st.recursive(
    SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=5),
        st.lists(children, max_size=5).map(tuple),
        st.dictionaries(KEYS, children, max_size=5),
    ),
    max_leaves=40,
)

REDACTOR = Redactor(extra_patterns=[r"INTERNAL-\d{4}"])


@settings(max_examples=400, deadline=None)
@given(VALUES)
def test_the_fast_path_agrees_with_the_walk(value: Any) -> None:
    walked = _Walk(REDACTOR, 32).run(value)
    try:
        fast = REDACTOR._plain(value, 0, [512])
    except _NotPlain:
        return  # handed to the walk: nothing to compare
    assert fast == walked
    assert type(fast) is type(walked)


def test_secret_keys_and_values_are_redacted_on_the_fast_path() -> None:
    out = REDACTOR.redact_value(
        {"api_key": "x", "args": {"note": "token=abcdef123456 INTERNAL-1234", "n": 1}}
    )
    assert out == {
        "api_key": REDACTED,
        "args": {"note": "token=[REDACTED:token] [REDACTED:policy]", "n": 1},
    }


def test_what_the_fast_path_refuses_still_gets_redacted() -> None:
    class Weird(dict[str, Any]):
        pass

    cyclic: list[Any] = []
    cyclic.append(cyclic)
    deep: Any = "password=hunter2"
    for _ in range(20):
        deep = {"k": deep}
    assert REDACTOR.redact_value(Weird(password="hunter2")) == {"password": REDACTED}
    assert REDACTOR.redact_value(cyclic) == ["<cycle>"]
    assert "hunter2" not in repr(REDACTOR.redact_value(deep))
    assert REDACTOR.redact_value({1: "a", "b": b"xy"}) == {1: "a", "b": "<bytes len=2>"}
