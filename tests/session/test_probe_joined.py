"""The seams a session's tails made are probed in C (``_history.probe_joined``), their
fingerprints packed (``_speedups.across(..., True)`` → a ``PrintSet``): the same
fingerprints as the Python reference (``ArgumentTails._seam``, frozensets) for every
seam — ASCII or not, empty sides, decodings across the seam left to Python — the same
cache, and a ``TypeError`` or the callee's own error for what it was not made for."""

from __future__ import annotations

import base64
import string
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from interlock.session import fingerprints, tails
from interlock.session.fingerprints import probe_across
from interlock.session.tails import ArgumentTails

_history: Any = pytest.importorskip("interlock.session._history")
_speedups: Any = pytest.importorskip("interlock.session._speedups")
pytestmark = pytest.mark.skipif(
    tails._ACROSS_IN_C is None or not fingerprints.ACCELERATED,
    reason="the C probe of seams is not built",
)
probe_joined: Any = _history.probe_joined
PrintSet: Any = _history.PrintSet

SIDE = st.one_of(
    st.text(alphabet=string.ascii_letters + string.digits + " ._-@/=+%", max_size=48),
    st.text(max_size=20),  # not ASCII: the fallback
    st.sampled_from(["", "wJalrXUtnFEMI", "K7MDENG/bPxRfi", "CYEXAMPLEKEY", "ab\u00e9"]),
    st.builds(
        lambda raw: base64.b64encode(raw).decode(),  # an encoding cut in two
        st.binary(min_size=6, max_size=30),
    ),
)


def _reference(joined: list[tuple[str, str, str]]) -> list[tuple[str, Any]]:
    python = ArgumentTails(accelerated=False)
    return [(name, found) for name, left, right in joined if (found := python._seam(left, right))]


def _probed(joined: list[tuple[str, str, str]], seams: dict[Any, Any] | None = None) -> Any:
    return probe_joined(
        joined, {} if seams is None else seams, tails._ACROSS_IN_C, probe_across, 1024
    )


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b"]), SIDE, SIDE), max_size=8))
def test_the_probes_are_the_references(joined: list[tuple[str, str, str]]) -> None:
    got = _probed(joined)
    expected = _reference(joined)
    assert [name for name, _ in got] == [name for name, _ in expected]
    for (_, mine), (_, theirs) in zip(got, expected, strict=True):
        assert set(mine) == set(theirs)
        assert type(mine) in (PrintSet, frozenset)


def test_an_ascii_seam_is_packed_and_one_that_is_not_is_the_fallbacks() -> None:
    [(_, packed)] = _probed([("a", "wJalrXUtnFEMI", "K7MDENG/bPxRfiCY")])
    assert type(packed) is PrintSet
    assert set(packed) == set(probe_across("wJalrXUtnFEMI", "K7MDENG/bPxRfiCY"))
    [(_, other)] = _probed([("a", "wJalrXUtnFEMI\u00e9", "K7MDENG/bPxRfiCY")])
    assert type(other) is frozenset
    assert other == probe_across("wJalrXUtnFEMI\u00e9", "K7MDENG/bPxRfiCY")


def test_a_seam_probed_before_comes_from_the_cache_and_a_full_cache_is_emptied() -> None:
    seams: dict[Any, Any] = {("x", "y"): frozenset({7})}  # planted: served as it is
    assert _probed([("a", "x", "y")], seams) == [("a", frozenset({7}))]
    full: dict[Any, Any] = {(str(i), "y"): frozenset() for i in range(3)}
    probe_joined(
        [("a", "wJalrXUtnFEMI", "K7MDENG/bPxRfiCY")], full, tails._ACROSS_IN_C, probe_across, 3
    )
    assert list(full) == [("wJalrXUtnFEMI", "K7MDENG/bPxRfiCY")]  # emptied whole, then kept


def test_an_empty_probe_is_kept_but_not_returned() -> None:
    seams: dict[Any, Any] = {}
    assert _probed([("a", "ab", "cd"), ("b", "", "x")], seams) == []
    assert set(seams) == {("ab", "cd"), ("", "x")}


@pytest.mark.parametrize(
    "call",
    [
        lambda f, a: f((("a", "b", "c"),), {}, a, probe_across, 9),  # joined not a list
        lambda f, a: f([], [], a, probe_across, 9),  # seams not a dict
        lambda f, a: f([], {}, a, probe_across),  # too few
        lambda f, a: f([], {}, a, probe_across, "9"),  # kept not an int
        lambda f, a: f([("a", "b")], {}, a, probe_across, 9),  # a seam of two
        lambda f, a: f(["abc"], {}, a, probe_across, 9),  # a seam not a tuple
        lambda f, a: f([("a", b"b", "c")], {}, a, probe_across, 9),  # bytes: the fallback's
    ],
)
def test_what_it_was_not_made_for_is_refused(call: Any) -> None:
    with pytest.raises(TypeError):
        call(probe_joined, tails._ACROSS_IN_C)


def test_the_callees_errors_come_through() -> None:
    def broken(*_: object) -> Any:
        raise RuntimeError("probe failed")

    with pytest.raises(RuntimeError, match="probe failed"):  # across raising
        probe_joined([("a", "b", "c")], {}, broken, probe_across, 9)
    with pytest.raises(RuntimeError, match="probe failed"):  # the fallback raising
        probe_joined([("a", "b\u00e9", "c")], {}, tails._ACROSS_IN_C, broken, 9)


def test_the_packed_across_holds_what_the_frozen_one_holds() -> None:
    for tail, head in [("wJalrXUtnFEMI", "K7MDENG/bPxRfiCY"), ("a", "b"), ("x" * 40, "Y" * 40)]:
        frozen = _speedups.across(tail, head)
        raw = _speedups.across(tail, head, True)
        assert frozen is not None and raw is not None
        assert isinstance(raw[0], bytes) and len(raw[0]) % 8 == 0
        assert set(PrintSet(frozen[0])) == set(_history.packed(raw[0]))
    with pytest.raises(TypeError):
        _speedups.across("a", "b", True, 1)
