"""The packed fingerprint set (``interlock.session._history.PrintSet``) against ``set`` as
its model: random sequences of changes and lookups (growth, duplicates, 0 and 2**64 - 1,
ints outside the range), the probe-sized lookups the session check makes (a hit in any
position of the probe), the errors, and the Python fallback (a ``set``) the history uses
when the extension is not built or ``INTERLOCK_NO_SPEEDUPS`` is set."""

from __future__ import annotations

import os
import pickle
import random
import subprocess
import sys
import tracemalloc
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from interlock.session import history
from interlock.session.history import FingerprintIndex, Step

try:
    from interlock.session._history import PrintSet
except ImportError:  # pragma: no cover - only where no compiler was at install time
    PrintSet = None  # type: ignore[assignment,misc]

needs_c = pytest.mark.skipif(PrintSet is None, reason="the C extension is not built")

TOP = 2**64 - 1
#: a few values often (duplicates), the edges, and any 64-bit value
fingerprint = st.one_of(
    st.sampled_from([0, 1, 2, TOP, TOP - 1, 2**63, 2**61 - 1]),
    st.integers(0, 40),
    st.integers(0, TOP),
)
#: ints a caller may hand over that are no fingerprints (kept exactly, beside the table)
wide = st.sampled_from([-1, -(2**64), 2**64, 2**100])
value = st.one_of(fingerprint, fingerprint, fingerprint, wide)
values = st.lists(value, max_size=40)


