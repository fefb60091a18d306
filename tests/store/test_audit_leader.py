"""Who commits an audit batch: a waiting caller that finds no commit running makes it
on its own thread (no hand-off); callers arriving meanwhile share the next commit,
made by the writer thread; never two commits at once; an async caller never commits
on the event loop; an interrupted leader fails its batch closed and the writer
carries on."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from interlock import Action
from interlock.core.events import Event
from interlock.errors import AuditFailure, StoreError
from interlock.store import AuditWriter, SqlStore, open_store

WAIT_S = 30.0  # a hang guard


class Watched:
    """Wraps ``store.append_audit``: records the committing thread and the batch size,
    counts commits running at once, and can hold a commit at a gate."""

    def __init__(self, store: SqlStore) -> None:
        self.store = store
        self.real = store.append_audit
        self.commits: list[tuple[str, int]] = []  # (thread name, records)
        self.running = 0
        self.most_at_once = 0
        self.lock = threading.Lock()
        self.gate: threading.Event | None = None
        self.entered = threading.Event()
        self.fail_with: BaseException | None = None
        self.inline = 0  # commits made by try_append_audit
        self.fail_inline_with: BaseException | None = None
        self.real_try = store.try_append_audit
        store.append_audit = self.append  # type: ignore[method-assign]
        store.try_append_audit = self.try_append  # type: ignore[method-assign]

    def try_append(self, entries: Any) -> list[int] | None:
        if self.fail_inline_with is not None:
            failure, self.fail_inline_with = self.fail_inline_with, None
            raise failure
        seqs = self.real_try(entries)
        if seqs is not None:
            with self.lock:
                self.inline += 1
                self.commits.append((threading.current_thread().name, len(entries)))
        return seqs

    def append(self, entries: Any, *, durable: bool = False) -> list[int]:
        with self.lock:
            self.running += 1
            self.most_at_once = max(self.most_at_once, self.running)
            self.commits.append((threading.current_thread().name, len(entries)))
        try:
            self.entered.set()
            if self.gate is not None:
                assert self.gate.wait(WAIT_S)
            if self.fail_with is not None:
                failure, self.fail_with = self.fail_with, None
                raise failure
            return self.real(entries, durable=durable)
        finally:
            with self.lock:
                self.running -= 1


@pytest.fixture
def watched(store: SqlStore) -> Iterator[Watched]:
    watch = Watched(store)
    yield watch
    store.append_audit = watch.real  # type: ignore[method-assign]
    store.try_append_audit = watch.real_try  # type: ignore[method-assign]


def test_a_lone_caller_commits_its_record_on_its_own_thread(
    store: SqlStore, watched: Watched
) -> None:
    writer = AuditWriter(store)
    seqs = [writer.write_record("acme", "note", {"n": n}) for n in range(5)]
    writer.close()
    assert seqs == [1, 2, 3, 4, 5]
    me = threading.current_thread().name
    assert watched.commits == [(me, 1)] * 5  # no hand-off to the writer thread
    assert store.verify_audit().checked == {"acme": 5}


def test_callers_arriving_during_a_commit_share_the_next_one_made_by_the_writer(
    store: SqlStore, watched: Watched
) -> None:
    writer = AuditWriter(store)
    watched.gate = threading.Event()
    results: dict[str, int | None] = {}

    def write(name: str) -> None:
        results[name] = writer.write_record("acme", "note", {"who": name})

    leader = threading.Thread(target=write, args=("leader",), name="leader")
    leader.start()
    assert watched.entered.wait(WAIT_S)  # the leader's commit is running (held)
    followers = [threading.Thread(target=write, args=(f"f{i}",), name=f"f{i}") for i in range(6)]
    for follower in followers:
        follower.start()
    while len(writer._open.items) < 6:  # every follower has queued its record
        threading.Event().wait(0.005)
    watched.gate.set()
    for thread in (leader, *followers):
        thread.join(WAIT_S)
    writer.close()

    assert watched.commits[0] == ("leader", 1)
    assert watched.commits[1:] == [("interlock-audit", 6)]  # one shared commit
    assert watched.most_at_once == 1
    assert sorted(v for v in results.values() if v is not None) == list(range(1, 8))
    assert store.verify_audit().checked == {"acme": 7}


def test_many_threads_never_commit_at_once_and_lose_nothing(
    store: SqlStore, watched: Watched
) -> None:
    writer = AuditWriter(store)
    threads, each = 8, 30
    start = threading.Barrier(threads)
    seqs: list[int | None] = []
    lock = threading.Lock()

    def work(index: int) -> None:
        start.wait(WAIT_S)
        for n in range(each):
            seq = writer.write_record("acme", "note", {"t": index, "n": n})
            with lock:
                seqs.append(seq)

    workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(WAIT_S * 2)
    writer.close()
    assert watched.most_at_once == 1
    assert sorted(s for s in seqs if s is not None) == list(range(1, threads * each + 1))
    assert sum(size for _, size in watched.commits) == threads * each
    assert store.verify_audit().checked == {"acme": threads * each}


async def test_an_async_caller_commits_on_the_loop_only_where_that_cannot_wait(
    store: SqlStore, watched: Watched
) -> None:
    writer = AuditWriter(store)
    loop_thread = threading.current_thread().name
    seqs = [await writer.awrite_event("acme", _event()) for _ in range(3)]
    writer.close()
    assert seqs == [1, 2, 3]
    if store.dialect == "sqlite":  # its lock free: tens of µs, no wait, no checkpoint
        assert watched.commits == [(loop_thread, 1)] * 3
        assert watched.inline == 3
    else:  # a network round trip: never on the event loop
        assert loop_thread not in {name for name, _ in watched.commits}
        assert sum(size for _, size in watched.commits) == 3
    assert store.verify_audit().checked == {"acme": 3}


async def test_async_callers_of_one_loop_turn_share_one_commit(
    store: SqlStore, watched: Watched
) -> None:
    # 20 requests read in the same turn of the loop (a server under load): the first
    # lets the loop run the others once, and their records join its batch.
    writer = AuditWriter(store)
    seqs = await asyncio.gather(*(writer.awrite_event("acme", _event()) for _ in range(20)))
    writer.close()
    assert sorted(seqs) == list(range(1, 21))
    assert [size for _, size in watched.commits] == [20]
    if store.dialect == "sqlite":
        assert watched.commits[0][0] == threading.current_thread().name
    assert store.verify_audit().checked == {"acme": 20}


class Wakes:
    """Counts the loop's ``call_soon_threadsafe`` calls: a wake-up through its
    self-pipe (a write, then a read on the loop's next turn)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.real = loop.call_soon_threadsafe
        self.count = 0
        loop.call_soon_threadsafe = self.call  # type: ignore[method-assign]

    def call(self, callback: Callable[..., object], *args: Any, **kwargs: Any) -> Any:
        self.count += 1
        return self.real(callback, *args, **kwargs)

    def restore(self) -> None:
        self.loop.call_soon_threadsafe = self.real  # type: ignore[method-assign]


async def test_a_batch_committed_on_the_loop_wakes_its_waiters_without_the_self_pipe(
    store: SqlStore, watched: Watched
) -> None:
    writer = AuditWriter(store)
    wakes = Wakes(asyncio.get_running_loop())
    try:
        alone = [await writer.awrite_event("acme", _event()) for _ in range(3)]
        shared = await asyncio.gather(*(writer.awrite_event("acme", _event()) for _ in range(8)))
    finally:
        wakes.restore()
    writer.close()
    assert alone == [1, 2, 3]
    assert sorted(shared) == list(range(4, 12))
    assert [size for _, size in watched.commits] == [1, 1, 1, 8]
    if store.dialect == "sqlite":  # committed on the loop's thread: woken directly
        assert watched.inline == 4
        assert wakes.count == 0
    else:  # committed on a worker: each wait ends through the self-pipe
        assert wakes.count >= 4
    assert store.verify_audit().checked == {"acme": 11}


async def test_a_batch_committed_on_another_thread_wakes_its_waiters_through_the_loop(
    store: SqlStore, watched: Watched
) -> None:
    # The look-alike: durability power never commits on the loop; the waits end all
    # the same, each woken through the loop's self-pipe from the committing thread.
    writer = AuditWriter(store, durability="power")
    wakes = Wakes(asyncio.get_running_loop())
    try:
        seqs = await asyncio.gather(*(writer.awrite_event("acme", _event()) for _ in range(5)))
    finally:
        wakes.restore()
    writer.close()
    assert sorted(seqs) == [1, 2, 3, 4, 5]
    assert watched.inline == 0
    assert 1 <= wakes.count <= 5
    assert store.verify_audit().checked == {"acme": 5}


async def test_a_leader_cancelled_while_others_join_still_gets_the_batch_committed(
    store: SqlStore, watched: Watched
) -> None:
    writer = AuditWriter(store)
    leader, *others = [
        asyncio.ensure_future(writer.awrite_event("acme", _event())) for _ in range(4)
    ]
    # One turn: the leader takes the batch and gives the loop its turn; the others
    # join it; then, before the leader is back, it is cancelled.
    await asyncio.sleep(0)
    assert not leader.done() and leader.cancel()
    seqs = await asyncio.wait_for(asyncio.gather(*others), WAIT_S)
    with pytest.raises(asyncio.CancelledError):
        await leader
    assert writer.flush(WAIT_S)
    writer.close()
    # the cancelled caller's record too: it may have happened; the writer thread
    # committed the batch, in one piece
    assert sorted(seqs) == [2, 3, 4]
    assert [size for _, size in watched.commits] == [4]
    assert watched.commits[0][0] != threading.current_thread().name
    assert store.verify_audit().checked == {"acme": 4}


async def test_an_inline_commit_that_fails_is_handed_to_a_worker_and_lands(
    store: SqlStore, watched: Watched
) -> None:
    writer = AuditWriter(store)
    watched.fail_inline_with = StoreError("disk I/O error")
    assert await writer.awrite_event("acme", _event()) == 1
    writer.close()
    assert watched.inline == 0
    ((thread, size),) = watched.commits
    assert size == 1 and thread != threading.current_thread().name
    assert store.verify_audit().checked == {"acme": 1}


async def test_with_durability_power_an_async_caller_never_commits_on_the_loop(
    store: SqlStore, watched: Watched
) -> None:
    writer = AuditWriter(store, durability="power")  # a disk sync: milliseconds
    loop_thread = threading.current_thread().name
    assert [await writer.awrite_event("acme", _event()) for _ in range(3)] == [1, 2, 3]
    writer.close()
    assert watched.inline == 0
    assert loop_thread not in {name for name, _ in watched.commits}


async def test_an_async_caller_finding_the_write_lock_taken_leaves_the_loop_free(
    tmp_path: Path,
) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    watched = Watched(store)
    writer = AuditWriter(store)
    other = sqlite3.connect(tmp_path / "db.sqlite", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process's write, say
    task = asyncio.ensure_future(writer.awrite_event("acme", _event()))
    ticks = 0
    while ticks < 20:  # the loop keeps running while the record waits for the lock
        await asyncio.sleep(0.005)
        ticks += 1
    assert not task.done()
    other.execute("COMMIT")
    assert await asyncio.wait_for(task, WAIT_S) == 1
    writer.close()
    other.close()
    loop_thread = threading.current_thread().name
    assert watched.inline == 0
    assert [size for _, size in watched.commits] == [1]
    assert watched.commits[0][0] != loop_thread
    assert store.verify_audit().checked == {"acme": 1}
    store.close()


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, SystemExit])
def test_an_interrupted_leader_fails_its_batch_closed_and_the_writer_carries_on(
    store: SqlStore, watched: Watched, interrupt: Callable[[], BaseException]
) -> None:
    writer = AuditWriter(store)
    watched.fail_with = interrupt()
    with pytest.raises(interrupt):  # type: ignore[call-overload]
        writer.write_record("acme", "note", {"n": 1})
    # the batch it led is settled as failed (nobody waits forever on it)...
    assert writer._writing is None
    # ...and the next caller, and the writer thread, still work
    assert writer.write_record("acme", "note", {"n": 2}) == 1
    writer.write_event_nowait("acme", _event())
    assert writer.flush(WAIT_S)
    writer.close()
    assert store.verify_audit().checked == {"acme": 2}


