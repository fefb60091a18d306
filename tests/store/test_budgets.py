"""Budgets: reservations that never overspend, idempotent by key, settled once
(commit with the actual amount, or release), expired by the reaper."""

from __future__ import annotations

from typing import Any

import pytest

from interlock.errors import ReservationClosed, ReservationNotFound
from interlock.store import (
    BudgetLine,
    BudgetRow,
    ReservationStatus,
    ReserveOutcome,
    SqlStore,
)


def line(
    amount: int, *, budget: str = "spend", cap: int = 100, scope: str = "global", window: int = 0
) -> BudgetLine:
    return BudgetLine(budget, scope, window, "units", cap, amount)


def reserve(
    store: SqlStore,
    key: str,
    *lines: BudgetLine,
    tenant: str = "acme",
    ttl_s: float = 60,
    force: bool = False,
) -> ReserveOutcome:
    return store.reserve(
        tenant=tenant,
        idempotency_key=key,
        lines=list(lines),
        ttl_us=round(ttl_s * 1_000_000),
        force=force,
    )


def reserved_id(store: SqlStore, key: str, *lines: BudgetLine, **options: Any) -> str:
    outcome = reserve(store, key, *lines, **options)
    assert outcome.reservation is not None, outcome.refusal
    return outcome.reservation.id


def budget(store: SqlStore, budget_id: str = "spend", tenant: str = "acme") -> BudgetRow:
    (row,) = store.budget_rows(tenant=tenant, budget_id=budget_id)
    return row


def counters(store: SqlStore, budget_id: str = "spend") -> tuple[int, int, int]:
    row = budget(store, budget_id)
    return (row.spent, row.reserved, row.overage)


# -- reserve, commit, release ------------------------------------------------------------


def test_a_reservation_holds_its_amount(store: SqlStore, clock: Any) -> None:
    outcome = reserve(store, "k1", line(30), ttl_s=60)
    reservation = outcome.reservation
    assert outcome.refusal is None and reservation is not None
    assert reservation.status is ReservationStatus.RESERVED
    assert not reservation.replayed
    assert (reservation.tenant, reservation.idempotency_key) == ("acme", "k1")
    assert reservation.lines == (line(30),)
    assert reservation.expires_us == clock.now + 60_000_000
    assert store.get_reservation(reservation.id) == reservation
    row = budget(store)
    assert (row.cap, row.unit, row.spent, row.reserved, row.overage) == (100, "units", 0, 30, 0)


def test_commit_moves_the_actual_amount_from_reserved_to_spent(store: SqlStore, clock: Any) -> None:
    rid = reserved_id(store, "k1", line(30))
    clock.advance(1)
    done = store.commit(rid, {"spend": 25})
    assert done.status is ReservationStatus.COMMITTED
    assert done.actual == {"spend": 25}
    assert done.settled_us == clock.now
    assert not done.replayed
    assert counters(store) == (25, 0, 0)


def test_commit_without_an_actual_amount_charges_what_was_reserved(store: SqlStore) -> None:
    rid = reserved_id(store, "k1", line(30))
    assert store.commit(rid).actual == {"spend": 30}
    assert counters(store) == (30, 0, 0)


def test_an_actual_amount_above_the_reservation_is_recorded_as_overage(store: SqlStore) -> None:
    rid = reserved_id(store, "k1", line(20))
    store.commit(rid, {"spend": 27})
    assert counters(store) == (27, 0, 7)


def test_release_gives_the_amount_back(store: SqlStore) -> None:
    rid = reserved_id(store, "k1", line(30))
    released = store.release(rid)
    assert released.status is ReservationStatus.RELEASED
    assert counters(store) == (0, 0, 0)
    assert reserve(store, "k2", line(100)).reservation is not None


def test_the_same_idempotency_key_replays_the_first_reservation(store: SqlStore) -> None:
    first = reserve(store, "k1", line(30)).reservation
    again = reserve(store, "k1", line(30)).reservation
    assert first is not None and again is not None
    assert again.replayed
    assert again.id == first.id
    assert counters(store) == (0, 30, 0)  # nothing reserved twice

    committed = store.commit(first.id, {"spend": 12})
    replayed_commit = store.commit(again.id, {"spend": 99})  # a retry, with other numbers
    assert replayed_commit.replayed
    assert (replayed_commit.actual, replayed_commit.settled_us) == (
        committed.actual,
        committed.settled_us,
    )
    assert counters(store) == (12, 0, 0)
    after = reserve(store, "k1", line(30)).reservation
    assert after is not None and after.replayed
    assert after.status is ReservationStatus.COMMITTED


