"""A history's fingerprints are out of the garbage collector's lists: a frozenset of
ints can be in no reference cycle, yet every full collection walked each of them
(~100 ms a million held — a pause of every thread). ``untracked`` takes such a set
out (as CPython does for tuples of atoms) and leaves anything else tracked; the
in-memory and the SQL histories pass what they keep through it."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from collections.abc import Callable

import pytest

from interlock.session import history as history_module
from interlock.session.fingerprints import of_data
from interlock.session.history import MemoryHistory, NewStep, SessionHistory
from interlock.store import SqlStore

try:
    from interlock.session._history import untracked as c_untracked
except ImportError:  # not built: the Python path keeps them tracked (tested below)
    c_untracked = None  # type: ignore[assignment]

needs_c = pytest.mark.skipif(
    c_untracked is None or history_module.untracked is not c_untracked,
    reason="the C extension is not built (or INTERLOCK_NO_SPEEDUPS is set)",
)

RESULT = "the quarterly ledger export lists 14 accounts; key QX7K2M9PLW4R8TZC5N3VJ6HB"


@needs_c
def test_a_frozenset_of_ints_leaves_the_collector_and_anything_else_stays() -> None:
    prints = frozenset({1, 2, 2**64 - 1, 10**30})  # a big int is an int too
    assert gc.is_tracked(prints)
    assert c_untracked(prints) is prints
    assert not gc.is_tracked(prints)
    for kept in (
        frozenset({1, (2, 3)}),  # a tuple could hold anything
        frozenset({True, 5}),  # a bool: not an exact int (kept tracked: the safe side)
        frozenset({1, "x"}),
        {1, 2, 3},  # a set can change
    ):
        assert c_untracked(kept) is kept
        assert gc.is_tracked(kept), kept
    for other in (None, 5, (1, 2)):
        assert c_untracked(other) is other


@needs_c
def test_an_untracked_set_is_still_freed_and_equal() -> None:
    """Untracking changes what the collector walks, nothing else: the set compares,
    hashes and is freed by reference counting as before."""
    prints = c_untracked(frozenset(range(1000)))
    assert prints == frozenset(range(1000)) and hash(prints) == hash(frozenset(range(1000)))
    before = sys.getrefcount(prints)
    holder = [prints]
    assert sys.getrefcount(prints) == before + 1
    del holder
    assert sys.getrefcount(prints) == before


def _histories(store: SqlStore) -> list[SessionHistory]:
    return [MemoryHistory(max_steps=3), store.session_history(max_steps=3)]


@needs_c
def test_the_steps_a_history_keeps_hold_untracked_fingerprints(
    store: SqlStore, open_replica: Callable[..., SqlStore]
) -> None:
    data = of_data(RESULT)
    more = of_data(RESULT.upper() + " and the second page")
    for history in _histories(store):
        request = of_data("Summarise the ledger export and mail it to carol@corp.example")
        history.append(
            "acme", "s", NewStep("input", "input", "input", fingerprints=request, trusted=True)
        )
        assert not gc.is_tracked(history.view("acme", "s").steps[0].fingerprints), history
        history.append("acme", "s", NewStep("tool", "read_file", "allow", "d-1"))
        history.settle("acme", "s", "d-1", executed=True, fingerprints=data)
        history.settle("acme", "s", "d-1", executed=True, fingerprints=more)  # a union
        for n in range(4):  # past the bound: the dropped steps' data go to the past
            history.append("acme", "s", NewStep("tool", f"t{n}", "allow", f"e-{n}"))
            history.settle(
                "acme", "s", f"e-{n}", executed=True, fingerprints=of_data(f"{n} {RESULT}")
            )
        view = history.view("acme", "s")
        assert [s.fingerprints for s in view.sources], history
        for step in view.sources:
            assert not gc.is_tracked(step.fingerprints), (history, step)
    # read whole by another replica (the steps unpacked from the store)
    read = open_replica().session_history(max_steps=3).view("acme", "s")
    assert read.sources and not any(gc.is_tracked(s.fingerprints) for s in read.sources)


@needs_c
def test_the_argument_probes_kept_for_repeated_values_are_untracked() -> None:
    """The caches of argument probes (up to 1,024 values each) hold fingerprints too."""
    from interlock.policy import sessionrules

    args = {"to": "carol.untracked@corp.example", "body": "see the ledger QX7K2M9PLW4R8TZC"}
    assert not gc.is_tracked(sessionrules.probed(args["to"]))
    assert not gc.is_tracked(sessionrules.seamed((args["to"], args["body"])))
    for seams in (True, False):
        union = sessionrules._union_of(args, None, seams)
        assert union is not None and not gc.is_tracked(union)


def test_without_the_extension_nothing_changes() -> None:
    """``INTERLOCK_NO_SPEEDUPS``: ``untracked`` returns its argument, still tracked."""
    code = (
        "import gc\n"
        "from interlock.session.history import untracked, MemoryHistory, NewStep\n"
        "p = frozenset({1, 2})\n"
        "assert untracked(p) is p and gc.is_tracked(p)\n"
        "h = MemoryHistory()\n"
        "h.append('a', 's', NewStep('tool', 't', 'allow', 'd'))\n"
        "h.settle('a', 's', 'd', executed=True, fingerprints=frozenset({7}))\n"
        "assert gc.is_tracked(h.view('a', 's').steps[0].fingerprints)\n"
        "print('ok')\n"
    )
    env = {**os.environ, "INTERLOCK_NO_SPEEDUPS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
