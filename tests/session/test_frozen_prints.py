"""``FrozenPrints`` (``_history.c``): one step's fingerprints packed as a sorted uint64
array must behave exactly as the frozenset of the same ints for everything Interlock
does with a step's fingerprints — a fingerprint missing, or a set found disjoint that is
not, would hide a data flow. Every operation is checked against frozenset on the same
ints (the model), in both directions where Python tries both."""

from __future__ import annotations

import gc
import operator
import pickle
import random
import sys
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from interlock.session.packing import pack

try:
    from interlock.session._history import FrozenPrints, PrintSet, frozen_from_bytes
except ImportError:  # pragma: no cover - only where no compiler was at install time
    pytestmark = pytest.mark.skip(reason="the C extension is not built")

TOP = 2**64 - 1
#: Values that cross every boundary the packing has: 0, the top, the sign bit, the
#: 30-bit digits of CPython's ints, and a small pool so that two sets often meet.
EDGES = [0, 1, 2, 2**30 - 1, 2**30, 2**60 - 1, 2**60, 2**63 - 1, 2**63, TOP - 1, TOP]
VALUE = st.one_of(
    st.sampled_from(EDGES),
    st.integers(0, 40),
    st.integers(0, TOP),
)
PRINTS = st.frozensets(VALUE, max_size=60)
#: What a lookup may be handed: ints of any size and sign, and things that are not ints.
PROBE = st.one_of(
    VALUE,
    st.integers(-(2**70), 2**70),
    st.sampled_from([None, "1", b"\x01", (1,), 1.5, object()]),
)


def frozen(values: frozenset[int]) -> FrozenPrints:
    return FrozenPrints(values)


@settings(max_examples=400, deadline=None)
@given(values=PRINTS, probes=st.lists(PROBE, max_size=20))
@example(values=frozenset(), probes=[0, TOP])
@example(values=frozenset({0, TOP}), probes=[0, TOP, TOP + 1, -1, True, False])
def test_len_in_iter_bool_as_frozenset(values: frozenset[int], probes: list[Any]) -> None:
    fp = frozen(values)
    assert len(fp) == len(values)
    assert bool(fp) == bool(values)
    assert list(fp) == sorted(values)  # ascending
    for probe in list(values) + probes:
        try:
            expected = probe in values
        except TypeError:  # pragma: no cover - every probe here is hashable
            expected = False
        assert (probe in fp) == expected, probe


@settings(max_examples=400, deadline=None)
@given(a=PRINTS, b=PRINTS)
@example(a=frozenset(), b=frozenset())
@example(a=frozenset({0}), b=frozenset({TOP}))
@example(a=frozenset({1, 2}), b=frozenset({1, 2, 3}))
def test_equality_orders_and_hash_as_frozenset(a: frozenset[int], b: frozenset[int]) -> None:
    fa, fb = frozen(a), frozen(b)
    assert hash(fa) == hash(a)
    assert hash(fa) == hash(a)  # the cached value
    others: list[Any] = [b, set(b), fb, PrintSet(b)]
    for other in others:
        assert (fa == other) == (a == b), type(other)
        assert (other == fa) == (a == b), type(other)
        assert (fa != other) == (a != b), type(other)
        assert (other != fa) == (a != b), type(other)
        assert (fa <= other) == (a <= b), type(other)
        assert (fa < other) == (a < b), type(other)
        assert (fa >= other) == (a >= b), type(other)
        assert (fa > other) == (a > b), type(other)
        assert (other >= fa) == (b >= a), type(other)
        assert (other <= fa) == (b <= a), type(other)
    assert fa == a and a == fa  # both directions on purpose
    assert {fa: 1}[a] == 1  # a dict finds it by the frozenset, and the other way
    assert {a: 1}[fa] == 1
    assert fa != list(a)
    assert (fa == tuple(a)) is False


@settings(max_examples=400, deadline=None)
@given(a=PRINTS, b=PRINTS, extra=st.lists(PROBE, max_size=5))
def test_isdisjoint_as_frozenset(a: frozenset[int], b: frozenset[int], extra: list[Any]) -> None:
    fa = frozen(a)
    expected = a.isdisjoint(b)
    for other in (b, set(b), frozen(b), PrintSet(b), list(b), iter(sorted(b))):
        assert fa.isdisjoint(other) == expected, type(other)
    assert PrintSet(b).isdisjoint(fa) == expected
    assert b.isdisjoint(fa) == expected
    hashable_extra = [x for x in extra if not isinstance(x, int) or x not in a]
    assert fa.isdisjoint(list(b) + hashable_extra) == expected
    # a large set against a small one, and the other way (both lookup directions)
    big = set(b) | set(range(1000, 1000 + 8 * len(a) + 10))
    assert fa.isdisjoint(big) == a.isdisjoint(big)
    assert frozen(frozenset(big)).isdisjoint(a) == a.isdisjoint(big)


