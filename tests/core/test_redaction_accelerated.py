"""The C fast path of redact_value (``interlock.core._redaction``) gives exactly what its
Python reference, ``Redactor._plain``, gives: the same redacted copy — types, key order
and all — where the value is plain, and a refusal (the full walk then decides) where the
reference refuses. redact_value is the same on both paths for any value. Where the
extension is not built these are skipped (the Python path is a legitimate install);
where it is built, it is the path taken."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.core.redaction_paths import on_path

from interlock.core import redaction
from interlock.core.redaction import REDACTED, Redactor, _NotPlain

try:
    from interlock.core import _redaction
except ImportError:  # pragma: no cover - only where no compiler was at install time
    _redaction = None  # type: ignore[assignment]

pytestmark = pytest.mark.skipif(_redaction is None, reason="the C accelerator is not built")

REDACTOR = Redactor(extra_patterns=[r"INTERNAL-\d{4}"])


class Text(str):
    pass


class Number(int):
    pass


class Mapping(dict[Any, Any]):
    pass


class Items(list[Any]):
    pass


SECRETISH = st.sampled_from(
    [
        "password",
        "api_key",
        "X-Api-Key",
        "apiKey",
        "idempotency_key",
        "token",
        "amount",
        "Authorization",
        "sk-live-abcdef1234567890abcd",
        "sk_live_4f9Qz2LmX8pRt6Vw1YbN3cKd",
        "Bearer abc.def.ghi",
        "password=hunter2-hunter2",
        "curl -u bob:s3cretpass https://example.com",
        "INTERNAL-1234",
        "ghp_" + "a" * 36,
        "plain text",
        "x" * 300 + " token=abcdef123456",
        "",
    ]
)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.just(2**13_001),
    st.floats(),
    SECRETISH,
    st.text(max_size=30),
    st.binary(max_size=4),
    SECRETISH.map(Text),
    st.integers(max_value=9).map(Number),
)
KEYS = st.one_of(SECRETISH, st.text(max_size=12), st.integers(max_value=3), SECRETISH.map(Text))
VALUES = st.recursive(
    SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=6),
        st.lists(children, max_size=6).map(tuple),
        st.lists(children, max_size=3).map(Items),
        st.dictionaries(KEYS, children, max_size=6),
        st.dictionaries(KEYS, children, max_size=3).map(Mapping),
    ),
    max_leaves=60,
)


def python_plain(redactor: Redactor, value: object) -> object:
    """The reference: ``_plain``'s copy, or NotImplemented where it refuses."""
    try:
        return redactor._plain(value, 0, [redaction._FAST_NODES])
    except _NotPlain:
        return NotImplemented


def c_plain(
    redactor: Redactor, value: object, *, is_secret_key: Callable[[str], bool] | None = None
) -> object:
    assert _redaction is not None
    return _redaction.plain(
        value,
        redactor._clean,
        redactor.redact,
        is_secret_key or redaction._is_secret_key,
        REDACTED,
        redaction._FAST_DEPTH,
        redaction._FAST_NODES,
        redaction._CLEAN_MAX_CHARS,
    )


