"""A session's past (issue 18): the counts of its executed call steps that left the
history past ``max_steps``, and how ``after:`` reads them — exact when the window
takes a count in whole, "cannot tell" when only part of it, or when the past cannot
count (overflowed, a ``within`` longer than the kept steps)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from interlock.errors import EvaluationError
from interlock.policy.matchers import GlobSet
from interlock.policy.sessionrules import AfterTest, StepSelector
from interlock.session.history import (
    MAX_PAST,
    OVERFLOWED_PAST,
    MemoryHistory,
    NewStep,
    PastCount,
    SessionPast,
    SessionView,
    Step,
)
from interlock.store import SqlStore, open_store

DESTRUCTIVE = frozenset({"destructive"})


def _step(seq: int, at: float, name: str = "read_file", **fields: object) -> Step:
    values: dict[str, object] = {
        "kind": "tool",
        "verdict": "allow",
        "decision_id": f"d-{seq}",
        "labels": frozenset(),
        "fingerprints": frozenset(),
        "trusted": False,
        "executed": True,
    }
    values.update(fields)
    return Step(seq, at, name=name, **values)  # type: ignore[arg-type]


def _view(past: SessionPast, kept_from: int = 11, kept: int = 5, at: float = 1000.0) -> SessionView:
    """A session whose steps ``kept_from`` on are kept, one a second from ``at``."""
    steps = tuple(_step(kept_from + i, at + i) for i in range(kept))
    return SessionView("t", "s", steps, next_seq=kept_from + kept, past=past)


def _deletes(n: int, first: float, last: float) -> SessionPast:
    return SessionPast((PastCount("tool", "delete_file", DESTRUCTIVE, n, first, last),))


CAP = StepSelector(labels=DESTRUCTIVE)


def test_a_whole_session_count_adds_the_past() -> None:
    view = _view(_deletes(2, 10.0, 20.0))
    assert AfterTest(CAP).tally(view, 2000.0) == (2, True)
    assert AfterTest(CAP, at_least=2).holds(view, 2000.0)
    assert not AfterTest(CAP, at_least=3).holds(view, 2000.0)


def test_the_past_counts_only_what_the_selector_matches() -> None:
    view = _view(_deletes(2, 10.0, 20.0))
    by_name = StepSelector(names=GlobSet.of("delete_*"))
    other = StepSelector(names=GlobSet.of("send_*"))
    other_label = StepSelector(labels=frozenset({"secret"}))
    web = StepSelector(kinds=frozenset({"browser"}))
    assert AfterTest(by_name).tally(view, 0.0) == (2, True)
    assert AfterTest(other).tally(view, 0.0) == (0, True)
    assert AfterTest(other_label).tally(view, 0.0) == (0, True)
    assert AfterTest(web).tally(view, 0.0) == (0, True)


def test_a_time_window_takes_a_past_entry_in_whole_or_not_at_all() -> None:
    view = _view(_deletes(2, 900.0, 950.0))  # kept steps from t=1000
    assert AfterTest(CAP, within_time=200.0).tally(view, 1010.0) == (2, True)  # from 810
    assert AfterTest(CAP, within_time=50.0).tally(view, 1010.0) == (0, True)  # from 960


def test_a_time_window_that_cuts_a_past_entry_cannot_tell() -> None:
    view = _view(_deletes(2, 900.0, 950.0))
    test = AfterTest(CAP, within_time=100.0, at_least=2)  # from 910: one of two, or both?
    assert test.tally(view, 1010.0) == (0, False)
    with pytest.raises(EvaluationError, match=r"session\.max_steps"):
        test.holds(view, 1010.0, "cap")
    # what is counted already suffices: no need to tell the rest
    assert AfterTest(CAP, within_time=100.0, at_least=1).holds(_with_kept_delete(), 1010.0)


def _with_kept_delete() -> SessionView:
    steps = (_step(11, 1000.0, "delete_file", labels=DESTRUCTIVE),)
    return SessionView("t", "s", steps, next_seq=12, past=_deletes(2, 900.0, 950.0))


def test_a_window_of_steps_longer_than_the_kept_ones_cannot_tell() -> None:
    view = _view(_deletes(2, 10.0, 20.0), kept=5)
    assert AfterTest(CAP, within=5).tally(view, 0.0) == (0, True)
    assert AfterTest(CAP, within=6).tally(view, 0.0) == (0, False)


def test_an_overflowed_past_cannot_tell() -> None:
    view = _view(OVERFLOWED_PAST)
    assert AfterTest(CAP).tally(view, 0.0) == (0, False)
    nothing_dropped = SessionView("t", "s", (_step(1, 1.0),), next_seq=2, past=OVERFLOWED_PAST)
    assert AfterTest(CAP).tally(nothing_dropped, 0.0) == (0, True)


def test_folding_counts_executed_calls_per_kind_name_and_labels() -> None:
    steps = [
        _step(1, 1.0, "delete_file", labels=DESTRUCTIVE),
        _step(2, 2.0, "delete_file"),
        _step(3, 3.0, "delete_file", labels=DESTRUCTIVE),
        _step(4, 4.0, "delete_file", labels=DESTRUCTIVE, executed=None),  # never settled
        _step(5, 5.0, "delete_file", labels=DESTRUCTIVE, executed=False),  # raised
        _step(6, 6.0, "user", kind="input", trusted=True),
        _step(7, 7.0, "delete_file", kind="mcp", labels=DESTRUCTIVE),
    ]
    past = SessionPast().folded(steps)
    assert set(past.counts) == {
        PastCount("tool", "delete_file", DESTRUCTIVE, 2, 1.0, 3.0),
        PastCount("tool", "delete_file", frozenset(), 1, 2.0, 2.0),
        PastCount("mcp", "delete_file", DESTRUCTIVE, 1, 7.0, 7.0),
    }
    assert not past.overflowed


def test_folding_past_max_past_kinds_overflows() -> None:
    full = SessionPast().folded(_step(i, float(i), f"tool_{i}") for i in range(MAX_PAST))
    assert len(full.counts) == MAX_PAST and not full.overflowed
    assert full.folded([_step(1, 1.0, "tool_0")]).counts[0].n == 2  # a known kind: room
    assert full.folded([_step(999, 999.0, "one_more")]).overflowed


def test_a_demoted_session_keeps_its_counts() -> None:
    """A demoted in-memory session gives up its steps with what they ran counted in its
    past (exact, as past ``max_steps``), kept when it is written again; a session that
    ran nothing and carries no labels leaves nothing (tests/session/test_attacks_demotion.py
    has the attacks)."""
    history = MemoryHistory(max_steps=10, max_sessions=1)
    history.append("t", "s", NewStep("tool", "delete_file", "allow", "d-1", DESTRUCTIVE))
    history.settle("t", "s", "d-1", executed=True)
    history.append("t", "other", NewStep("tool", "read_file", "allow", "d-2"))  # demotes s
    past = history.view("t", "s").past
    assert not past.overflowed
    assert [(c.name, c.labels, c.n) for c in past.counts] == [("delete_file", DESTRUCTIVE, 1)]
    history.append("t", "s", NewStep("tool", "read_file", "allow", "d-3"))  # demotes other
    assert history.view("t", "s").past == past
    assert history.view("t", "s").steps[0].seq == 2
    # "other" ran nothing (d-2 never settled): kept only to count d-2 should it run
    history.settle("t", "other", "d-2", executed=True)
    assert [c.n for c in history.view("t", "other").past.counts] == [1]


# -- the SQL history ------------------------------------------------------------------


def _executed(history: object, session_id: str, name: str, n: int) -> None:
    for i in range(n):
        decision = f"{session_id}-{name}-{i}"
        history.append("t", session_id, NewStep("tool", name, "allow", decision))  # type: ignore[attr-defined]
        history.settle("t", session_id, decision, executed=True)  # type: ignore[attr-defined]


def test_a_smaller_bound_counts_the_stored_steps_below_its_window(store: SqlStore) -> None:
    """Two guards with different ``max_steps`` on one store: the steps the larger bound
    keeps below the smaller one's window are counted as past, not missed."""
    wide = store.session_history(max_steps=10)
    narrow = store.session_history(max_steps=3)
    _executed(wide, "s", "delete_file", 2)
    _executed(wide, "s", "read_file", 5)  # 7 steps, all stored
    past = narrow.view("t", "s").past
    assert {(c.name, c.n) for c in past.counts} == {("delete_file", 2), ("read_file", 2)}
    _executed(narrow, "s", "read_file", 1)  # deletes (and counts) seqs 1..5
    fresh = store.session_history(max_steps=3).view("t", "s").past
    assert {(c.name, c.n) for c in fresh.counts} == {("delete_file", 2), ("read_file", 3)}
    assert sorted(narrow.view("t", "s").past.counts, key=repr) == sorted(fresh.counts, key=repr)


