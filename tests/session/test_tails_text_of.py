"""``tails._text_of`` reads decoded bytes as text exactly when they are UTF-8 — as a
strict ``bytes.decode`` does — without raising for the bytes that are not (most values
read as hex or base64: ids, account numbers, hashes), U+FFFD of their own included."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from interlock.session.tails import _text_of


def _strict(raw: bytes) -> str | None:
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return None


REPLACED = "\ufffd".encode()
PARTS = st.sampled_from([REPLACED, b"\xff", b"\xe2\x82", b"\xe2\x82\xac", b"ok", b"\x00", b"\xc3"])


@settings(max_examples=500, deadline=None)
@given(st.lists(st.one_of(st.binary(max_size=8), PARTS), max_size=6).map(b"".join))
def test_it_is_the_strict_decoding(raw: bytes) -> None:
    assert _text_of(raw) == _strict(raw)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b"", ""),
        (b"plain", "plain"),
        ("caf\u00e9".encode(), "caf\u00e9"),
        (REPLACED, "\ufffd"),  # its own U+FFFD: text
        (REPLACED + b"\xff", None),  # its own, and a byte that is not UTF-8
        (b"\xff" + REPLACED, None),
        (b"\xde\xad\xbe\xef", None),
        (None, None),
    ],
)
def test_the_edges(raw: bytes | None, expected: str | None) -> None:
    assert _text_of(raw) == expected
