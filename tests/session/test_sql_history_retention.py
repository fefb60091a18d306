"""The SQL history keeps no step alive past what its views hold: an appended step's
fingerprints (up to 32 KiB packed, far more as a set) go once no view shows the step
— no cache of written steps holds them (one did: 4096 steps, a check's step a miss
every time)."""

from __future__ import annotations

import gc
import weakref

from interlock.session.history import NewStep
from interlock.store import SqlStore


class _Prints(frozenset[int]):
    """A set of fingerprints that can be watched (a frozenset takes no weak reference;
    a subclass does)."""


def test_appended_steps_are_not_kept_past_the_bound(store: SqlStore) -> None:
    history = store.session_history(max_steps=1)
    watched = []
    for i in range(6):
        prints = _Prints(range(i * 1000, i * 1000 + 500))
        watched.append(weakref.ref(prints))
        # a decision id of this test's own: no step equal to another test's
        step = NewStep(
            "input",
            "user",
            "input",
            f"d-{i}-{id(history)}",
            fingerprints=prints,
            executed=True,
        )
        history.append("acme", "s", step)
        del prints, step
    view = history.view("acme", "s")
    gc.collect()
    alive = [i for i, ref in enumerate(watched) if ref() is not None]
    # at most the one step the bound keeps (the last) is held, by the kept view
    assert [s.seq for s in view.steps] == [6]
    assert set(alive) <= {5}
    assert view.steps[0].fingerprints == frozenset(range(5000, 5500))