def same(a: object, b: object) -> bool:
    """Equal, of the same types all the way down, dict keys in the same order (NaN
    equal to NaN)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a == b or (math.isnan(a) and math.isnan(float(b)))  # type: ignore[arg-type]
    if isinstance(a, dict):
        assert isinstance(b, dict)
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        assert isinstance(b, list | tuple)
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def _accelerated_in_a_new_process(**env: str) -> str:
    environ = {k: v for k, v in os.environ.items() if k != "INTERLOCK_NO_SPEEDUPS"}
    code = "from interlock.core import redaction as r; print(r.ACCELERATED)"
    done = subprocess.run(
        [sys.executable, "-c", code], env=environ | env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def test_the_c_path_is_taken_by_default_and_the_env_switch_turns_it_off() -> None:
    assert _accelerated_in_a_new_process() == "True"
    assert _accelerated_in_a_new_process(INTERLOCK_NO_SPEEDUPS="0") == "True"
    assert _accelerated_in_a_new_process(INTERLOCK_NO_SPEEDUPS="1") == "False"


@pytest.mark.skipif(
    os.environ.get("INTERLOCK_NO_SPEEDUPS", "") not in ("", "0"), reason="INTERLOCK_NO_SPEEDUPS"
)
def test_the_c_path_is_taken_where_it_is_built() -> None:
    assert redaction.ACCELERATED
    assert redaction._plain_c is _redaction.plain  # type: ignore[union-attr]


@settings(max_examples=600, deadline=None)
@given(VALUES)
def test_the_c_walk_agrees_with_the_python_reference(value: Any) -> None:
    expected = python_plain(REDACTOR, value)
    got = c_plain(REDACTOR, value)
    assert same(got, expected), (got, expected)


@settings(max_examples=300, deadline=None)
@given(VALUES)
def test_redact_value_is_the_same_on_both_paths(value: Any) -> None:
    with on_path(False):
        python = Redactor(extra_patterns=[r"INTERNAL-\d{4}"]).redact_value(value)
    with on_path(True):
        c = Redactor(extra_patterns=[r"INTERNAL-\d{4}"]).redact_value(value)
    assert same(c, python), (c, python)


def test_a_walk_that_let_a_secret_key_through_would_be_caught() -> None:
    # The comparison above is not vacuous: a C walk told no key is secret differs.
    value = {"args": {"api_key": "abc", "n": [1, 2.5, None]}}
    broken = c_plain(REDACTOR, value, is_secret_key=lambda key: False)
    assert not same(broken, python_plain(REDACTOR, value))
    assert same(c_plain(REDACTOR, value), python_plain(REDACTOR, value))


def test_secrets_are_redacted_on_the_c_path() -> None:
    value = {
        "password": {"deep": "anything"},
        "X-Api-Key": "k",
        "cmd": [
            "curl -H 'Authorization: Bearer abc.def-123' https://x.example",
            ("token=abcdef123456",),
        ],
        "note": "INTERNAL-1234 and sk_live_4f9Qz2LmX8pRt6Vw1YbN3cKd",
    }
    out = c_plain(REDACTOR, value)
    assert out == {
        "password": REDACTED,
        "X-Api-Key": REDACTED,
        "cmd": [
            "curl -H 'Authorization: Bearer [REDACTED:authorization]' https://x.example",
            ("token=[REDACTED:token]",),
        ],
        "note": "[REDACTED:policy] and [REDACTED:stripe-key]",
    }


def test_what_the_c_walk_refuses_is_refused() -> None:
    cyclic: list[Any] = []
    cyclic.append(cyclic)
    deep: Any = "x"
    for _ in range(redaction._FAST_DEPTH + 1):
        deep = {"k": deep}
    wide = list(range(redaction._FAST_NODES + 1))
    for value in (
        cyclic,
        deep,
        wide,
        {"a": Text("s")},
        {1: "x"},
        [b"raw"],
        {"password=hunter2-hunter2": 1, "password=[REDACTED:password]": 2},  # keys clash
        object(),
    ):
        assert c_plain(REDACTOR, value) is NotImplemented
        assert python_plain(REDACTOR, value) is NotImplemented


def test_a_container_changed_while_it_is_read_is_left_to_the_walk() -> None:
    data: dict[str, Any] = {"a": "one", "b": "two", "c": "three"}
    items: list[Any] = ["one", "two", "three"]

    def shrink(value: dict[str, Any] | list[Any]) -> Callable[[str], str]:
        def redact(text: str) -> str:  # another thread, while the walk calls out
            if len(value) == 3:
                value.pop("c") if isinstance(value, dict) else value.pop()
            return text

        return redact

    for value in (data, items):
        out = _redaction.plain(  # type: ignore[union-attr]
            value, set(), shrink(value), redaction._is_secret_key, REDACTED, 8, 512, 256
        )
        assert out is NotImplemented
    assert data == {"a": "one", "b": "two"}
    assert items == ["one", "two"]


def test_an_error_in_redact_propagates_and_redact_value_still_answers() -> None:
    def failing(text: str) -> str:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        _redaction.plain(  # type: ignore[union-attr]
            {"a": "b"}, set(), failing, redaction._is_secret_key, REDACTED, 8, 512, 256
        )
    assert REDACTOR.redact_value({"token": "t", "a": ["password=hunter2-hunter2"]}) == {
        "token": REDACTED,
        "a": ["password=[REDACTED:password]"],
    }
