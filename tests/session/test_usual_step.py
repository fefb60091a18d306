"""SQLite's usual step (``SqlHistory._append_usual``: the statement's parameters and
the :class:`Written` made in one pass over the step) against the general path it
stands in for (``_step_row``, ``_append_general``, ``_written``: the reference): the
same step after the same session gives the same stored rows, the same session row
and the same ``Written`` — labels attached and cleared, inputs, fingerprints, the
bound crossed. And a settle's fingerprints, packed once, merge as before."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from interlock.session.history import NewStep
from interlock.session.packing import pack, unpack
from interlock.store import open_store
from interlock.store.sql_sessions import SqlHistory, _merged_prints, _step_row, _written

_NAMES = ("a", "b", "c")
_labels = st.frozensets(st.sampled_from(_NAMES), max_size=2)
_steps = st.builds(
    NewStep,
    kind=st.sampled_from(["tool", "http", "input"]),
    name=st.sampled_from(["read_file", "send_email", "input"]),
    verdict=st.sampled_from(["allow", "deny", "undetermined", "input"]),
    decision_id=st.none() | st.text("dx0123", min_size=1, max_size=4),
    labels=_labels,
    clears=_labels,
    fingerprints=st.frozensets(st.integers(0, 2**64 - 1), max_size=3),
    trusted=st.booleans(),
    executed=st.none() | st.booleans(),
)
_session = itertools.count()


def _rows(history: SqlHistory, session_id: str) -> tuple[Any, ...]:
    store = history.store
    with store.transaction(write=False) as cur:
        cur.execute(
            "SELECT seq, at_us, kind, name, verdict, decision_id, labels, fingerprints, "
            "trusted, executed, changed FROM session_steps WHERE tenant = 't' "
            "AND session_id = ? ORDER BY seq",
            (session_id,),
        )
        steps = cur.fetchall()
        cur.execute(
            "SELECT labels, next_seq, touched_us, created_us, version FROM sessions "
            "WHERE tenant = 't' AND session_id = ?",
            (session_id,),
        )
        session = cur.fetchone()
        cur.execute(
            "SELECT kind, name, labels, n, first_us, last_us FROM session_past "
            "WHERE tenant = 't' AND session_id = ? ORDER BY kind, name, labels",
            (session_id,),
        )
        past = cur.fetchall()
    return steps, session, past


@pytest.fixture(scope="module")
def histories(tmp_path_factory: pytest.TempPathFactory) -> Any:
    path: Path = tmp_path_factory.mktemp("usual") / "interlock.db"
    store = open_store(f"sqlite:///{path}", clock=lambda: 1_700_000_000_000_000)
    yield store.session_history(max_steps=3), store.session_history(max_steps=3)
    store.close()


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(before=st.lists(_steps, max_size=5), step=_steps)
def test_the_usual_step_lands_as_the_general_path_would(
    histories: tuple[SqlHistory, SqlHistory], before: list[NewStep], step: NewStep
) -> None:
    usual, general = histories
    n = next(_session)
    usual_id, general_id = f"u{n}", f"g{n}"
    for earlier in before:  # the same session on both sides (each kept by its history)
        usual.append("t", usual_id, earlier)
        general.append("t", general_id, earlier)
    if before:
        usual.view("t", usual_id)  # kept: the usual path applies
    store = usual.store
    with store.transaction(write=True) as cur:
        got = usual._append_usual(cur, "t", usual_id, step, store.clock())
    if not before:
        assert got is None  # nothing kept of a new session: the general path's
        return
    assert got is not None
    with store.transaction(write=True) as cur:
        now = store.clock()
        expected = _written(
            step, now, general._append_general(cur, "t", general_id, step, now, _step_row(step))
        )
    assert got == expected
    assert _rows(usual, usual_id) == _rows(general, general_id)


def test_a_bad_fingerprint_on_the_usual_path_writes_nothing(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'interlock.db'}")
    try:
        history = store.session_history()
        history.append("t", "s", NewStep("tool", "read_file", "allow", "d-1"))
        history.view("t", "s")
        bad = NewStep("tool", "read_file", "allow", "d-2", fingerprints=frozenset({-1}))
        with store.transaction(write=True) as cur, pytest.raises(ValueError):
            history._append_usual(cur, "t", "s", bad, store.clock())
        assert [s.seq for s in history.view("t", "s").steps] == [1]
    finally:
        store.close()


@given(
    stored=st.frozensets(st.integers(0, 2**64 - 1), max_size=4),
    added=st.frozensets(st.integers(0, 2**64 - 1), max_size=4),
)
def test_a_settles_fingerprints_merge_as_unpacking_both_would(
    stored: frozenset[int], added: frozenset[int]
) -> None:
    reference = pack(unpack(pack(stored)) | added) if added else pack(stored)
    assert _merged_prints(pack(stored), added, pack(added)) == reference
