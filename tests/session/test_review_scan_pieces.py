"""Review of ``_speedups.piece_scan`` (eb99a83): its C walk and runs against the
Python reference ``pieces._py_scan`` at the edges (budget, depth, numbers, texts,
memo, errors, references), and ``Pieces.observe`` now walking under the session's
lock."""

from __future__ import annotations

import gc
import math
import sys
import threading
import tracemalloc
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from interlock.session import fingerprints
from interlock.session import pieces as pieces_module
from interlock.session.pieces import Pieces

_speedups = pieces_module._speedups
pytestmark = pytest.mark.skipif(_speedups is None, reason="the C accelerator is not built")

KEY = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"
DATA = f"AWS_SECRET_ACCESS_KEY={KEY}\nregion = eu-west-1\n"
BUDGET = pieces_module._MAX_VALUES
DEPTH = pieces_module._MAX_DEPTH


class _Everything:
    """Every gram kept: every run is a piece, so the two walks must read the same texts."""

    def __contains__(self, value: object) -> bool:
        return True


def _c(args: Any, grams: Any = None, older: Any = None, memo: Any = None) -> Any:
    return _speedups.piece_scan(
        args,
        _Everything() if grams is None else grams,
        older,
        pieces_module._RUNS if memo is None else memo,
        pieces_module._runs_of,
        pieces_module._SCAN_LIMITS,
    )


def _py(args: Any, grams: Any = None, older: Any = None) -> Any:
    return pieces_module._py_scan(args, _Everything() if grams is None else grams, older)


def _nested_list(depth: int, leaf: Any) -> Any:
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


def _nested_dict(depth: int, leaf: Any) -> Any:
    value = leaf
    for i in range(depth):
        value = {f"k{i:05d}": value}
    return value


_EDGE_FLOATS = [
    -0.0,
    0.0,
    5e-324,
    2.2250738585072014e-308,
    9999.999999999998,
    10000.0,
    -10000.0,
    10000.000000000002,
    1e16,
    -1e16,
    2.0**53 + 2,
    1e22,
    1e37,
    math.nextafter(1e38, 0),
    1e38,
    -1e38,
    math.nextafter(1e38, math.inf),
    1.7976931348623157e308,
    -1.7976931348623157e308,
    math.inf,
    -math.inf,
    math.nan,
    123456.789,
]
_EDGE_INTS = [
    9999,
    -9999,
    10000,
    -10000,
    2**31,
    2**32,
    2**53 + 1,
    2**63 - 1,
    -(2**63),
    -(2**63) + 1,
    2**63,
    -(2**63) - 1,
    2**64,
    2**127,
    2**128,
    -(2**127),
]
_EDGE_TEXTS = [
    "",
    "abcd",
    "abcde",
    "abcdef",
    "wJalr",
    KEY,
    KEY[:5],
    "\ud800abcde",
    "abc\udfffdefgh",
    "ÿéàüöñçø",
    "caf\xe9-wJalrXUtnF",
    "\u20acwJalrXUtnFEMI",
    "\U0001f600wJalrXUtnFEMI\U0001f600",
    "a%41%42%43defghij",
    "a&amp;b;wJalrXUtnFEMI",
    "https://x.example/c/wJalrXUtnF/p.gif?k=EMIK7MDEN#frag",
    "correct horse battery staple wJalrXUtnFEMI",
    "x" * 300,
    "\x00\x01\x02abcdefg",
    "a" * 5 + "\u0100",
]


def _cycles() -> tuple[list[Any], dict[str, Any]]:
    loop: list[Any] = [KEY]
    loop.append(loop)
    mapping: dict[str, Any] = {"a": KEY[:12]}
    mapping["self"] = mapping
    return loop, mapping


_LOOP, _MAPPING = _cycles()
#: equal values: a set keeps the first of each (True before 1, 1.0 before True)
_ONES = (True, 1, 1.0, False, 0, 12345, 12345.0)
_ONES_FLOAT_FIRST = (1.0, True, 10000, 10000.0)