class PrintSetModel(RuleBasedStateMachine):
    """A PrintSet and a set, changed alike, must hold the same ints."""

    def __init__(self) -> None:
        super().__init__()
        self.packed = PrintSet()
        self.model: set[int] = set()

    @rule(x=value)
    def add(self, x: int) -> None:
        self.packed.add(x)
        self.model.add(x)

    @rule(xs=values, kind=st.sampled_from(["frozenset", "set", "list", "printset", "ior"]))
    def update(self, xs: list[int], kind: str) -> None:
        if kind == "list":
            self.packed.update(xs)
        elif kind == "printset":
            self.packed.update(PrintSet(xs))
        elif kind == "ior":
            self.packed |= frozenset(xs)
        else:
            self.packed.update(frozenset(xs) if kind == "frozenset" else set(xs))
        self.model.update(xs)

    @rule(n=st.integers(1, 3000), seed=st.integers(0, 2**32))
    def grow(self, n: int, seed: int) -> None:
        rng = random.Random(seed)
        more = [rng.getrandbits(64) for _ in range(n)] + [rng.randrange(64) for _ in range(n // 4)]
        self.packed |= frozenset(more)
        self.model.update(more)

    @rule(xs=values, kind=st.sampled_from(["frozenset", "set", "list", "printset", "iter"]))
    def isdisjoint(self, xs: list[int], kind: str) -> None:
        arg: Any = {
            "frozenset": frozenset(xs),
            "set": set(xs),
            "list": xs,
            "printset": PrintSet(xs),
            "iter": iter(xs),
        }[kind]
        assert self.packed.isdisjoint(arg) == self.model.isdisjoint(xs)

    @precondition(lambda self: bool(self.model))
    @rule(data=st.data(), extra=values)
    def isdisjoint_with_a_hit(self, data: st.DataObject, extra: list[int]) -> None:
        """A probe sharing exactly one held value, wherever it falls in the probe."""
        held = data.draw(st.sampled_from(sorted(self.model)))
        probe = [x for x in extra if x not in self.model]
        probe.insert(data.draw(st.integers(0, len(probe))), held)
        assert not self.packed.isdisjoint(frozenset(probe))
        assert not self.packed.isdisjoint(probe)

    @rule(x=value)
    def contains(self, x: int) -> None:
        assert (x in self.packed) == (x in self.model)

    @rule()
    def copy(self) -> None:
        copied = self.packed.copy()
        assert copied == self.model and copied == self.packed
        copied.add(12345678901)
        assert (12345678901 in self.packed) == (12345678901 in self.model)

    @rule()
    def clear(self) -> None:
        self.packed.clear()
        self.model.clear()

    @rule(xs=values)
    def compare(self, xs: list[int]) -> None:
        other = set(xs)
        for packed_other in (other, frozenset(other), PrintSet(other)):
            assert (self.packed == packed_other) == (self.model == other)
            assert (self.packed != packed_other) == (self.model != other)
            assert (self.packed <= packed_other) == (self.model <= other)
            assert (self.packed >= packed_other) == (self.model >= other)
            assert (self.packed < packed_other) == (self.model < other)
            assert (self.packed > packed_other) == (self.model > other)
        assert (other <= self.packed) == (other <= self.model)

    @invariant()
    def same_ints(self) -> None:
        assert len(self.packed) == len(self.model)
        assert sorted(self.packed) == sorted(self.model)
        assert self.packed == self.model and self.model == self.packed
        assert self.packed == frozenset(self.model)
        assert bool(self.packed) == bool(self.model)


TestPrintSetModel = needs_c(PrintSetModel.TestCase)
TestPrintSetModel.settings = settings(max_examples=150, stateful_step_count=30, deadline=None)


@needs_c
@pytest.mark.parametrize("size", [1, 31, 32, 33, 47, 64, 65, 200])
def test_a_probe_meets_the_index_at_any_of_its_positions(size: int) -> None:
    """The session check's test: a probe of ``size`` (batches of 32 prefetched lookups)
    against a 6.5k index, a shared value at each position in turn; disjoint without it."""
    rng = random.Random(size)
    index_values = {rng.getrandbits(64) for _ in range(6500)}
    index = PrintSet(index_values)
    probe = [v for v in (rng.getrandbits(64) for _ in range(size + 5)) if v not in index_values]
    probe = probe[:size]
    assert index.isdisjoint(frozenset(probe)) and index.isdisjoint(probe)
    shared = sorted(index_values)
    for at in range(size):
        hit = [*probe[:at], shared[at], *probe[at + 1 :]]
        assert not index.isdisjoint(hit), at
        assert not index.isdisjoint(frozenset(hit)), at
        assert not PrintSet(hit).isdisjoint(index), at
        assert not index.isdisjoint(PrintSet(hit)), at


@needs_c
def test_a_large_set_against_a_small_print_set() -> None:
    """A frozenset much larger than the PrintSet: the PrintSet's values are looked up."""
    big = frozenset(range(10, 10_000))
    assert PrintSet([1, 2, 2**70]).isdisjoint(big)
    assert not PrintSet([1, 9_999]).isdisjoint(big)
    assert not PrintSet([0, 2**70]).isdisjoint(big | {2**70})


@needs_c
def test_values_crowded_in_low_bits_all_stay() -> None:
    """Values alike in their low (or high) bits, and a run 1..n: every one found, none
    more, through many rehashes."""
    crowded = [k << 40 for k in range(5000)] + [(1 << 63) | k for k in range(5000)]
    packed = PrintSet()
    for x in crowded:
        packed.add(x)
    packed.update(range(1, 5000))
    model = set(crowded) | set(range(1, 5000))
    assert len(packed) == len(model) and packed == model
    assert all(x in packed for x in model)
    assert not any(x in packed for x in (3 << 40 | 1, 5001, 2**64 - 2))


@needs_c
def test_errors_and_what_is_no_fingerprint() -> None:
    packed = PrintSet([1, 2])
    with pytest.raises(TypeError, match="a fingerprint is an int"):
        packed.add("a")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="a fingerprint is an int"):
        packed.update([3, 4, "a"])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        packed.update(frozenset({5, 1.5}))  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        PrintSet(["x"])  # type: ignore[list-item]
    assert packed == {1, 2}  # nothing of a refused update was added
    with pytest.raises(TypeError):
        packed |= [3]  # type: ignore[arg-type]  # as a set: |= takes sets only
    with pytest.raises(TypeError):
        hash(packed)
    with pytest.raises(TypeError):
        PrintSet(5)  # type: ignore[arg-type]
    # looked up, anything but an int is not in it (set would raise for the unhashable)
    assert "1" not in packed and 1.5 not in packed and None not in packed
    assert packed.isdisjoint(["1", [1], None]) and not packed.isdisjoint(["1", 2])
    assert packed != [1, 2] and packed != frozenset({1, 2, 3})
    it = iter(packed)
    next(it)
    packed.add(7)
    with pytest.raises(RuntimeError, match="changed during iteration"):
        next(it)


@needs_c
def test_copies_pickles_and_sizes() -> None:
    packed = PrintSet([0, 1, TOP, -3, 2**64])
    assert pickle.loads(pickle.dumps(packed)) == packed
    assert packed.copy() == packed and packed.copy() is not packed
    assert repr(PrintSet([3, 1])) == "PrintSet([1, 3])"
    assert sys.getsizeof(PrintSet(range(1, 1000))) >= 1000 * 8


@needs_c
def test_memory_per_fingerprint_is_a_third_of_a_sets() -> None:
    """tracemalloc counts the table (PyMem): under 24 bytes a fingerprint (8 a slot,
    at most 3/4 full, at least 3/8 just after a doubling)."""
    rng = random.Random(7)
    values = frozenset(rng.getrandbits(64) for _ in range(6500))
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        packed = PrintSet(values)
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert len(packed) == 6500
    assert (after - before) / len(values) < 24


def _step(seq: int, prints: frozenset[int], kind: str = "tool", trusted: bool = False) -> Step:
    return Step(seq, 0.0, kind, "t", "allow", None, frozenset(), prints, trusted, True)  # type: ignore[arg-type]


@given(st.lists(st.frozensets(value, max_size=12), max_size=8), st.frozensets(value, max_size=12))
@settings(max_examples=200, deadline=None)
def test_an_index_tells_the_same_on_both_paths(
    steps: list[frozenset[int]], probed: frozenset[int]
) -> None:
    """FingerprintIndex on a PrintSet and on a set (the fallback): the same union, the
    same answer to a probe."""
    made = [_step(i + 1, prints) for i, prints in enumerate(steps)]
    packed = FingerprintIndex(tuple(made))
    reference = _python_index(tuple(made))
    assert isinstance(reference.prints, set)
    assert packed.prints == reference.prints
    assert packed.may_hold(probed) == reference.may_hold(probed)


def _python_index(steps: tuple[Step, ...]) -> FingerprintIndex:
    saved = history.new_prints
    history.new_prints = history._py_prints  # type: ignore[misc]
    try:
        return FingerprintIndex(steps)
    finally:
        history.new_prints = saved  # type: ignore[misc]


def test_the_index_is_packed_when_the_extension_is_there() -> None:
    packed = PrintSet is not None and os.environ.get("INTERLOCK_NO_SPEEDUPS", "") in ("", "0")
    assert history.PACKED_PRINTS is packed
    kind = PrintSet if packed else set
    assert type(FingerprintIndex().prints) is kind
    assert type(history.DroppedData().prints) is kind
    assert type(history.DroppedData().trusted) is kind


def test_no_speedups_keeps_plain_sets() -> None:
    code = (
        "from interlock.session import history as h;"
        "print(h.PACKED_PRINTS, type(h.FingerprintIndex().prints).__name__,"
        " type(h.DroppedData().prints).__name__)"
    )
    env = {**os.environ, "INTERLOCK_NO_SPEEDUPS": "1"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["False", "set", "set"]