def test_a_session_that_dropped_steps_before_schema_15_cannot_tell(
    store: SqlStore, store_url: str
) -> None:
    """Its dropped steps were never counted: migrating marks its past overflowed; a
    session that dropped nothing is left exact."""
    history = store.session_history(max_steps=3)
    _executed(history, "long", "delete_file", 5)
    _executed(history, "short", "delete_file", 2)
    with store.transaction(write=True) as cur:  # back to schema 14, steps dropped uncounted
        cur.execute("DELETE FROM session_past")
        cur.execute("DELETE FROM schema_migrations WHERE version = 15")
        cur.execute("DROP TABLE session_past")
        if store.dialect == "sqlite":
            cur.execute("DROP TRIGGER session_step_usual_drop")
    store.close()
    with open_store(store_url) as migrated:
        fresh = migrated.session_history(max_steps=3)
        assert fresh.view("t", "long").past.overflowed
        assert not fresh.view("t", "short").past.overflowed
        assert fresh.view("t", "short").past.counts == ()


def test_replicas_appending_in_turn_count_every_dropped_step(store: SqlStore) -> None:
    """Each replica's kept view is stale after the other's write, so its appends take
    the general path (SQLite: the upsert, then the past counted, then the delete)."""
    replicas = [store.session_history(max_steps=3), store.session_history(max_steps=3)]
    for i in range(10):
        _executed(replicas[i % 2], "s", "delete_file", 1)
    for history in (*replicas, store.session_history(max_steps=3)):
        view = history.view("t", "s")
        assert [s.seq for s in view.steps] == [8, 9, 10]
        assert [(c.name, c.n) for c in view.past.counts] == [("delete_file", 7)]


