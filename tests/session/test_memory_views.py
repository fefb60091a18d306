"""The in-memory history writes a session's steps in place and makes its view on the
first read after a write: every view is still a snapshot — consistent in itself (its
sources are exactly its steps with fingerprints, its seqs run on, its index holds what
its sources hold), never changed by a later write, and the same object for readers
with no write between — under threads writing and reading one session at once."""

from __future__ import annotations

import random
import threading

from interlock.session.fingerprints import FORMAT_MARK
from interlock.session.history import MemoryHistory, NewStep, SessionView, Step


def _frozen(view: SessionView) -> tuple[object, ...]:
    return (
        [(s.seq, s.name, s.labels, s.fingerprints, s.executed) for s in view.steps],
        [s.seq for s in view.sources],
        view.labels,
        view.next_seq,
    )


def _consistent(view: SessionView, bound: int) -> None:
    seqs = [s.seq for s in view.steps]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    assert len(seqs) <= bound
    if seqs:
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))  # none lost between
        assert view.next_seq == seqs[-1] + 1
    assert view.sources == tuple(s for s in view.steps if s.fingerprints)
    assert view.index is not None
    for step in view.sources:  # a filter: never less than its view's sources
        assert step.fingerprints <= view.index.prints


def test_a_view_is_made_once_per_write_and_kept_as_it_was() -> None:
    history = MemoryHistory(max_steps=3)
    history.append("t", "s", NewStep("tool", "fetch", "allow", "d-1"))
    first = history.view("t", "s")
    assert history.view("t", "s") is first  # no write between: the same snapshot
    history.settle("t", "s", "d-1", executed=True, fingerprints=frozenset({FORMAT_MARK, 7}))
    settled = history.view("t", "s")
    assert settled is not first
    assert first.steps[0].executed is None and not first.sources  # as it was
    assert settled.steps[0].executed and settled.sources == settled.steps
    for n in range(2, 6):  # past the bound: the oldest dropped, earlier views unchanged
        history.append("t", "s", NewStep("tool", f"t{n}", "allow", f"d-{n}"))
    last = history.view("t", "s")
    assert [s.seq for s in last.steps] == [3, 4, 5] and not last.sources
    assert [s.seq for s in settled.steps] == [1] and settled.sources == settled.steps


def test_a_settle_of_an_older_step_keeps_the_sources_in_order() -> None:
    history = MemoryHistory()
    for n in (1, 2, 3):
        history.append("t", "s", NewStep("tool", f"t{n}", "allow", f"d-{n}"))
    history.settle("t", "s", "d-3", executed=True, fingerprints=frozenset({FORMAT_MARK, 3}))
    history.settle("t", "s", "d-1", executed=True, fingerprints=frozenset({FORMAT_MARK, 1}))
    history.settle("t", "s", "d-3", executed=True, fingerprints=frozenset({33}))  # again
    view = history.view("t", "s")
    assert [s.seq for s in view.sources] == [1, 3]
    assert view.sources[1].fingerprints == {FORMAT_MARK, 3, 33}
    _consistent(view, 200)


def test_threads_writing_and_reading_one_session_see_only_whole_snapshots() -> None:
    bound = 12
    history = MemoryHistory(max_steps=bound)
    errors: list[BaseException] = []
    seen: list[tuple[SessionView, tuple[object, ...]]] = []
    appended: list[Step] = []

    def write(worker: int) -> None:
        rng = random.Random(worker)
        try:
            for n in range(400):
                decision_id = f"w{worker}-{n}"
                labels = frozenset({f"l{rng.randrange(4)}"})
                appended.append(
                    history.append(
                        "t", "s", NewStep("tool", "fetch", "allow", decision_id, labels=labels)
                    )
                )
                if rng.random() < 0.7:
                    prints = frozenset({FORMAT_MARK, worker * 10_000 + n})
                    history.settle("t", "s", decision_id, executed=True, fingerprints=prints)
        except BaseException as error:  # reported below
            errors.append(error)

    def read() -> None:
        try:
            for _ in range(600):
                view = history.view("t", "s")
                _consistent(view, bound)
                if len(seen) < 200:
                    seen.append((view, _frozen(view)))
        except BaseException as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(3)]
    threads += [threading.Thread(target=read) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    for view, then in seen:  # no later write changed a view handed out
        assert _frozen(view) == then
    final = history.view("t", "s")
    _consistent(final, bound)
    assert sorted(s.seq for s in appended) == list(range(1, 3 * 400 + 1))  # distinct seqs
    assert final.next_seq == 3 * 400 + 1
    kept = {s.seq for s in final.steps}
    assert kept == set(range(3 * 400 - bound + 1, 3 * 400 + 1))
