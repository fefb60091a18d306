"""The SQL session history (SQLite and PostgreSQL) behaves exactly as MemoryHistory:
the same operations give the same views; it is tenant-scoped, bounded, expires idle
sessions, fails as SessionUnavailable, and stays atomic under concurrent appends from
threads and processes."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from interlock.errors import SessionUnavailable
from interlock.session.history import MemoryHistory, NewStep, SessionView
from interlock.session.packing import pack, unpack
from interlock.store import SqlStore, open_store
from interlock.store.reaper import Reaper

WORKER = Path(__file__).parent / "_history_worker.py"


def _call(name: str, decision: str | None = None, **kw: object) -> NewStep:
    return NewStep(kind="tool", name=name, verdict="allow", decision_id=decision, **kw)  # type: ignore[arg-type]


def _comparable(view: SessionView) -> tuple[object, ...]:
    steps = tuple(
        (
            s.seq,
            s.kind,
            s.name,
            s.verdict,
            s.decision_id,
            s.labels,
            s.fingerprints,
            s.trusted,
            s.executed,
        )
        for s in view.steps
    )
    # the past's counts (not its times: the two histories' clocks differ)
    past = (
        view.past.overflowed,
        sorted((c.kind, c.name, sorted(c.labels), c.n) for c in view.past.counts),
    )
    return (view.tenant, view.session_id, steps, view.labels, view.next_seq, past)


def test_pack_round_trips_and_refuses_what_is_not_uint64() -> None:
    values = frozenset({0, 1, 2**63, 2**64 - 1, 12345678901234567890})
    assert len(pack(values)) == 8 * len(values)
    assert unpack(pack(values)) == values
    assert unpack(b"") == frozenset()
    for bad in (-1, 2**64):
        with pytest.raises(ValueError, match="64-bit unsigned"):
            pack({bad})


def test_an_unknown_session_is_empty(store: SqlStore) -> None:
    view = store.session_history().view("acme", "nobody")
    assert view == SessionView("acme", "nobody")


def test_append_settle_view(store: SqlStore, clock) -> None:  # type: ignore[no-untyped-def]
    history = store.session_history(max_steps=10, expire_after=60.0)
    first = history.append("acme", "s", _call("read_file", "d-1", labels=frozenset({"secret"})))
    assert first.seq == 1 and first.executed is None
    assert first.at == pytest.approx(clock.now / 1e6)
    history.append(
        "acme",
        "s",
        NewStep(
            kind="input", name="input", verdict="input", fingerprints=frozenset({7}), trusted=True
        ),
    )
    history.settle("acme", "s", "d-1", executed=True, fingerprints=frozenset({42, 43}))
    view = history.view("acme", "s")
    assert view.labels == {"secret"} and view.next_seq == 3
    read, given = view.steps
    assert (read.seq, read.executed, read.fingerprints) == (1, True, {42, 43})
    assert (given.kind, given.executed, given.trusted, given.fingerprints) == (
        "input",
        True,
        True,
        {7},
    )


def test_labels_attach_then_clear_in_memory_history_order(store: SqlStore) -> None:
    history = store.session_history()
    history.append("acme", "s", _call("fetch", labels=frozenset({"untrusted", "pii"})))
    # attach and clear the same label in one step: attached first, then cleared
    history.append(
        "acme",
        "s",
        _call(
            "review", labels=frozenset({"reviewed"}), clears=frozenset({"untrusted", "reviewed"})
        ),
    )
    assert history.view("acme", "s").labels == {"pii"}


def test_sessions_are_tenant_scoped(store: SqlStore) -> None:
    history = store.session_history()
    history.append("acme", "s", _call("read_file", "d-1", labels=frozenset({"secret"})))
    history.append("globex", "s", _call("fetch", "d-1"))
    # a settle in one tenant never touches the other's step of the same decision id
    history.settle("globex", "s", "d-1", executed=True, labels=frozenset({"untrusted"}))
    acme, globex = history.view("acme", "s"), history.view("globex", "s")
    assert acme.labels == {"secret"} and acme.steps[0].executed is None
    assert globex.labels == {"untrusted"} and globex.steps[0].executed is True
    assert [s.seq for s in acme.steps] == [1] and [s.seq for s in globex.steps] == [1]


def test_steps_are_bounded_seq_never_reused(store: SqlStore) -> None:
    history = store.session_history(max_steps=3)
    for i in range(7):
        history.append("acme", "s", _call(f"t{i}", f"d-{i}"))
    view = history.view("acme", "s")
    assert [s.seq for s in view.steps] == [5, 6, 7] and view.next_seq == 8
    # the dropped steps are gone from the table, not just hidden
    with store.transaction(write=False) as cur:
        cur.execute(store.q("SELECT COUNT(*) FROM session_steps"))
        assert cur.fetchone()[0] == 3
    # a settle of a dropped step is ignored
    history.settle("acme", "s", "d-0", executed=True, labels=frozenset({"x"}))
    assert history.view("acme", "s").labels == frozenset()


def test_a_smaller_bound_on_read_shows_only_the_last_steps(store: SqlStore) -> None:
    store.session_history(max_steps=10).append("acme", "s", _call("a"))
    for name in "bcd":
        store.session_history(max_steps=10).append("acme", "s", _call(name))
    assert [s.name for s in store.session_history(max_steps=2).view("acme", "s").steps] == [
        "c",
        "d",
    ]


def test_settle_ignores_unknown_decisions_and_input_steps(store: SqlStore) -> None:
    history = store.session_history()
    history.settle("acme", "nobody", "d-1", executed=True, labels=frozenset({"x"}))
    assert history.view("acme", "nobody") == SessionView("acme", "nobody")
    history.append(
        "acme", "s", NewStep(kind="input", name="input", verdict="input", decision_id="d-1")
    )
    history.settle("acme", "s", "d-1", executed=False, labels=frozenset({"x"}))
    history.settle("acme", "s", "d-unknown", executed=True, labels=frozenset({"y"}))
    view = history.view("acme", "s")
    assert view.labels == frozenset() and view.steps[0].executed is True


def test_settle_names_the_newest_step_of_a_decision(store: SqlStore) -> None:
    history = store.session_history()
    history.append("acme", "s", _call("a", "d-1"))
    history.append("acme", "s", _call("b", "d-1"))
    history.settle("acme", "s", "d-1", executed=False, labels=frozenset({"r"}))
    first, second = history.view("acme", "s").steps
    assert first.executed is None and second.executed is False and second.labels == {"r"}


def test_settle_adds_to_fingerprints_and_labels(store: SqlStore) -> None:
    history = store.session_history()
    history.append(
        "acme", "s", _call("a", "d-1", fingerprints=frozenset({1}), labels=frozenset({"a"}))
    )
    history.settle(
        "acme", "s", "d-1", executed=True, fingerprints=frozenset({2}), labels=frozenset({"b"})
    )
    history.settle("acme", "s", "d-1", executed=True, fingerprints=frozenset({3}))
    step = history.view("acme", "s").steps[0]
    assert step.fingerprints == {1, 2, 3} and step.labels == {"a", "b"}


def test_a_bad_fingerprint_writes_nothing(store: SqlStore) -> None:
    history = store.session_history()
    with pytest.raises(ValueError, match="64-bit"):
        history.append("acme", "s", _call("a", fingerprints=frozenset({-5})))
    assert history.view("acme", "s").next_seq == 1


def _random_ops(seed: int, count: int) -> list[tuple[str, object]]:
    rng = random.Random(seed)
    labels = ["secret", "untrusted", "pii", "mine"]
    ops: list[tuple[str, object]] = []
    for _ in range(count):
        roll = rng.random()
        session = rng.choice(["s1", "s2"])
        if roll < 0.6:
            kind = rng.choice(["tool", "tool", "mcp", "input"])
            ops.append(
                (
                    "append",
                    (
                        session,
                        NewStep(
                            kind=kind,  # type: ignore[arg-type]
                            name=f"n{rng.randrange(4)}",
                            verdict="input" if kind == "input" else rng.choice(["allow", "deny"]),
                            decision_id=f"d-{rng.randrange(12)}" if kind != "input" else None,
                            labels=frozenset(rng.sample(labels, rng.randrange(3))),
                            clears=frozenset(rng.sample(labels, rng.randrange(2))),
                            fingerprints=frozenset(
                                rng.getrandbits(64) for _ in range(rng.randrange(3))
                            ),
                            trusted=rng.random() < 0.3,
                        ),
                    ),
                )
            )
        else:
            ops.append(
                (
                    "settle",
                    (
                        session,
                        f"d-{rng.randrange(12)}",
                        rng.random() < 0.8,
                        frozenset(rng.getrandbits(64) for _ in range(rng.randrange(4))),
                        frozenset(rng.sample(labels, rng.randrange(2))),
                    ),
                )
            )
    return ops


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5, 6])
def test_same_operations_same_views_as_memory_history(store: SqlStore, seed: int) -> None:
    """The reference semantics: a random script of appends and settles (labels
    attached and cleared, bounded steps, settles of old, new and unknown decisions)
    leaves the SQL history and MemoryHistory in the same state after every operation,
    the past (the counts of the executed calls dropped past the bound) too."""
    sql = store.session_history(max_steps=5)
    memory = MemoryHistory(max_steps=5)
    for op, args in _random_ops(seed, 60):
        if op == "append":
            session, step = args  # type: ignore[misc]
            kept_sql, kept_memory = (
                sql.append("acme", session, step),
                memory.append("acme", session, step),
            )
            assert (kept_sql.seq, kept_sql.executed) == (kept_memory.seq, kept_memory.executed)
        else:
            session, decision, executed, fingerprints, labels = args  # type: ignore[misc]
            for history in (sql, memory):
                history.settle(
                    "acme",
                    session,
                    decision,
                    executed=executed,
                    fingerprints=fingerprints,
                    labels=labels,
                )
        for session in ("s1", "s2"):
            assert _comparable(sql.view("acme", session)) == _comparable(
                memory.view("acme", session)
            )


def test_expire_forgets_idle_sessions_only(store: SqlStore, clock) -> None:  # type: ignore[no-untyped-def]
    history = store.session_history(max_steps=10, expire_after=60.0)
    history.append("acme", "old", _call("a", "d-1"))
    history.append("globex", "old", _call("a"))
    clock.advance(50)
    history.append("acme", "young", _call("a"))
    clock.advance(20)  # "old" idle 70 s, "young" 20 s
    assert history.expire(60.0) == 2
    assert history.view("acme", "old") == SessionView("acme", "old")
    assert history.view("acme", "young").next_seq == 2
    with store.transaction(write=False) as cur:
        cur.execute(store.q("SELECT COUNT(*) FROM session_steps"))
        assert cur.fetchone()[0] == 1
    # a settle touches: a session whose call just returned is not idle
    history.settle("acme", "young", "nothing", executed=True)  # unknown: touches nothing
    clock.advance(50)
    assert history.expire(60.0) == 1


def test_the_reaper_expires_sessions_past_the_histories_bound(store: SqlStore, clock) -> None:  # type: ignore[no-untyped-def]
    assert store.reap_sessions() == 0  # no history made: nothing to expire
    history = store.session_history(expire_after=30.0)
    history.append("acme", "s", _call("a"))
    clock.advance(31)
    reaper = Reaper(store, interval=0.01)
    reaper.start()
    try:
        for _ in range(500):
            if reaper.sessions_expired:
                break
            threading.Event().wait(0.01)
    finally:
        reaper.stop()
    assert reaper.sessions_expired == 1
    assert history.view("acme", "s").next_seq == 1


def test_list_sessions(store: SqlStore, clock) -> None:  # type: ignore[no-untyped-def]
    history = store.session_history()
    history.append("acme", "a", _call("x", labels=frozenset({"secret"})))
    clock.advance(1)
    history.append("acme", "b", _call("x"))
    history.append("acme", "b", _call("y"))
    history.append("globex", "c", _call("x"))
    listed = store.list_sessions(tenant="acme")
    assert [(s.session_id, s.steps, s.labels) for s in listed] == [
        ("b", 2, frozenset()),
        ("a", 1, {"secret"}),
    ]
    assert {s.tenant for s in store.list_sessions()} == {"acme", "globex"}


def test_an_unreachable_store_is_session_unavailable(store_url: str) -> None:
    store = open_store(store_url)
    history = store.session_history()
    history.append("acme", "s", _call("a", "d-1"))
    store.close()
    for attempt in (
        lambda: history.view("acme", "s"),
        lambda: history.append("acme", "s", _call("b")),
        lambda: history.settle("acme", "s", "d-1", executed=True),
        lambda: history.expire(1.0),
    ):
        with pytest.raises(SessionUnavailable) as raised:
            attempt()
        assert raised.value.__cause__ is not None


def test_concurrent_threads_get_distinct_gapless_seqs_and_keep_every_label(
    store_url: str,
) -> None:
    """Threads with a store object each (like replicas) and threads sharing one, all
    appending and settling in one session: every seq once, no gap, no label lost."""
    shared = open_store(store_url)
    own = [open_store(store_url) for _ in range(3)]
    stores = [shared, shared, shared, *own]
    per_thread = 15
    seqs: list[int] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    barrier = threading.Barrier(len(stores))

    def run(index: int, store: SqlStore) -> None:
        try:
            history = store.session_history(max_steps=10_000)
            barrier.wait()
            for i in range(per_thread):
                tag = f"t{index}-{i}"
                step = history.append("acme", "s", _call("x", tag, labels=frozenset({tag})))
                history.settle("acme", "s", tag, executed=True, labels=frozenset({f"{tag}-out"}))
                with lock:
                    seqs.append(step.seq)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i, s)) for i, s in enumerate(stores)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        assert not errors, errors
        total = len(stores) * per_thread
        assert sorted(seqs) == list(range(1, total + 1))
        view = shared.session_history(max_steps=10_000).view("acme", "s")
        expected = {
            f"t{i}-{j}{end}"
            for i in range(len(stores))
            for j in range(per_thread)
            for end in ("", "-out")
        }
        assert view.labels == expected
        assert all(step.executed for step in view.steps) and view.next_seq == total + 1
    finally:
        for store in {id(s): s for s in stores}.values():
            store.close()


def test_concurrent_processes_get_distinct_gapless_seqs_and_keep_every_label(
    store_url: str,
) -> None:
    open_store(store_url).close()  # migrated once, before the processes race
    processes = [
        subprocess.Popen(
            [sys.executable, str(WORKER), store_url, "acme", "s", "20", f"p{i}", "2"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(3)
    ]
    try:
        for process in processes:
            assert process.stdout is not None
            assert json.loads(process.stdout.readline()) == {"ready": True}
        for process in processes:
            assert process.stdin is not None
            process.stdin.write("go\n")
            process.stdin.flush()
        seqs: list[int] = []
        for process in processes:
            out, _ = process.communicate(timeout=120)
            assert process.returncode == 0
            seqs += json.loads(out.strip().splitlines()[-1])["seqs"]
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
    assert sorted(seqs) == list(range(1, 61))
    store = open_store(store_url)
    try:
        view = store.session_history(max_steps=1000).view("acme", "s")
    finally:
        store.close()
    expected = {f"p{p}-{i}" for p in range(3) for i in range(20)}
    expected |= {f"p{p}-settled-{i}" for p in range(3) for i in range(20)}
    assert view.labels == expected
    assert all(step.executed and len(step.fingerprints) == 1 for step in view.steps)


def test_a_cached_view_sees_every_write_of_another_replica(
    store: SqlStore,
    open_replica,
    clock,  # type: ignore[no-untyped-def]
) -> None:
    """A history reads only the steps written since its last view: appends, settles
    (of old steps too), labels and the bound made through another store object all
    show, and a session expired and begun again is read afresh."""
    here = store.session_history(max_steps=4)
    there = open_replica().session_history(max_steps=4)
    there.append("acme", "s", _call("a", "d-1"))
    assert [s.name for s in here.view("acme", "s").steps] == ["a"]
    for name in "bcd":
        there.append("acme", "s", _call(name, f"d-{name}"))
    there.settle("acme", "s", "d-1", executed=True, fingerprints=frozenset({9}))
    assert _comparable(here.view("acme", "s")) == _comparable(there.view("acme", "s"))
    there.append("acme", "s", _call("e", labels=frozenset({"secret"})))  # "a" past the bound
    seen = here.view("acme", "s")
    assert [s.name for s in seen.steps] == ["b", "c", "d", "e"] and seen.labels == {"secret"}
    assert here.view("acme", "s") is seen  # nothing written since: the same view
    clock.advance(100)
    assert there.expire(50.0) == 1
    for name in "xyzw":  # begun again, as far as the old version and beyond
        there.append("acme", "s", _call(name))
    there.append("acme", "s", _call("v"))
    assert _comparable(here.view("acme", "s")) == _comparable(there.view("acme", "s"))
    assert here.view("acme", "s").labels == frozenset()