class HeldWriter(AuditWriter):
    """A writer whose thread starts working only once ``release`` is set, so a record
    queued for it is still in the open batch when a caller comes to lead."""

    def __init__(self, store: SqlStore, **options: Any) -> None:
        self.release = threading.Event()
        super().__init__(store, **options)

    def _run(self) -> None:
        assert self.release.wait(WAIT_S)
        super()._run()


def test_a_record_an_interrupted_leader_took_along_fails_closed_at_once(
    store: SqlStore, watched: Watched
) -> None:
    writer = HeldWriter(store, timeout=WAIT_S)
    writer.write_event_nowait("acme", _event())  # queued for the (held) writer thread
    queued = writer._open
    assert len(queued.items) == 1
    watched.fail_with = KeyboardInterrupt()
    with pytest.raises(KeyboardInterrupt):  # this caller leads: its batch holds both
        writer.write_record("acme", "note", {"n": 1})
    # whoever waits on that batch (flush, an async caller) is released with a failure
    assert queued.settled
    assert isinstance(queued.error, AuditFailure) and "interrupted" in str(queued.error)
    assert watched.commits == [(threading.current_thread().name, 2)]
    writer.release.set()
    assert writer.write_record("acme", "note", {"n": 2}) == 1  # and all still works
    writer.close()


def _event() -> Event:
    return Event("decision", time.time(), Action.tool("read_file", {"path": "a"}), None, 0)