@settings(max_examples=400, deadline=None)
@given(a=PRINTS, b=PRINTS)
@example(a=frozenset({0, TOP}), b=frozenset({TOP}))
def test_and_or_sub_as_frozenset(a: frozenset[int], b: frozenset[int]) -> None:
    fa, fb = frozen(a), frozen(b)
    for other, expected_type in ((b, frozenset), (set(b), frozenset), (fb, frozenset)):
        for got, want in (
            (fa & other, a & b),
            (other & fa, b & a),
            (fa | other, a | b),
            (other | fa, b | a),
            (fa - other, a - b),
            (other - fa, b - a),
        ):
            assert type(got) is expected_type
            assert got == want


def test_operators_with_anything_else_are_not_implemented() -> None:
    fp = FrozenPrints({1, 2})
    for other in ([1], (1,), 1, None, "1"):
        for op in (operator.and_, operator.or_, operator.sub):
            with pytest.raises(TypeError):
                op(fp, other)
            with pytest.raises(TypeError):
                op(other, fp)
    assert FrozenPrints.__eq__(fp, [1, 2]) is NotImplemented
    assert fp != [1, 2]


@settings(max_examples=300, deadline=None)
@given(values=PRINTS)
@example(values=frozenset())
@example(values=frozenset({0, TOP, 2**63}))
def test_pickle_bytes_sizeof_repr(values: frozenset[int]) -> None:
    fp = frozen(values)
    back = pickle.loads(pickle.dumps(fp))
    assert type(back) is FrozenPrints
    assert back == values
    assert hash(back) == hash(values)
    assert fp.to_bytes() == pack(values)
    assert sys.getsizeof(fp) - sys.getsizeof(FrozenPrints()) == 8 * len(values)
    assert repr(fp) == f"FrozenPrints({sorted(values)!r})"


@settings(max_examples=300, deadline=None)
@given(raw=st.lists(VALUE, max_size=80))
def test_from_bytes_any_order_and_repeats(raw: list[int]) -> None:
    data = b"".join(v.to_bytes(8, sys.byteorder) for v in raw)
    fp = frozen_from_bytes(data)
    assert fp == frozenset(raw)
    assert list(fp) == sorted(set(raw))
    assert FrozenPrints(raw) == frozenset(raw)  # a list with repeats, unsorted
    assert FrozenPrints(iter(raw)) == frozenset(raw)


@settings(max_examples=200, deadline=None)
@given(values=PRINTS, wide=st.booleans())
def test_a_print_set_reads_it_and_it_reads_a_print_set(values: frozenset[int], wide: bool) -> None:
    fp = frozen(values)
    ps = PrintSet(fp)
    assert ps == values
    ps2 = PrintSet([5])
    ps2.update(fp)
    assert ps2 == values | {5}
    assert FrozenPrints(PrintSet(values)) == values
    if wide:
        with pytest.raises(ValueError):
            FrozenPrints(PrintSet(values | {2**64}))


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        ([-1], ValueError),
        ([2**64], ValueError),
        ({2**64 + 5, 1}, ValueError),
        (frozenset({-(2**70)}), ValueError),
        ([1.0], TypeError),
        ({"1"}, TypeError),
        ([None], TypeError),
        (5, TypeError),
    ],
)
def test_only_ints_in_range_are_taken(bad: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        FrozenPrints(bad)


def test_from_bytes_refuses_a_partial_value() -> None:
    with pytest.raises(TypeError):
        frozen_from_bytes(b"\x00" * 9)
    with pytest.raises(TypeError):
        frozen_from_bytes("0" * 8)  # type: ignore[arg-type]
    assert frozen_from_bytes(b"") == frozenset()


def test_immutable_and_not_collected() -> None:
    fp = FrozenPrints({1, 2, 3})
    assert not gc.is_tracked(fp)
    with pytest.raises(AttributeError):
        fp.add(4)  # type: ignore[attr-defined]
    kept = fp
    fp |= {4}  # a new frozenset, as with a frozenset: the packed one is unchanged
    assert type(fp) is frozenset and fp == {1, 2, 3, 4}
    assert kept == {1, 2, 3}
    assert FrozenPrints(kept) is kept  # immutable: no copy made


@pytest.mark.parametrize("top", [None, 0, 0xAB, 0xFF])
@pytest.mark.parametrize("count", [31, 33, 400, 4096])
def test_large_inputs_sorted_as_sorted_does(top: int | None, count: int) -> None:
    """Hashes spread over the bytes (the usual input) and values that all share a top
    byte (a bucket too large for the insertion sort), with repeats."""
    rng = random.Random(count * 1000 + (top or 0))
    values = [rng.getrandbits(64) for _ in range(count)]
    if top is not None:
        values = [(v >> 8) | (top << 56) for v in values]
    values += values[: count // 4]  # repeats
    rng.shuffle(values)
    fp = frozen_from_bytes(b"".join(v.to_bytes(8, sys.byteorder) for v in values))
    assert list(fp) == sorted(set(values))
    assert list(FrozenPrints(set(values))) == sorted(set(values))
    assert list(FrozenPrints(values)) == sorted(set(values))
