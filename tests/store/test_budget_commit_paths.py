"""The short paths of a reservation and its commit (issue 13, ADR 0012 §6): a commit of
a reservation this instance made writes without reading it back, and a reservation on
an existing open counter is one UPDATE. Each short path decides only its usual case
and leaves every other to the general one: these tests settle or change the
reservation behind the instance's back and check nothing is charged twice, refunded
or lost."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from interlock.errors import ReservationClosed, ReservationNotOwned
from interlock.store import (
    BudgetLine,
    BudgetRow,
    Reservation,
    ReservationStatus,
    ReserveOutcome,
    SqlStore,
)
from interlock.store.sql_budgets import _Unsettled


def line(amount: int, *, cap: int = 100, headroom: int = 0) -> BudgetLine:
    return BudgetLine("spend", "global", 0, "units", cap, amount, headroom)


def reserve(store: SqlStore, key: str, spend: BudgetLine, **options: Any) -> ReserveOutcome:
    ttl_s = options.pop("ttl_s", 60)
    return store.reserve(
        tenant="acme", idempotency_key=key, lines=[spend], ttl_us=ttl_s * 1_000_000, **options
    )


def reserved_id(store: SqlStore, key: str, spend: BudgetLine, **options: Any) -> str:
    outcome = reserve(store, key, spend, **options)
    assert outcome.reservation is not None, outcome.refusal
    return outcome.reservation.id


def budget(store: SqlStore) -> BudgetRow:
    (row,) = store.budget_rows(tenant="acme", budget_id="spend")
    return row


def counters(store: SqlStore) -> tuple[int, int, int]:
    row = budget(store)
    return (row.spent, row.reserved, row.overage)


def test_a_commit_after_another_instance_released_it_charges_nothing(
    store: SqlStore, open_replica: Callable[..., SqlStore]
) -> None:
    rid = reserved_id(store, "k1", line(30))
    open_replica().release(rid)
    with pytest.raises(ReservationClosed):
        store.commit(rid)
    assert counters(store) == (0, 0, 0)
    assert store.get_reservation(rid).status is ReservationStatus.RELEASED


def test_a_commit_after_another_instance_committed_it_charges_once(
    store: SqlStore, open_replica: Callable[..., SqlStore]
) -> None:
    rid = reserved_id(store, "k1", line(30))
    open_replica().commit(rid, {"spend": 20})
    again = store.commit(rid, {"spend": 25})
    assert again.replayed
    assert again.actual == {"spend": 20}
    assert counters(store) == (20, 0, 0)


def test_a_commit_after_the_reaper_expired_it_charges_only_the_overrun(
    store: SqlStore, open_replica: Callable[..., SqlStore], clock: Any
) -> None:
    rid = reserved_id(store, "k1", line(30), ttl_s=5)
    clock.advance(10)
    assert open_replica().reap().reservations == 1
    assert counters(store) == (30, 0, 0)
    store.commit(rid, {"spend": 35})  # 5 past the expired reservation: all excess
    assert budget(store).spent == 35


def test_another_agents_commit_is_refused_and_the_owner_still_commits(store: SqlStore) -> None:
    rid = reserved_id(store, "k1", line(30), owner="agent-a")
    with pytest.raises(ReservationNotOwned):
        store.commit(rid, by="agent-b")
    assert counters(store) == (0, 30, 0)
    assert store.commit(rid, by="agent-a").status is ReservationStatus.COMMITTED
    assert counters(store) == (30, 0, 0)


def test_an_overrun_past_the_headroom_on_the_short_path_closes_the_budget(
    store: SqlStore,
) -> None:
    rid = reserved_id(store, "k1", line(30, headroom=5))
    store.commit(rid, {"spend": 40})
    row = budget(store)
    assert (row.spent, row.reserved, row.headroom, row.overage, row.excess) == (40, 0, 0, 10, 5)
    assert row.closed_us is not None
    assert reserve(store, "k2", line(1)).refusal is not None


def test_a_reservation_on_an_existing_counter_takes_the_policys_latest_cap(
    store: SqlStore,
) -> None:
    store.commit(reserved_id(store, "k1", line(10, cap=100)))
    assert reserve(store, "k2", line(45, cap=50)).refusal is not None  # 10 + 45 > 50
    assert budget(store).cap == 100  # a refusal changes nothing
    reserved_id(store, "k3", line(150, cap=200))
    row = budget(store)
    assert (row.cap, row.spent, row.reserved) == (200, 10, 150)


def test_a_forced_reservation_on_an_existing_counter_passes_the_cap_but_not_a_closure(
    store: SqlStore,
) -> None:
    store.commit(reserved_id(store, "k1", line(90)))
    reserved_id(store, "k2", line(50), force=True)
    assert counters(store) == (90, 50, 0)
    store.commit(reserved_id(store, "k3", line(1, headroom=0), force=True), {"spend": 5})
    assert budget(store).closed_us is not None  # 4 past amount + headroom: closed
    assert reserve(store, "k4", line(1), force=True).refusal is not None


def test_an_instance_remembers_only_its_newest_unsettled_reservations() -> None:
    unsettled = _Unsettled(2)
    made = [_reservation("res_a"), _reservation("res_b"), _reservation("res_c")]
    for reservation in made:
        unsettled.keep(reservation)
    assert unsettled.pop("res_a") is None  # the oldest went: a commit of it reads it
    assert unsettled.pop("res_c") is made[2]
    assert unsettled.pop("res_c") is None  # taken once


def test_a_commit_of_a_reservation_the_instance_forgot_reads_it(
    store: SqlStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store, "_unsettled", _Unsettled(1))
    first = reserved_id(store, "k1", line(10))
    second = reserved_id(store, "k2", line(20))
    assert store.commit(first, {"spend": 7}).actual == {"spend": 7}
    assert store.commit(second).actual == {"spend": 20}
    assert counters(store) == (27, 0, 0)


def _reservation(rid: str) -> Reservation:
    return Reservation(
        id=rid,
        tenant="acme",
        idempotency_key=rid,
        status=ReservationStatus.RESERVED,
        lines=(BudgetLine("spend", "global", 0, "units", 100, 1),),
        created_us=0,
        expires_us=1,
    )