# -- folding a demoted session's steps at once -----------------------------------------


def _counted_in_turn(past: SessionPast, steps: list[Step]) -> SessionPast:
    for step in steps:
        past = past.counted(step)
    return past


_FOLD_STEP = st.builds(
    lambda seq, at, name, kind, labels, executed: _step(
        seq, at, name, kind=kind, labels=labels, executed=executed
    ),
    st.integers(1, 10_000),
    st.floats(0, 1e6, allow_nan=False),
    st.sampled_from(["read_file", "delete_file", "send_mail"]),
    st.sampled_from(["tool", "input", "http"]),
    st.frozensets(st.sampled_from(["secret", "destructive"]), max_size=2),
    st.sampled_from([True, False, None]),
)


@settings(max_examples=300, deadline=None)
@given(
    before=st.lists(_FOLD_STEP, max_size=12),
    steps=st.lists(_FOLD_STEP, max_size=40),
)
def test_folded_is_counted_in_turn(before: list[Step], steps: list[Step]) -> None:
    """:meth:`SessionPast.folded` (one pass, a demoted session's steps at once) is the
    past :meth:`SessionPast.counted` gives step by step: the same counts, in the same
    order, with the same first and last times."""
    start = _counted_in_turn(SessionPast(), before)
    assert start.folded(steps) == _counted_in_turn(start, steps)


def test_folded_overflows_past_max_past_as_counted_does() -> None:
    steps = [_step(i, float(i), f"tool_{i}") for i in range(MAX_PAST + 1)]
    assert SessionPast().folded(steps) == _counted_in_turn(SessionPast(), steps)
    assert SessionPast().folded(steps).overflowed
    assert not SessionPast().folded(steps[:-1]).overflowed
    assert OVERFLOWED_PAST.folded(steps[:1]) is OVERFLOWED_PAST
