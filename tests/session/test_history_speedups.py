"""The C maker (``interlock.session._history``) makes the same :class:`Step` and
:class:`SessionView` the pure-Python reference makes (and the dataclass constructor):
field for field, equal, same hash, frozen, tracked by the collector; and a
:class:`MemoryHistory` gives the same views on both paths. Skipped where the extension
is not built (the Python path is a legitimate install)."""

from __future__ import annotations

import dataclasses
import gc
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from interlock.session import history
from interlock.session.history import (
    _STEP_FIELDS,
    _VIEW_FIELDS,
    NO_PAST,
    OVERFLOWED_PAST,
    FingerprintIndex,
    MemoryHistory,
    NewStep,
    SessionView,
    Step,
)

try:
    from interlock.session import _history
except ImportError:  # pragma: no cover - only where no compiler was at install time
    _history = None  # type: ignore[assignment]

pytestmark = pytest.mark.skipif(_history is None, reason="the C maker is not built")

labels = st.frozensets(st.sampled_from(["secret", "untrusted", "pii", "x"]), max_size=3)
prints = st.frozensets(st.integers(0, 2**64 - 1), max_size=5)
steps_fields = st.tuples(
    st.integers(1, 10**9),
    st.floats(allow_nan=False),
    st.sampled_from(["tool", "llm", "mcp", "browser", "effect", "input"]),
    st.text(max_size=8),
    st.sampled_from(["allow", "deny", "require_approval", "undetermined", "input"]),
    st.none() | st.text(max_size=8),
    labels,
    prints,
    st.booleans(),
    st.none() | st.booleans(),
)


def _same(a: Any, b: Any, names: tuple[str, ...]) -> None:
    assert type(a) is type(b)
    for name in names:
        assert getattr(a, name) is getattr(b, name), name
    assert a == b and hash(a) == hash(b) and repr(a) == repr(b)


def test_the_c_makers_are_the_ones_used() -> None:
    if os.environ.get("INTERLOCK_NO_SPEEDUPS", "") not in ("", "0"):
        pytest.skip("INTERLOCK_NO_SPEEDUPS is set")
    assert type(history._new_step) is not type(history._py_new_step)
    assert type(history._new_view) is not type(history._py_new_view)


@settings(max_examples=300)
@given(steps_fields)
def test_a_step_made_in_c_is_the_reference_step(values: tuple[Any, ...]) -> None:
    made = _history.maker(Step, _STEP_FIELDS)(*values)
    _same(made, history._py_new_step(*values), _STEP_FIELDS)
    _same(made, Step(*values), _STEP_FIELDS)
    assert gc.is_tracked(made)
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.seq = 2  # type: ignore[misc]
    assert dataclasses.replace(made, executed=True).executed is True


@settings(max_examples=200)
@given(st.lists(steps_fields, max_size=4), labels, st.integers(1, 99), st.booleans())
def test_a_view_made_in_c_is_the_reference_view(
    rows: list[tuple[Any, ...]], tags: frozenset[str], next_seq: int, lost: bool
) -> None:
    steps = tuple(Step(*row) for row in rows)
    sources = tuple(s for s in steps if s.fingerprints)
    index = FingerprintIndex(sources)
    for past in (NO_PAST, OVERFLOWED_PAST):
        values = ("t", "s", steps, tags, next_seq, sources, index, lost, past)
        made = _history.maker(SessionView, _VIEW_FIELDS)(*values)
        _same(made, history._py_new_view(*values), _VIEW_FIELDS)
        assert made == SessionView(*values)
        assert made.may_hold(frozenset()) == SessionView(*values).may_hold(frozenset())


def test_the_maker_refuses_what_it_cannot_make() -> None:
    with pytest.raises(TypeError):
        _history.maker(Step, ("seq", "nope"))
    with pytest.raises(TypeError):
        _history.maker(Step, ("seq", "seq"))
    with pytest.raises(TypeError):
        _history.maker(dict, ("seq",))  # no such slot
    with pytest.raises(TypeError):
        _history.maker(Step, ("seq", 1))  # type: ignore[arg-type]

    class Plain:  # a __dict__: not a plain slotted class
        pass

    with pytest.raises(TypeError):
        _history.maker(Plain, ())
    make = _history.maker(Step, _STEP_FIELDS)
    with pytest.raises(TypeError):
        make(1, 2.0)
    with pytest.raises(TypeError):
        make(*range(10), extra=1)


@contextmanager
def _python_makers() -> Iterator[None]:
    saved = history._new_step, history._new_view
    history._new_step, history._new_view = history._py_new_step, history._py_new_view
    try:
        yield
    finally:
        history._new_step, history._new_view = saved


operations = st.lists(
    st.tuples(
        st.sampled_from(["append", "input", "settle", "view"]),
        st.integers(0, 2),  # session
        labels,
        prints,
        st.booleans(),
    ),
    max_size=40,
)


def _run(ops: list[tuple[str, int, frozenset[str], frozenset[int], bool]]) -> list[SessionView]:
    clock = iter(range(10**6))
    kept = MemoryHistory(max_steps=5, max_sessions=2, clock=lambda: float(next(clock)))
    seen: list[SessionView] = []
    for n, (op, session, tags, data, ran) in enumerate(ops):
        sid = f"s{session}"
        if op == "append":
            kept.append("t", sid, NewStep("tool", f"n{n % 3}", "allow", f"d{n}", labels=tags))
        elif op == "input":
            kept.append("t", sid, NewStep("input", "input", "input", fingerprints=data))
        elif op == "settle":
            kept.settle("t", sid, f"d{n - 1}", executed=ran, fingerprints=data, labels=tags)
        seen.append(kept.view("t", sid))
    return seen


@settings(max_examples=150, deadline=None)
@given(operations)
def test_a_memory_history_gives_the_same_views_on_both_paths(
    ops: list[tuple[str, int, frozenset[str], frozenset[int], bool]],
) -> None:
    fast = _run(ops)
    with _python_makers():
        slow = _run(ops)
    assert fast == slow
    for a, b in zip(fast, slow, strict=True):
        assert a.sources == b.sources and a.lost == b.lost and a.past == b.past


def test_no_speedups_selects_the_python_makers() -> None:
    code = (
        "from interlock.session import history as h;"
        "print(h._new_step is h._py_new_step, h._new_view is h._py_new_view)"
    )
    env = {**os.environ, "INTERLOCK_NO_SPEEDUPS": "1"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["True", "True"]
