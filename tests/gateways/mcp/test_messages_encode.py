"""The gateway writes a message as ``json.dumps(..., ensure_ascii=False,
separators=(",", ":"))`` always has, whichever encoder writes it (orjson where the two
agree, ``json`` where they could differ: floats, lone surrogates, integers past 64
bits): random JSON values, every float form, and the values that take the slow path
on purpose, give the same bytes as the reference."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from interlock.gateways.mcp.messages import NotAMessage, _fast_line, encode, parse_body

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
VALUES = st.recursive(
    SCALARS,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4)
    ),
    max_leaves=20,
)


def reference(body: Any) -> bytes:
    text = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
    try:
        return text.encode("utf-8") + b"\n"
    except UnicodeEncodeError:
        return json.dumps(body, separators=(",", ":")).encode("ascii") + b"\n"


@settings(max_examples=2000, deadline=None)
@given(st.dictionaries(st.text(), VALUES, max_size=6))
def test_encode_writes_the_reference_bytes(body: dict[str, Any]) -> None:
    assert encode(body) == reference(body)


@pytest.mark.parametrize(
    "value",
    [
        1e-05,
        1e-7,
        1e16,
        1e100,
        0.1,
        -0.0,
        5e-324,
        2**64,
        -(2**70),
        "\ud800",
    ],
)
def test_the_values_that_could_differ_take_the_reference_path(value: Any) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "result": {"value": value}}
    assert _fast_line(body) is None
    assert encode(body) == reference(body)


@pytest.mark.parametrize("text", ["1e-5", "v1.2", ":1.5", "[2.0,"])
def test_text_that_looks_like_a_float_is_written_the_same_either_way(text: str) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "result": {"text": text, "list": [text, 3]}}
    assert encode(body) == reference(body)


def test_the_usual_message_takes_the_fast_path_and_is_the_same() -> None:
    body = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "héllo \u2028 ✓"}},
    }
    assert _fast_line(body) == reference(body)


def test_a_body_with_a_lone_surrogate_is_still_refused() -> None:
    with pytest.raises(NotAMessage, match="lone surrogate"):
        parse_body(b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"\\ud800"}}')
    honest = parse_body(
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"\\u00e9"}}'
    )
    assert (
        honest.raw
        == '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"é"}}\n'.encode()
    )