def test_idempotency_keys_belong_to_one_tenant(store: SqlStore) -> None:
    ours = reserve(store, "k1", line(30), tenant="acme").reservation
    theirs = reserve(store, "k1", line(30), tenant="globex").reservation
    assert ours is not None and theirs is not None
    assert not theirs.replayed
    assert theirs.id != ours.id
    assert budget(store, tenant="globex").reserved == 30


def test_a_second_release_changes_nothing(store: SqlStore) -> None:
    rid = reserved_id(store, "k1", line(30))
    store.release(rid)
    again = store.release(rid)
    assert again.replayed
    assert again.status is ReservationStatus.RELEASED
    assert counters(store) == (0, 0, 0)


def test_a_committed_reservation_cannot_be_released(store: SqlStore) -> None:
    rid = reserved_id(store, "k1", line(30))
    store.commit(rid, {"spend": 30})
    with pytest.raises(ReservationClosed):
        store.release(rid)
    assert counters(store) == (30, 0, 0)


def test_a_released_reservation_cannot_be_committed(store: SqlStore) -> None:
    rid = reserved_id(store, "k1", line(30))
    store.release(rid)
    with pytest.raises(ReservationClosed):
        store.commit(rid, {"spend": 30})
    assert counters(store) == (0, 0, 0)


def test_an_unknown_reservation_is_not_found(store: SqlStore) -> None:
    for operation in (store.commit, store.release, store.get_reservation):
        with pytest.raises(ReservationNotFound):
            operation("res_nope")


# -- the cap --------------------------------------------------------------------------


def test_a_reservation_that_does_not_fit_is_refused_and_changes_nothing(store: SqlStore) -> None:
    reserved_id(store, "k1", line(60))
    refused = reserve(store, "k2", line(50))
    assert refused.reservation is None
    assert refused.refusal is not None
    assert refused.refusal.line == line(50)
    assert (refused.refusal.spent, refused.refusal.reserved) == (0, 60)
    assert refused.refusal.available == 40
    assert counters(store) == (0, 60, 0)
    # The refused key was not used up: once there is room, it reserves.
    assert reserve(store, "k2", line(40)).reservation is not None


def test_a_budget_fills_exactly_to_its_cap(store: SqlStore) -> None:
    reserved_id(store, "k1", line(60))
    reserved_id(store, "k2", line(40))
    assert reserve(store, "k3", line(1)).refusal is not None
    assert counters(store) == (0, 100, 0)


def test_spent_units_count_against_the_cap(store: SqlStore) -> None:
    store.commit(reserved_id(store, "k1", line(70)), {"spend": 70})
    assert reserve(store, "k2", line(31)).refusal is not None
    assert reserve(store, "k3", line(30)).reservation is not None


def test_a_multi_line_reservation_is_all_or_nothing(store: SqlStore) -> None:
    reserved_id(store, "k0", line(1, budget="a-dollars"))
    reserved_id(store, "k1", line(8, budget="b-tokens", cap=10))

    refused = reserve(store, "k2", line(50, budget="a-dollars"), line(5, budget="b-tokens", cap=10))
    assert refused.reservation is None
    assert refused.refusal is not None
    assert refused.refusal.line.budget_id == "b-tokens"
    assert counters(store, "a-dollars") == (0, 1, 0)  # the first line was not kept
    assert counters(store, "b-tokens") == (0, 8, 0)


def test_a_multi_line_commit_charges_unlisted_lines_what_they_reserved(store: SqlStore) -> None:
    rid = reserved_id(store, "k1", line(50, budget="dollars"), line(5, budget="calls", cap=10))
    assert counters(store, "dollars") == (0, 50, 0)
    assert counters(store, "calls") == (0, 5, 0)
    store.commit(rid, {"dollars": 42})
    assert counters(store, "dollars") == (42, 0, 0)
    assert counters(store, "calls") == (5, 0, 0)


def test_force_reserves_beyond_the_cap(store: SqlStore) -> None:
    reserved_id(store, "k1", line(90))
    forced = reserve(store, "k2", line(30), force=True)
    assert forced.reservation is not None
    assert counters(store) == (0, 120, 0)
    assert reserve(store, "k3", line(150), force=True).reservation is not None
    assert reserve(store, "k4", line(1)).refusal is not None


