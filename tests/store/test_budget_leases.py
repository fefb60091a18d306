"""Budget leases (docs/adr/0012-budget-leases.md), on SQLite and PostgreSQL: a replica
serves reservations from a slice it took from the shared counter, the slice counts as
reserved there, the counter never admits past its cap, and a lease its holder stopped
renewing is closed by the reaper with nothing lost — and, on PostgreSQL, a reservation
and a commit are each one round trip."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from interlock.errors import StoreError
from interlock.store import BudgetLine, ReservationStatus, SqlStore

TENANT = "acme"
TTL_US = 60_000_000


def line(amount: int, *, cap: int = 1_000, headroom: int = 0) -> BudgetLine:
    return BudgetLine("pool", "global", 0, "units", cap, amount, headroom)


def row(store: SqlStore) -> Any:
    (counter,) = store.budget_rows(tenant=TENANT, budget_id="pool")
    return counter


def leases(store: SqlStore) -> list[tuple[str, int]]:
    with store.transaction(write=False) as cur:
        cur.execute("SELECT owner, granted FROM budget_leases ORDER BY owner")
        return [(str(r[0]), int(r[1])) for r in cur.fetchall()]


def reserve(store: SqlStore, key: str, amount: int, **kw: Any) -> Any:
    return store.reserve(
        tenant=TENANT, idempotency_key=key, lines=(line(amount, **kw),), ttl_us=TTL_US
    )


def test_a_lease_serves_reservations_and_counts_its_slice_as_reserved(store: SqlStore) -> None:
    store.lease_budgets({"pool": 100})
    first = reserve(store, "a", 10).reservation
    second = reserve(store, "b", 20).reservation
    assert first is not None and second is not None
    counter = row(store)
    assert (counter.spent, counter.reserved) == (0, 100)  # the slice, not 30
    assert store.commit(first.id, {"pool": 7}).actual == {"pool": 7}
    assert store.release(second.id).status is ReservationStatus.RELEASED
    assert store.commit(first.id).replayed  # committing twice changes nothing
    store._return_leases(store.clock(), everything=True)
    counter = row(store)
    assert (counter.spent, counter.reserved, counter.headroom) == (7, 0, 0)
    assert leases(store) == []


def test_the_cap_holds_across_replicas_holding_leases(
    store: SqlStore, open_replica: Callable[..., SqlStore]
) -> None:
    other = open_replica()
    store.lease_budgets({"pool": 300})
    other.lease_budgets({"pool": 300})
    taken = 0
    for i in range(200):
        for replica in (store, other):
            outcome = reserve(replica, f"{id(replica)}-{i}", 9)
            if outcome.reservation is not None:
                taken += 9
                counter = row(store)
                assert counter.spent + counter.reserved + counter.headroom <= 1_000
    # nearly all of the cap (what a leased replica has free it hands back), never more
    assert 1_000 - 18 < taken <= 1_000
    refused = reserve(store, "over", 9)
    assert refused.reservation is None and refused.refusal is not None  # still a deny


def test_a_closed_budget_refuses_a_leased_reservation(store: SqlStore) -> None:
    store.lease_budgets({"pool": 100})
    held = reserve(store, "a", 10, headroom=5).reservation
    assert held is not None
    store.commit(held.id, {"pool": 40})  # past amount + headroom: excess closes it
    outcome = reserve(store, "b", 1)
    assert outcome.reservation is None
    assert outcome.refusal is not None and outcome.refusal.closed is not None
    store._return_leases(store.clock(), everything=True)
    counter = row(store)
    assert (counter.spent, counter.excess, counter.reserved, counter.headroom) == (40, 25, 0, 0)


def test_a_crashed_holders_lease_is_reclaimed_by_the_reaper_after_expiry(
    store: SqlStore, open_replica: Callable[..., SqlStore], clock: Any
) -> None:
    holder = open_replica()
    holder.lease_budgets({"pool": 200}, ttl=10.0)
    done = reserve(holder, "done", 30).reservation
    flying = reserve(holder, "flying", 50).reservation
    assert done is not None and flying is not None
    holder.commit(done.id, {"pool": 25})
    holder.leases = None  # the holder "crashes": it neither returns nor renews
    assert row(store).reserved == 200
    store.reap()  # not yet expired: nothing moves
    assert row(store).reserved == 200 and len(leases(store)) == 1
    clock.advance(11)
    store.reap()
    counter = row(store)
    # what was committed is spent; the one in flight is an ordinary reservation now
    assert (counter.spent, counter.reserved) == (25, 50)
    assert leases(store) == []
    assert store.commit(flying.id, {"pool": 45}).status is ReservationStatus.COMMITTED
    counter = row(store)
    assert (counter.spent, counter.reserved, counter.headroom) == (70, 0, 0)


def test_a_leased_reservation_nobody_settles_is_charged_once_the_lease_closes(
    store: SqlStore, clock: Any
) -> None:
    store.lease_budgets({"pool": 100}, ttl=10.0)
    held = reserve(store, "a", 10, headroom=4).reservation
    assert held is not None
    clock.advance(120)  # past the reservation's TTL and the lease's expiry
    store.reap()  # returns the lease (the reservation becomes ordinary) ...
    store.reap()  # ... and expires it: charged in full
    counter = row(store)
    assert (counter.spent, counter.reserved, counter.headroom) == (10, 0, 0)
    assert store.get_reservation(held.id).status is ReservationStatus.EXPIRED


def test_another_replica_settles_a_leased_reservation_on_the_counter(
    store: SqlStore, open_replica: Callable[..., SqlStore]
) -> None:
    store.lease_budgets({"pool": 100})
    other = open_replica()
    held = reserve(store, "a", 10, headroom=10).reservation
    assert held is not None
    assert other.commit(held.id, {"pool": 15}).actual == {"pool": 15}
    counter = row(other)
    # the lease keeps the rest of its slice
    assert (counter.spent, counter.reserved, counter.headroom) == (15, 80, 0)
    assert store.commit(held.id).replayed
    store.close()
    counter = row(other)
    assert (counter.spent, counter.reserved, counter.headroom) == (15, 0, 0)


@contextmanager
def statements() -> Iterator[list[str]]:
    """Every statement psycopg sends, in order (``BEGIN``/``COMMIT`` included)."""
    import psycopg

    sent: list[str] = []
    real = psycopg.Cursor.execute

    def counting(self: Any, query: Any, params: Any = None, **kw: Any) -> Any:
        sent.append(str(query).split(None, 1)[0].upper())
        return real(self, query, params, **kw)

    psycopg.Cursor.execute = counting  # type: ignore[method-assign]
    try:
        yield sent
    finally:
        psycopg.Cursor.execute = real  # type: ignore[method-assign]


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_reservation_and_its_commit_are_one_round_trip_each_on_postgresql(
    store: SqlStore,
) -> None:
    reserve(store, "warm", 1)
    with statements() as sent:
        held = reserve(store, "a", 10).reservation
        assert held is not None
        assert sent == ["SELECT"]
        sent.clear()
        assert store.commit(held.id, {"pool": 8}).actual == {"pool": 8}
        assert sent == ["SELECT"]
    counter = row(store)
    assert (counter.spent, counter.reserved) == (8, 1)  # the warm-up is still held


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_leased_reservation_and_its_commit_are_one_round_trip_each_on_postgresql(
    store: SqlStore,
) -> None:
    store.lease_budgets({"pool": 100})
    reserve(store, "warm", 1)  # grants the lease
    with statements() as sent:
        held = reserve(store, "a", 10).reservation
        assert held is not None
        assert sent == ["WITH"]  # the lease writer's statement (one row in it)
        sent.clear()
        store.commit(held.id, {"pool": 8})
        assert sent == ["WITH"]


def test_an_idle_lease_is_handed_back_by_its_holders_reaper(store: SqlStore, clock: Any) -> None:
    store.lease_budgets({"pool": 100}, ttl=30.0, idle=5.0)
    held = reserve(store, "a", 10).reservation
    assert held is not None
    store.commit(held.id)
    clock.advance(2)
    store.reap()  # in use 2 s ago: kept
    assert row(store).reserved == 100 and len(leases(store)) == 1
    clock.advance(4)
    store.reap()  # idle for 6 s: folded and handed back
    counter = row(store)
    assert (counter.spent, counter.reserved) == (10, 0)
    assert leases(store) == []


def test_a_lease_in_use_is_renewed_and_never_reaped_by_another_replica(
    store: SqlStore, open_replica: Callable[..., SqlStore], clock: Any
) -> None:
    other = open_replica()
    store.lease_budgets({"pool": 500}, ttl=10.0, idle=60.0, max_age=600.0)
    for i in range(12):  # 48 s of use, well past the 10 s TTL: renewed as it goes
        held = reserve(store, f"k{i}", 10).reservation
        assert held is not None
        store.commit(held.id)
        clock.advance(4)
        other.reap()
        assert len(leases(other)) == 1, f"the live lease was reaped after {4 * (i + 1)} s"
    store._return_leases(store.clock(), everything=True)
    counter = row(other)
    assert (counter.spent, counter.reserved) == (120, 0)


def test_a_lease_write_that_fails_keeps_its_units_taken(store: SqlStore) -> None:
    """A failed write may have been committed (its answer lost): the lease must not
    serve those units again, or it could serve more than it holds."""
    book = store.lease_budgets({"pool": 100})
    held = reserve(store, "a", 10).reservation
    assert held is not None
    (lease,) = book.due(store.clock(), everything=True)
    free = lease.free

    def broken(*args: Any) -> bool:
        raise StoreError("connection cut after the commit was sent")

    store._lease_insert = broken  # type: ignore[method-assign]
    with pytest.raises(StoreError):
        reserve(store, "b", 20)
    assert lease.free == free - 20 and lease.pending == 0
