"""Durability ``none`` from an event loop: the records a loop's tasks queue in one turn
are committed by the loop itself once the turn is over (where the store can without
waiting), not by a writer thread woken for each batch; anywhere else, and whenever
the loop cannot, the writer thread commits them as before. Nothing is lost either way:
the records, their order and the chain are what the writer thread's path gives."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from interlock import Action
from interlock.core.decision import Decision, Verdict
from interlock.core.events import Event
from interlock.store import AuditWriter, SqlStore, open_store

WAIT_S = 30.0


class Commits:
    """Records which thread commits, and how many records each commit holds."""

    def __init__(self, store: SqlStore) -> None:
        self.commits: list[tuple[str, int, bool]] = []  # (thread, records, inline)
        real, real_try = store.append_audit, store.try_append_audit

        def append(entries: Any, **options: Any) -> list[int]:
            self.commits.append((threading.current_thread().name, len(entries), False))
            return real(entries, **options)

        def try_append(entries: Any, *args: Any) -> list[int] | None:
            seqs = real_try(entries, *args)
            if seqs is not None:
                self.commits.append((threading.current_thread().name, len(entries), True))
            return seqs

        store.append_audit = append  # type: ignore[method-assign]
        store.try_append_audit = try_append  # type: ignore[method-assign]


def _event(i: int = 0, verdict: Verdict = Verdict.ALLOW) -> Event:
    action = Action.tool("read_file", {"path": f"docs/{i}.md"})
    decision = Decision(verdict=verdict, reason=f"reason {i}", rule_ids=(f"r{i}",))
    return Event("decision", time.time(), action, decision, 0)


async def _turns(n: int = 3) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def test_one_turns_records_are_committed_by_the_loop_in_one_commit(
    store: SqlStore,
) -> None:
    commits = Commits(store)
    writer = AuditWriter(store, durability="none", checkpoints=False)
    loop_thread = threading.current_thread().name
    # 20 requests served in one turn of the loop, then the next turn
    await asyncio.gather(*(writer.awrite_event("acme", _event(i)) for i in range(20)))
    await _turns()
    if store.dialect == "sqlite":  # committed here, before any flush or close
        assert commits.commits == [(loop_thread, 20, True)]
        assert store.verify_audit().checked == {"acme": 20}
    writer.close()
    assert sum(size for _, size, _ in commits.commits) == 20
    if store.dialect != "sqlite":  # never on the loop: the writer thread's, as before
        assert loop_thread not in {thread for thread, _, _ in commits.commits}
    assert store.verify_audit().checked == {"acme": 20}


async def test_each_turn_commits_its_own_batch_and_the_writer_thread_is_not_woken(
    tmp_path: Path,
) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    commits = Commits(store)
    writer = AuditWriter(store, durability="none", checkpoints=False)
    woken = 0
    real_notify = writer._work.notify

    def notify(n: int = 1) -> None:
        nonlocal woken
        woken += 1
        real_notify(n)

    writer._work.notify = notify  # type: ignore[method-assign]
    for turn in range(5):
        await asyncio.gather(*(writer.awrite_event("acme", _event(turn)) for _ in range(4)))
        await _turns()
    assert woken == 0
    assert [(size, inline) for _, size, inline in commits.commits] == [(4, True)] * 5
    writer.close()
    assert store.verify_audit().checked == {"acme": 20}
    store.close()


async def test_a_flush_on_the_loops_own_thread_does_not_wait_for_the_loop(
    store: SqlStore,
) -> None:
    # The loop cannot run its callback while this thread blocks in flush(): the writer
    # thread takes the batch instead.
    writer = AuditWriter(store, durability="none", checkpoints=False)
    for i in range(5):
        await writer.awrite_event("acme", _event(i))
    began = time.monotonic()
    assert writer.flush(WAIT_S)
    assert time.monotonic() - began < WAIT_S / 2
    assert store.verify_audit().checked == {"acme": 5}
    await _turns()  # the loop's callback finds the batch taken: nothing twice
    writer.close()
    assert store.verify_audit().checked == {"acme": 5}


async def test_with_the_write_lock_taken_the_writer_thread_commits_the_batch(
    tmp_path: Path,
) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    commits = Commits(store)
    writer = AuditWriter(store, durability="none", checkpoints=False)
    other = sqlite3.connect(tmp_path / "db.sqlite", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process's write
    await asyncio.gather(*(writer.awrite_event("acme", _event(i)) for i in range(6)))
    await _turns()
    await asyncio.sleep(0.05)  # the writer thread waits for the lock, not the loop
    other.execute("COMMIT")
    other.close()
    assert writer.flush(WAIT_S)
    loop_thread = threading.current_thread().name
    assert [(size, inline) for _, size, inline in commits.commits] == [(6, False)]
    assert commits.commits[0][0] != loop_thread
    writer.close()
    assert store.verify_audit().checked == {"acme": 6}
    store.close()


async def test_a_commit_running_on_the_writer_thread_leaves_it_the_next_batch(
    tmp_path: Path,
) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    commits = Commits(store)
    writer = AuditWriter(store, durability="none", checkpoints=False)
    gate, entered = threading.Event(), threading.Event()
    real_append = store.append_audit

    def held(entries: Any, **options: Any) -> list[int]:
        entered.set()
        assert gate.wait(WAIT_S)
        return real_append(entries, **options)

    store.append_audit = held  # type: ignore[method-assign]
    writer.write_event_nowait("acme", _event(0))  # a thread's record: the writer's commit
    assert await asyncio.to_thread(entered.wait, WAIT_S)
    await asyncio.gather(*(writer.awrite_event("acme", _event(i)) for i in range(1, 4)))
    await _turns()  # the loop finds a commit running: never two at once
    gate.set()
    assert writer.flush(WAIT_S)
    writer.close()
    assert [(size, inline) for _, size, inline in commits.commits] == [(1, False), (3, False)]
    assert store.verify_audit().checked == {"acme": 4}
    store.close()


async def test_records_queued_as_the_writer_closes_are_all_written(store: SqlStore) -> None:
    writer = AuditWriter(store, durability="none", checkpoints=False)
    await asyncio.gather(*(writer.awrite_event("acme", _event(i)) for i in range(7)))
    writer.close()  # before the loop's turn: the writer thread drains the batch
    await _turns()
    assert store.verify_audit().checked == {"acme": 7}


def _stored(store: SqlStore) -> list[tuple[str, str | None, str]]:
    rows = store.audit_rows(tenant="acme")
    return [(row.kind, row.decision, row.body) for row in rows]


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    turns=st.lists(
        st.lists(st.tuples(st.integers(0, 50), st.sampled_from(list(Verdict))), max_size=6),
        min_size=1,
        max_size=5,
    )
)
def test_the_loops_commit_stores_what_the_writer_threads_would(
    tmp_path: Path, turns: list[list[tuple[int, Verdict]]]
) -> None:
    """The reference is the writer thread's path (``write_event_nowait``): the same
    events give the same records in the same order, and both chains verify."""
    stamp = time.time()
    events = [
        [_event(i, verdict)._replace(ts=stamp + n) for n, (i, verdict) in enumerate(turn)]
        for turn in turns
    ]
    total = sum(len(turn) for turn in events)
    run = f"{time.monotonic_ns()}"
    loop_store = open_store(f"sqlite:///{tmp_path / f'loop-{run}.db'}")
    thread_store = open_store(f"sqlite:///{tmp_path / f'thread-{run}.db'}")
    loop_writer = AuditWriter(loop_store, durability="none", checkpoints=False)
    thread_writer = AuditWriter(thread_store, durability="none", checkpoints=False)

    async def on_the_loop() -> None:
        for turn in events:
            for event in turn:  # in order: one task step serves them one after the other
                await loop_writer.awrite_event("acme", event)
            await _turns()

    asyncio.run(on_the_loop())
    for turn in events:
        for event in turn:
            thread_writer.write_event_nowait("acme", event)
    loop_writer.close()
    thread_writer.close()
    try:
        assert _stored(loop_store) == _stored(thread_store)
        assert len(_stored(loop_store)) == total
        if total:
            assert loop_store.verify_audit().checked == {"acme": total}
            assert thread_store.verify_audit().checked == {"acme": total}
    finally:
        loop_store.close()
        thread_store.close()
