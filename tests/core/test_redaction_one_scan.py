"""redact_value's one-scan path (built-in rules only: one trigger scan over all of a
record's strings decides that none needs redacting) gives exactly the full walk's
result, whether or not the record holds a secret."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from interlock.core.redaction import REDACTED, Redactor, _Walk

SECRETISH = st.sampled_from(
    [
        "password",
        "api_key",
        "token",
        "amount",
        "Authorization",
        "sk-live-abcdef1234567890abcd",
        "Bearer abc.def.ghi",
        "user@example.com",
        "ghp_" + "a" * 36,
        "AKIA" + "Z" * 16,
        "postgres://bob:hunter2@db/x",
        "plain text",
        "ΑΣ",
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

REDACTOR = Redactor()


@settings(max_examples=600, deadline=None)
@given(VALUES)
def test_one_scan_agrees_with_the_walk(value: Any) -> None:
    walked = _Walk(REDACTOR, 32).run(value)
    fast = REDACTOR.redact_value(value)
    assert fast == walked
    assert type(fast) is type(walked)


def test_a_secret_split_across_strings_is_still_found_in_its_own() -> None:
    # The joined scan wakes the rules; each string is then redacted on its own.
    record = {"a": "sk-live-", "b": "abcdef1234567890abcd", "c": "sk-live-abcdef1234567890abcd"}
    out = REDACTOR.redact_value(record)
    assert isinstance(out, dict)
    assert out["a"] == "sk-live-" and out["b"] == "abcdef1234567890abcd"
    assert "abcdef1234567890abcd" not in out["c"]


def test_a_clean_record_is_copied_not_shared() -> None:
    record: dict[str, Any] = {"action": {"arguments": {"command": "ls -la"}}, "ids": ["r1"]}
    out = REDACTOR.redact_value(record)
    assert out == record
    assert isinstance(out, dict)
    assert out is not record and out["action"] is not record["action"]
    assert out["ids"] is not record["ids"]


def test_a_secret_key_is_redacted_on_the_one_scan_path() -> None:
    assert REDACTOR.redact_value({"password": "x", "user": "bob"}) == {
        "password": REDACTED,
        "user": "bob",
    }
