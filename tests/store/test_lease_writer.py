"""The lease rows' group commit (:mod:`interlock.store.lease_writer`, ADR 0012 §7): each
row is written by exactly one batch, each caller hears what its own row's batch
wrote, no more batches run at once than allowed, and a failed batch fails each of its
callers — then, on PostgreSQL, many threads of one replica serving a budget from its
lease through it: the counters add up, nothing is written twice."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest

from interlock.errors import StoreError, StoreTimeout
from interlock.store import BudgetLine, SqlStore
from interlock.store.lease_writer import LeaseWriter, Row


class Recorder:
    """A write function that remembers every batch, takes a little while (so callers
    gather), and writes each row whose id does not start with ``no``."""

    def __init__(self, pause: float = 0.002) -> None:
        self.pause = pause
        self.batches: list[tuple[list[str], list[str]]] = []
        self.running = 0
        self.most_running = 0
        self.lock = threading.Lock()

    def __call__(self, inserts: Sequence[Row], settles: Sequence[Row]) -> set[str]:
        with self.lock:
            self.running += 1
            self.most_running = max(self.most_running, self.running)
            self.batches.append(([r[0] for r in inserts], [r[0] for r in settles]))
        time.sleep(self.pause)
        with self.lock:
            self.running -= 1
        return {r[0] for r in (*inserts, *settles) if not str(r[0]).startswith("no")}


def hammer(writer: LeaseWriter, threads: int, each: int) -> dict[str, bool]:
    heard: dict[str, bool] = {}
    lock = threading.Lock()
    start = threading.Barrier(threads)

    def work(t: int) -> None:
        start.wait()
        for i in range(each):
            row_id = f"{'no' if i % 5 == 0 else ''}r{t}-{i}"
            said = writer.settle((row_id,)) if i % 2 else writer.insert((row_id,))
            with lock:
                heard[row_id] = said

    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return heard


@pytest.mark.parametrize("in_flight", [1, 2, 3])
def test_every_row_is_written_by_exactly_one_batch_and_its_caller_hears_it(
    in_flight: int,
) -> None:
    write = Recorder()
    writer = LeaseWriter(write, in_flight=in_flight)
    heard = hammer(writer, threads=8, each=40)
    written = [row for inserts, settles in write.batches for row in (*inserts, *settles)]
    assert sorted(written) == sorted(heard)  # each row in exactly one batch
    assert all(said is not row.startswith("no") for row, said in heard.items())
    assert write.most_running <= in_flight
    assert len(write.batches) < len(heard)  # rows shared commits
    assert writer.rows == len(heard) and writer.batches == len(write.batches)


def test_a_failed_batch_fails_each_of_its_callers_with_a_store_error() -> None:
    def broken(inserts: Sequence[Row], settles: Sequence[Row]) -> set[str]:
        time.sleep(0.002)
        raise StoreTimeout("the connection was cut")

    writer = LeaseWriter(broken)
    failures: list[BaseException] = []

    def work(i: int) -> None:
        try:
            writer.insert((f"r{i}",))
        except StoreError as exc:
            failures.append(exc)

    workers = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert len(failures) == 6
    assert all(isinstance(exc, StoreTimeout) for exc in failures)  # the kind is kept
    assert len({id(exc) for exc in failures}) == 6  # each caller its own exception


def test_a_batch_runs_under_the_latest_deadline_of_its_callers() -> None:
    from interlock.core.deadline import current_deadline, deadline_scope

    seen: list[float | None] = []
    gate = threading.Event()

    def write(inserts: Sequence[Row], settles: Sequence[Row]) -> set[str]:
        seen.append(current_deadline())
        gate.wait(1.0)
        return {r[0] for r in (*inserts, *settles)}

    writer = LeaseWriter(write, in_flight=1)
    far = time.monotonic() + 50

    def call(row: str, deadline: float | None) -> None:
        with deadline_scope(deadline):
            writer.insert((row,))

    first = threading.Thread(target=call, args=("a", time.monotonic() + 30))
    first.start()
    while not seen:  # the first batch is being written: the next two gather
        time.sleep(0.001)
    later = [
        threading.Thread(target=call, args=("b", time.monotonic() + 20)),
        threading.Thread(target=call, args=("c", far)),
    ]
    for thread in later:
        thread.start()
    time.sleep(0.05)
    gate.set()
    for thread in (first, *later):
        thread.join()
    assert seen[1] == far


# -- on PostgreSQL, through the store ---------------------------------------------------


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_many_threads_serving_from_one_lease_add_up(store: SqlStore) -> None:
    store.lease_budgets({"pool": 300})
    committed: list[int] = []
    lock = threading.Lock()

    def work(t: int) -> None:
        for i in range(60):
            amount = 1 + (t + i) % 7
            line = BudgetLine("pool", "global", 0, "units", 1_000_000, amount, 2)
            got = store.reserve(
                tenant="acme", idempotency_key=f"t{t}-{i}", lines=[line], ttl_us=10**9
            )
            assert got.reservation is not None
            if i % 4 == 3:
                store.release(got.reservation.id)
                continue
            used = amount + (i % 3)  # under, at and past the reservation (headroom 2)
            store.commit(got.reservation.id, {"pool": used})
            with lock:
                committed.append(used)

    workers = [threading.Thread(target=work, args=(t,)) for t in range(6)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    writer: Any = store._lease_writer  # type: ignore[attr-defined]
    assert writer.batches < writer.rows  # rows shared transactions
    store._return_leases(store.clock(), everything=True)
    (row,) = store.budget_rows(tenant="acme", budget_id="pool")
    assert (row.spent, row.reserved, row.headroom) == (sum(committed), 0, 0)
    with store.transaction(write=False) as cur:
        cur.execute("SELECT status, count(*) FROM reservations GROUP BY status ORDER BY 1")
        counts = dict(cur.fetchall())
        cur.execute("SELECT count(*) FROM reservations WHERE lease_id IS NOT NULL")
        (attached,) = cur.fetchone()
    assert counts == {"committed": len(committed), "released": 6 * 60 - len(committed)}
    assert attached == 0  # every row folded into the counter when the lease closed