def test_an_amount_above_the_cap_is_refused_without_touching_the_database(
    store: SqlStore,
) -> None:
    refused = reserve(store, "k1", line(101))
    assert refused.reservation is None
    assert refused.refusal is not None
    assert (refused.refusal.spent, refused.refusal.reserved) == (0, 0)
    assert store.budget_rows() == []
    fits = reserve(store, "k1", line(100)).reservation  # the key was never recorded
    assert fits is not None and not fits.replayed


def test_windows_and_scopes_are_separate_counters(store: SqlStore) -> None:
    reserved_id(store, "k1", line(100, window=0))
    reserved_id(store, "k2", line(100, window=3600))
    reserved_id(store, "k3", line(100, scope="agent:bot"))
    rows = store.budget_rows(budget_id="spend")
    assert [(r.scope_key, r.window_start, r.reserved) for r in rows] == [
        ("agent:bot", 0, 100),
        ("global", 0, 100),
        ("global", 3600, 100),
    ]


# -- expiry ---------------------------------------------------------------------------


def test_the_reaper_gives_back_reservations_past_their_ttl(store: SqlStore, clock: Any) -> None:
    rid = reserved_id(store, "k1", line(30), ttl_s=10)
    keep = reserved_id(store, "k2", line(20), ttl_s=100)

    clock.advance(9)
    assert store.reap().reservations == 0
    assert counters(store) == (0, 50, 0)

    clock.advance(2)
    assert store.reap().reservations == 1
    assert counters(store) == (0, 20, 0)
    expired = store.get_reservation(rid)
    assert expired.status is ReservationStatus.EXPIRED
    assert expired.settled_us == clock.now
    assert store.get_reservation(keep).status is ReservationStatus.RESERVED
    assert store.reap().reservations == 0


def test_a_late_commit_after_expiry_still_charges_what_was_spent(
    store: SqlStore, clock: Any
) -> None:
    rid = reserved_id(store, "k1", line(30), ttl_s=10)
    clock.advance(11)
    store.reap()
    assert counters(store) == (0, 0, 0)

    late = store.commit(rid, {"spend": 35})
    assert late.status is ReservationStatus.COMMITTED
    # reserved is not touched again, and nothing of it was reserved any more: all
    # of the late spend is overage
    assert counters(store) == (35, 0, 35)


def test_a_late_commit_can_never_hide_an_overspend(store: SqlStore, clock: Any) -> None:
    first = reserved_id(store, "k1", line(60), ttl_s=10)
    clock.advance(11)
    store.reap()
    reserved_id(store, "k2", line(100), ttl_s=60)  # the whole cap, now free again
    store.commit(first, {"spend": 60})  # the first call did spend, late
    spent, reserved, overage = counters(store)
    assert (spent, reserved, overage) == (60, 100, 60)
    assert spent - overage + reserved <= 100  # beyond the cap only as recorded overage


def test_releasing_an_expired_reservation_changes_nothing(store: SqlStore, clock: Any) -> None:
    rid = reserved_id(store, "k1", line(30), ttl_s=10)
    clock.advance(11)
    store.reap()
    again = store.release(rid)
    assert again.replayed
    assert again.status is ReservationStatus.EXPIRED
    assert counters(store) == (0, 0, 0)


# -- reading --------------------------------------------------------------------------


def test_budget_rows_filter_by_tenant_and_budget(store: SqlStore) -> None:
    reserved_id(store, "k1", line(1, budget="spend"), tenant="acme")
    reserved_id(store, "k2", line(2, budget="tokens"), tenant="acme")
    reserved_id(store, "k3", line(3, budget="spend"), tenant="globex")

    def keys(rows: list[BudgetRow]) -> list[tuple[str, str, int]]:
        return [(r.tenant, r.budget_id, r.reserved) for r in rows]

    assert keys(store.budget_rows()) == [
        ("acme", "spend", 1),
        ("acme", "tokens", 2),
        ("globex", "spend", 3),
    ]
    assert keys(store.budget_rows(tenant="acme")) == [("acme", "spend", 1), ("acme", "tokens", 2)]
    assert keys(store.budget_rows(budget_id="spend")) == [
        ("acme", "spend", 1),
        ("globex", "spend", 3),
    ]
    assert keys(store.budget_rows(tenant="globex", budget_id="tokens")) == []
