"""The audit body, encoded in one C pass, is the standard library's sorted-key
compact ASCII JSON byte for byte for the plain values a redacted record holds, and
the same value where it cannot be (documented in ``encode_body``)."""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from interlock.store.chain import _encode_stdlib, encode_body

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.text(alphabet=st.characters(max_codepoint=0x7F), max_size=20),
)
VALUES = st.recursive(
    SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.lists(children, max_size=4).map(tuple),
        st.dictionaries(st.text(max_size=8), children, max_size=4),
    ),
    max_leaves=30,
)


def _has_unusual_float(value: Any) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value) or (value != 0 and abs(value) < 1e-4)
    if isinstance(value, dict):
        return any(_has_unusual_float(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_has_unusual_float(v) for v in value)
    return False


@settings(max_examples=800, deadline=None)
@given(st.dictionaries(st.text(max_size=8), VALUES, max_size=6))
def test_the_body_is_the_standard_librarys(record: dict[str, Any]) -> None:
    body = encode_body(record)
    assert body.isascii()
    assert json.loads(body, parse_constant=lambda _: None) == _normal(record)
    if not _has_unusual_float(record):
        assert body == _encode_stdlib(record)


def _normal(value: Any) -> Any:
    """The value as JSON gives it back: arrays for tuples, a non-finite float as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _normal(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_normal(v) for v in value]
    return value


def test_values_orjson_cannot_write_as_the_standard_library_does_go_to_it() -> None:
    class Label(str):
        pass

    record = {"del": "\x7f", "wide": 2**70, "keys": {1: "a"}, "set": {3}, "sub": Label("x")}
    assert encode_body(record) == _encode_stdlib(record)
    assert encode_body({"e": "é\ud800"}) == '{"e":"\\u00e9\\ud800"}'
    assert encode_body({"o": object()}).startswith('{"o":"<object object at')


def test_a_real_decision_record_is_written_exactly_as_before() -> None:
    record = {
        "kind": "decision",
        "ts": 1796327399.763534,
        "latency_us": 9.0,
        "tenant": "acme",
        "agent": "support-bot",
        "action": {"kind": "tool", "name": "shell", "arguments": {"command": "ls -la"}},
        "decision": "allow",
        "rule_ids": ["shell-read-only"],
        "approval": None,
    }
    assert encode_body(record) == json.dumps(
        record, sort_keys=True, separators=(",", ":"), ensure_ascii=True
    )