_CASES: list[tuple[str, Any]] = [
    ("a list holding itself", _LOOP),
    ("a dict holding itself", _MAPPING),
    ("a dict holding a list holding itself", {"x": _LOOP, "y": [_MAPPING, _LOOP]}),
    ("floats at the edges", _EDGE_FLOATS),
    ("floats as dict values", {f"f{i}": f for i, f in enumerate(_EDGE_FLOATS)}),
    ("floats as nested keys", {"a": {f: 1 for f in _EDGE_FLOATS if f == f}}),
    ("ints at 64 bits, in range", [i for i in _EDGE_INTS if -(2**63) <= i < 2**63]),
    ("ints at 64 bits, top dict", {"n": [2**63 - 1, -(2**63)], "m": 10000}),
    ("texts at the edges", _EDGE_TEXTS),
    ("texts as keys", {t: t for t in _EDGE_TEXTS}),
    ("texts as nested keys", {"a": {t: None for t in _EDGE_TEXTS}}),
    ("a set of bools and ones", {"a": set(_ONES)}),
    ("a set of 1.0 first", {"a": set(_ONES_FLOAT_FIRST)}),
    ("frozensets nested", {"a": frozenset({frozenset({KEY, 99999}), (KEY[:9], 1e6)})}),
    ("tuple and frozenset keys", {"a": {(KEY[:10], 123456): KEY[10:20], frozenset({KEY}): 1}}),
    ("None and bool keys", {"a": {None: KEY[:10], True: KEY[5:15], 12345: 1, 1e5: 2}}),
    ("a top-level list", [KEY, {"x": KEY[3:20]}, (KEY[1:9],), {KEY[2:12]}]),
    ("a top-level str", KEY),
    ("a top-level int", 1234567),
    ("a top-level float", 1234567.0),
    ("a top-level bool", True),
    ("a top-level None", None),
    ("a top-level tuple", (KEY, 12345)),
    ("a top-level set", {KEY, 12345}),
    ("a top-level frozenset", frozenset({KEY})),
    ("an empty dict", {}),
    ("an empty-key dict", {"": KEY}),
    ("depth 31 lists", _nested_list(DEPTH - 1, KEY)),
    ("depth 32 lists", _nested_list(DEPTH, KEY)),
    ("depth 33 lists", _nested_list(DEPTH + 1, KEY)),
    ("depth 32 lists in a dict", {"a": _nested_list(DEPTH, KEY)}),
    ("depth 33 lists in a dict", {"a": _nested_list(DEPTH + 1, KEY)}),
    ("depth 31 dicts", _nested_dict(DEPTH - 1, KEY)),
    ("depth 32 dicts", _nested_dict(DEPTH, KEY)),
    ("depth 33 dicts", _nested_dict(DEPTH + 1, KEY)),
    ("depth 34 dicts", _nested_dict(DEPTH + 2, KEY)),
    ("depth 33 sets", _nested_list(DEPTH, frozenset({KEY}))),
    ("budget: values exactly", [f"v{i:07d}" for i in range(BUDGET - 1)]),
    ("budget: one past", [f"v{i:07d}" for i in range(BUDGET)] + [KEY]),
    ("budget: a float at the last value", [None] * (BUDGET - 2) + [123456.0, KEY]),
    ("budget: floats at the edge", [None] * (BUDGET - 4) + [1e5, 2e5, 3e5, 4e5]),
    ("budget: a dict key last", [None] * (BUDGET - 3) + [{KEY: KEY[1:]}]),
    ("budget: a top dict key last", {**{f"k{i:06d}": None for i in range(BUDGET // 2)}, KEY: KEY}),
    (
        "budget: a top dict, one short",
        {**{f"k{i:06d}": 1 for i in range(BUDGET // 2 - 1)}, "z": KEY},
    ),
    ("budget: nested dict at the edge", [None] * (BUDGET - 5) + [{"a": {"b": KEY}}]),
    ("budget: a set at the edge", [None] * (BUDGET - 3) + [{KEY, 12345}]),
    ("budget: a later bytes", [None] * BUDGET + [b"unreadable-after-budget"]),
    ("budget: a later big int", [None] * BUDGET + [2**200]),
    ("budget: a later non-str key", {**{f"k{i:06d}": None for i in range(BUDGET)}, 5: KEY}),
    ("many texts", [f"{KEY[:8]}{i:06d}" for i in range(20_000)]),
    ("one text many times", [KEY] * 30_000),
    ("many runs in one text", " ".join(f"w{i:05d}x" for i in range(70_000))),
]


@pytest.mark.parametrize(("name", "args"), _CASES, ids=[c[0] for c in _CASES])
def test_the_c_scan_is_the_reference_at_the_edges(name: str, args: Any) -> None:
    made = _c(args)
    expected = _py(args)
    if made is not None:
        assert made == expected
        assert type(made) is tuple and type(made[0]) is bool and type(made[1]) is list


@pytest.mark.parametrize(("name", "args"), _CASES, ids=[c[0] for c in _CASES])
def test_the_scan_through_the_module_is_the_reference(name: str, args: Any) -> None:
    """pieces._scan (the C path when accelerated) against the reference, with learned
    grams in one and two generations."""
    found = Pieces()
    found.learn("t", "s", DATA)
    session = found._sessions[("t", "s")]
    for grams, older in (
        (session.grams, session.older),
        (pieces_module.new_prints(), session.grams),
        (_Everything(), None),
    ):
        assert pieces_module._scan(args, grams, older) == _py(args, grams, older)


def test_the_c_scan_reads_what_the_limits_allow_of_plain_values() -> None:
    """No plain value is left to Python needlessly (so none is skipped either)."""
    for name, args in _CASES:
        if name in ("budget: a later non-str key",):
            continue
        assert _c(args) is not None, name


def test_the_c_scan_leaves_an_int_past_64_bits_to_python() -> None:
    for value in (2**63, -(2**63) - 1, 2**64, [1, 2**100], {"a": {2**70: 1}}):
        assert _c(value) is None
        assert pieces_module._scan(value, _Everything(), None) == _py(value)


def test_the_memo_is_read_as_the_reference_reads_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """An entry kept for a text is what both read (the same dict)."""
    text = "abcdefghijk"
    fake = (("zzzzzzz", 1), ("yyyyyyyy", 2))
    monkeypatch.setitem(pieces_module._RUNS, text, fake)
    args = {"a": [text, text], "b": text}
    assert _c(args) == _py(args) == (True, [(n, r) for n in "aab" for r, _ in fake][:6])
    monkeypatch.setitem(pieces_module._RUNS, text, ())
    assert _c(args) == _py(args) == (True, [])


@pytest.mark.parametrize(
    "bad", [[("a", 1)], (("a",),), ((1, 2),), "ab", (["abcdef", 1],), ((b"abcdef", 1),)]
)
def test_a_bad_memo_entry_raises_and_leaks_nothing(bad: Any) -> None:
    text = "abcdefghijk"
    memo = {text: bad}
    before = sys.getrefcount(bad)
    for _ in range(100):
        with pytest.raises(TypeError):
            _c({"a": text}, memo=memo)
    assert sys.getrefcount(bad) == before


class _Boom(Exception):
    pass


class _RaisingGrams:
    def __init__(self, after: int) -> None:
        self.left = after

    def __contains__(self, value: object) -> bool:
        self.left -= 1
        if self.left < 0:
            raise _Boom
        return True


@pytest.mark.parametrize("after", [0, 1, 3, 7, 20])
def test_what_the_grams_raise_goes_through_both(after: int) -> None:
    args = {"a": [KEY, KEY[3:30]], "b": 1234567.0}
    with pytest.raises(_Boom):
        _c(args, grams=_RaisingGrams(after))
    with pytest.raises(_Boom):
        _py(args, grams=_RaisingGrams(after))
    # the older generation raising, after the newer said no
    with pytest.raises(_Boom):
        _c(args, grams=set(), older=_RaisingGrams(after))
    with pytest.raises(_Boom):
        _py(args, grams=set(), older=_RaisingGrams(after))


def test_the_calls_to_the_grams_are_the_references_calls() -> None:
    """Same order of membership tests (a container with side effects sees the same)."""

    class Recording:
        def __init__(self) -> None:
            self.seen: list[object] = []

        def __contains__(self, value: object) -> bool:
            self.seen.append(value)
            return len(self.seen) % 3 != 0

    args = {"a": [KEY, "wJalrXUtnF zzzzzzzz EMIK7MDENG"], "b": {"c": 123456789.0}}
    a, b = Recording(), Recording()
    ao, bo = Recording(), Recording()
    assert _c(args, grams=a, older=ao) == _py(args, grams=b, older=bo)
    assert a.seen == b.seen
    assert ao.seen == bo.seen


def test_no_reference_is_leaked() -> None:
    key = "a-key-name-kept"
    text = KEY + "-leak-probe"
    inner = [text, 123456.0, {text: (text,)}, {text}]
    args = {key: inner, "n": 2**62}
    _c(args)  # the memo (pieces._RUNS) keeps the texts once
    counts = [sys.getrefcount(o) for o in (key, text, inner)]
    for _ in range(2000):
        _c(args)
        _c(inner)
        _c([args, None, True])
    assert [sys.getrefcount(o) for o in (key, text, inner)] == counts
    # and on the error paths
    for _ in range(500):
        with pytest.raises(_Boom):
            _c(args, grams=_RaisingGrams(2))
        assert _c([args, b"bytes!"]) is None
        assert _c({key: inner, 7: 1}) is None
    assert [sys.getrefcount(o) for o in (key, text, inner)] == counts


def test_no_memory_grows_over_many_scans() -> None:
    args = {"a": [KEY, 123456.0, {"b": KEY[5:], "c": frozenset({KEY[2:]})}], "d": 10**10}
    for _ in range(200):
        _c(args)
    gc.collect()
    tracemalloc.start()
    try:
        first, _ = tracemalloc.get_traced_memory()
        for _ in range(20_000):
            _c(args)
        gc.collect()
        last, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert last - first < 64_000


def test_a_finalizer_mutating_the_values_mid_walk_does_not_crash() -> None:
    """Python 3.11 collects on allocation: a __del__ can run inside the C walk (at its
    n-th allocation, n swept). The C must stay memory-safe: a list is re-read, a dict's
    PyDict_Next is bounds-checked, a set's iterator raises RuntimeError (as the
    reference's would)."""
    target_list: list[Any] = []
    target_dict: dict[str, Any] = {}
    target_set: set[Any] = set()

    class Mutator:
        def __init__(self) -> None:
            self.me = self

        def __del__(self) -> None:
            target_list.clear()
            target_dict.clear()
            target_set.clear()
            target_list.extend(["short"] * 3)
            target_dict.update({f"n{i}": [i] * 3 for i in range(50)})
            target_set.update(range(100_000, 100_050))

    was = gc.get_threshold()
    grams, runs_of, limits = _Everything(), pieces_module._runs_of, pieces_module._SCAN_LIMITS
    # the whole test run's heap out of the collections (each round collects in full:
    # over a full suite's heap that took seconds a round, 284 s in all)
    gc.collect()
    gc.freeze()
    mid = raised = 0
    try:
        for which in ("l", "d", "s"):
            for threshold in range(2, 60):
                target_list[:] = [f"{KEY}{i}" for i in range(200)]
                target_dict.clear()
                target_dict.update({f"k{i}{KEY}": f"{KEY}{i}" for i in range(200)})
                target_set.clear()
                target_set.update({f"{KEY}{i}" for i in range(200)})
                args = {"l": target_list, "d": target_dict, "s": target_set}
                gc.collect()  # cheap: the rest of the heap is frozen (below)
                Mutator()
                gc.set_threshold(threshold)
                try:
                    made = _speedups.piece_scan(
                        {which: args[which]}, grams, None, {}, runs_of, limits
                    )
                except RuntimeError:
                    raised += 1  # a set changed size during iteration
                else:
                    mid += made is not None and 0 < len(made[1]) < 200
                finally:
                    gc.set_threshold(*was)
    finally:
        gc.set_threshold(*was)
        gc.unfreeze()
    if sys.version_info < (3, 12):  # 3.12 collects at the eval breaker, not inside C
        assert mid > 0 and raised > 0  # the finalizer did run mid-walk


# -- hypothesis: the walk at its edges ------------------------------------------------

_LEAF_FLOATS = st.floats() | st.sampled_from(_EDGE_FLOATS)
_LEAF_INTS = (
    st.integers(min_value=-(2**64), max_value=2**64)
    | st.sampled_from(_EDGE_INTS)
    | st.integers(-20000, 20000)
)
_LEAF_TEXTS = st.sampled_from(_EDGE_TEXTS) | st.text(max_size=24)
_HASHABLE = st.recursive(
    _LEAF_TEXTS | _LEAF_INTS | _LEAF_FLOATS | st.booleans() | st.none(),
    lambda inner: st.lists(inner, max_size=3).map(tuple) | st.frozensets(inner, max_size=3),
    max_leaves=6,
)
_VALUES = st.recursive(
    _HASHABLE,
    lambda inner: (
        st.lists(inner, max_size=5)
        | st.lists(inner, max_size=4).map(tuple)
        | st.sets(_HASHABLE, max_size=4)
        | st.frozensets(_HASHABLE, max_size=4)
        | st.dictionaries(_HASHABLE, inner, max_size=4)
    ),
    max_leaves=20,
)


@given(st.dictionaries(st.text(max_size=10), _VALUES, max_size=5) | _VALUES)
@settings(max_examples=1500, deadline=None)
def test_the_c_scan_is_the_reference_on_any_plain_value(args: Any) -> None:
    made = _c(args)
    expected = _py(args)
    if made is not None:
        assert made == expected


@given(
    st.integers(1, 40),
    st.integers(0, 40),
    st.integers(1, 50),
    st.integers(0, 6),
    _VALUES,
)
@settings(max_examples=400, deadline=None)
def test_the_c_scan_keeps_any_limits_as_the_reference(
    values: int, depth: int, runs: int, found: int, args: Any
) -> None:
    """Small limits (values, depth, runs, pieces) hit everywhere in a value."""
    limits = (pieces_module.GRAM, values, depth, runs, found, pieces_module._SMALLEST_NUMBER)
    made = _speedups.piece_scan(
        args, _Everything(), None, pieces_module._RUNS, pieces_module._runs_of, limits
    )
    if made is None:
        return
    patch = pytest.MonkeyPatch()
    try:
        patch.setattr(pieces_module, "_MAX_VALUES", values)
        patch.setattr(pieces_module, "_MAX_DEPTH", depth)
        patch.setattr(pieces_module, "MAX_RUNS", runs)
        patch.setattr(pieces_module, "MAX_PIECES", found)
        expected = _py(args)
    finally:
        patch.undo()
    assert made == expected


# -- Pieces.observe: the walk now under the session's lock ----------------------------


def test_observe_finds_the_same_on_both_paths() -> None:
    cuts = [KEY[i : i + 10] for i in range(0, 30, 7)]
    results = []
    for accelerated in (True, False):
        was = fingerprints.ACCELERATED
        fingerprints._accelerate(accelerated)
        try:
            found = Pieces()
            found.learn("t", "s", DATA)
            got = []
            for cut in cuts:
                got.append(found.observe("t", "s", {"q": [cut, 12345.0], "n": {cut: 1}}))
                found.sent("t", "s")
            results.append(got)
        finally:
            fingerprints._accelerate(was)
    assert results[0] == results[1]
    assert any(results[0])


def test_an_argument_whose_text_checks_the_same_session_again_does_not_deadlock() -> None:
    found = Pieces()
    found.learn("t", "s", DATA)

    class Lazy:
        def __str__(self) -> str:
            found.observe("t", "s", {"inner": KEY[:12]})
            return KEY[12:30]

    done = threading.Event()

    def run() -> None:
        found.observe("t", "s", {"outer": Lazy()})
        done.set()

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    assert done.wait(30.0), "observe deadlocked on its own session's lock"


def test_a_reentrant_check_through_the_tails_does_not_deadlock() -> None:
    from interlock.session.tails import ArgumentTails

    tails = ArgumentTails()
    tails.pieces.learn("t", "s", DATA)

    class Lazy:
        def __str__(self) -> str:
            tails.advance("t", "s", {"inner": KEY[:12]})
            return KEY[12:30]

    done = threading.Event()

    def run() -> None:
        tails.advance("t", "s", {"outer": Lazy()})
        done.set()

    threading.Thread(target=run, daemon=True).start()
    assert done.wait(30.0), "advance deadlocked on the session's pieces lock"
