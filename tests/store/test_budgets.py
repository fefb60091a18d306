"""Budgets: reservations that never overspend, idempotent by key, settled once
(commit with the actual amount, or release) by the agent that made them, charged by
the reaper when nobody settles them; headroom held for overruns, and the closure an
overrun past it leaves until an admin reopens the budget."""

from __future__ import annotations

from typing import Any

import pytest

from interlock.errors import (
    AmountOutOfRange,
    ReservationClosed,
    ReservationNotFound,
    ReservationNotOwned,
)
from interlock.store import (
    ANY_AGENT,
    BudgetLine,
    BudgetRow,
    ReservationStatus,
    ReserveOutcome,
    SqlStore,
)
from interlock.store.settle import CEILING, MAX_UNITS


def line(
    amount: int,
    *,
    budget: str = "spend",
    cap: int = 100,
    scope: str = "global",
    window: int = 0,
    headroom: int = 0,
) -> BudgetLine:
    return BudgetLine(budget, scope, window, "units", cap, amount, headroom)


def reserve(
    store: SqlStore,
    key: str,
    *lines: BudgetLine,
    tenant: str = "acme",
    ttl_s: float = 60,
    force: bool = False,
    owner: str | None = None,
) -> ReserveOutcome:
    return store.reserve(
        tenant=tenant,
        idempotency_key=key,
        lines=list(lines),
        ttl_us=round(ttl_s * 1_000_000),
        force=force,
        owner=owner,
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


def test_an_amount_above_the_cap_is_refused_without_writing(
    store: SqlStore,
) -> None:
    refused = reserve(store, "k1", line(101))
    assert refused.reservation is None
    assert refused.refusal is not None
    assert (refused.refusal.spent, refused.refusal.reserved) == (0, 0)
    assert store.budget_rows() == []
    fits = reserve(store, "k1", line(100)).reservation  # the key was never recorded
    assert fits is not None and not fits.replayed


@pytest.mark.parametrize("lines", [1, 2], ids=["one line", "two lines"])
def test_a_retry_after_the_cap_was_lowered_replays_its_reservation(
    store: SqlStore, lines: int
) -> None:
    """A retry with a used key gets its first reservation back even when the cap was
    lowered below the amount since (a policy reloaded between a call and its retry):
    refused, it would be denied while its first reservation stays held."""
    first = [line(30), line(5, budget="tokens")][:lines]
    made = reserve(store, "k1", *first).reservation
    assert made is not None
    lowered = [line(30, cap=20), line(5, budget="tokens", cap=2)][:lines]
    again = reserve(store, "k1", *lowered)
    assert again.refusal is None and again.reservation is not None
    assert again.reservation.replayed and again.reservation.id == made.id
    assert counters(store) == (0, 30, 0)  # nothing reserved twice
    other = reserve(store, "k2", *lowered)  # a new key is refused, as before
    assert other.reservation is None and other.refusal is not None
    assert counters(store) == (0, 30, 0)


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


def test_the_reaper_charges_reservations_past_their_ttl(store: SqlStore, clock: Any) -> None:
    rid = reserved_id(store, "k1", line(30, headroom=30), ttl_s=10)
    keep = reserved_id(store, "k2", line(20), ttl_s=100)

    clock.advance(9)
    assert store.reap().reservations == 0
    assert counters(store) == (0, 50, 0)

    clock.advance(2)
    assert store.reap().reservations == 1
    # nobody said the call did not run: its reservation is spent; its headroom is free
    assert counters(store) == (30, 20, 0)
    assert budget(store).headroom == 0
    expired = store.get_reservation(rid)
    assert expired.status is ReservationStatus.EXPIRED
    assert expired.settled_us == clock.now
    assert expired.actual == {"spend": 30}
    assert store.get_reservation(keep).status is ReservationStatus.RESERVED
    assert store.reap().reservations == 0


def test_a_late_commit_charges_only_what_ran_past_the_expired_reservation(
    store: SqlStore, clock: Any
) -> None:
    rid = reserved_id(store, "k1", line(30, headroom=30), ttl_s=10)
    clock.advance(11)
    store.reap()
    assert counters(store) == (30, 0, 0)

    late = store.commit(rid, {"spend": 35})
    assert late.status is ReservationStatus.COMMITTED and late.actual == {"spend": 35}
    # the reaper charged 30 and gave the headroom back: the 5 beyond are excess
    assert counters(store) == (35, 0, 5)
    assert (budget(store).excess, budget(store).closed_us) == (5, clock.now)


def test_a_late_commit_below_the_expired_reservation_refunds_nothing(
    store: SqlStore, clock: Any
) -> None:
    rid = reserved_id(store, "k1", line(30), ttl_s=10)
    clock.advance(11)
    store.reap()
    store.commit(rid, {"spend": 10})
    assert counters(store) == (30, 0, 0)  # commit in time to be charged less


def test_a_late_commit_can_never_hide_an_overspend(store: SqlStore, clock: Any) -> None:
    first = reserved_id(store, "k1", line(50, headroom=10), ttl_s=10)
    clock.advance(11)
    store.reap()
    reserved_id(store, "k2", line(40, headroom=10), ttl_s=60)  # what is left of the cap
    store.commit(first, {"spend": 70})  # the first call spent more, late
    row = budget(store)
    assert (row.spent, row.reserved, row.headroom, row.excess) == (70, 40, 10, 20)
    # beyond the cap only as recorded excess, and the budget is closed
    assert row.spent + row.reserved + row.headroom - row.excess <= row.cap
    assert row.closed_us is not None


def test_releasing_an_expired_reservation_changes_nothing(store: SqlStore, clock: Any) -> None:
    rid = reserved_id(store, "k1", line(30), ttl_s=10)
    clock.advance(11)
    store.reap()
    again = store.release(rid)
    assert again.replayed
    assert again.status is ReservationStatus.EXPIRED
    assert counters(store) == (30, 0, 0)


# -- headroom, excess and closure ----------------------------------------------------------


def test_a_line_holds_its_headroom_against_the_cap(store: SqlStore) -> None:
    reserved_id(store, "k1", line(30, headroom=30))
    assert (budget(store).reserved, budget(store).headroom) == (30, 30)
    refused = reserve(store, "k2", line(30, headroom=20))
    assert refused.refusal is not None
    assert (refused.refusal.reserved, refused.refusal.headroom) == (30, 30)
    assert refused.refusal.available == 40
    reserved_id(store, "k3", line(40))
    assert budget(store).available == 0


def test_a_line_whose_amount_and_headroom_exceed_the_cap_is_refused_at_once(
    store: SqlStore,
) -> None:
    refused = reserve(store, "k1", line(60, headroom=41))
    assert refused.refusal is not None and store.budget_rows() == []


def test_an_overrun_within_the_headroom_is_overage_and_the_budget_stays_open(
    store: SqlStore,
) -> None:
    rid = reserved_id(store, "k1", line(20, headroom=20))
    store.commit(rid, {"spend": 35})
    row = budget(store)
    assert (row.spent, row.reserved, row.headroom, row.overage, row.excess) == (35, 0, 0, 15, 0)
    assert row.closed_us is None and store.budget_closures() == []


def test_an_overrun_past_the_headroom_is_charged_recorded_and_closes_the_budget(
    store: SqlStore, clock: Any
) -> None:
    rid = reserved_id(store, "k1", line(20, headroom=5), owner="bot")
    other = reserved_id(store, "k2", line(10, scope="agent:other"))
    clock.advance(1)
    store.commit(rid, {"spend": 40})
    (row,) = [r for r in store.budget_rows() if r.scope_key == "global"]
    assert (row.spent, row.overage, row.excess, row.closed_us) == (40, 20, 15, clock.now)
    (closure,) = store.budget_closures(tenant="acme")
    assert (closure.budget_id, closure.scope_key, closure.reservation_id, closure.excess) == (
        "spend",
        "global",
        rid,
        15,
    )
    # closed: in this window, in any other, and even for an approved overspend
    for closed_line in (line(1), line(1, window=3600)):
        refused = reserve(store, f"k-{closed_line.window_start}", closed_line)
        assert refused.refusal is not None and refused.refusal.closed == closure
    assert reserve(store, "k-forced", line(1), force=True).refusal is not None
    # another counter of the budget is not: and its reservations still settle
    assert reserve(store, "k3", line(1, scope="agent:other")).reservation is not None
    store.commit(other)


def test_the_excess_of_every_overrun_adds_up_on_the_closure(store: SqlStore) -> None:
    first = reserved_id(store, "k1", line(10, headroom=10))
    second = reserved_id(store, "k2", line(10, headroom=10))
    store.commit(first, {"spend": 50})
    store.commit(second, {"spend": 45})  # in flight when the budget closed: charged too
    row = budget(store)
    assert (row.spent, row.excess) == (95, 30 + 25)
    (closure,) = store.budget_closures()
    assert (closure.reservation_id, closure.excess) == (first, 55)


def test_reopening_lifts_the_closure_and_keeps_the_counters(store: SqlStore) -> None:
    for scope in ("agent:a", "agent:b"):
        rid = reserved_id(store, f"k-{scope}", line(10, scope=scope))
        store.commit(rid, {"spend": 20})
    assert len(store.budget_closures()) == 2
    assert store.reopen_budget(tenant="globex", budget_id="spend") == []
    (one,) = store.reopen_budget(tenant="acme", budget_id="spend", scope_key="agent:a")
    assert one.scope_key == "agent:a"
    assert [c.scope_key for c in store.budget_closures()] == ["agent:b"]
    assert reserve(store, "k-a", line(10, scope="agent:a")).reservation is not None
    assert reserve(store, "k-b", line(10, scope="agent:b")).refusal is not None
    assert [c.scope_key for c in store.reopen_budget(tenant="acme", budget_id="spend")] == [
        "agent:b"
    ]
    rows = {r.scope_key: (r.spent, r.excess, r.closed_us) for r in store.budget_rows()}
    assert rows == {"agent:a": (20, 10, None), "agent:b": (20, 10, None)}


# -- who settles ---------------------------------------------------------------------------


def test_only_the_agent_that_reserved_settles_unless_anyone_may(store: SqlStore) -> None:
    rid = reserved_id(store, "k1", line(30), owner="bot")
    assert store.get_reservation(rid).owner == "bot"
    for intruder in ("eve", None, "Bot"):
        with pytest.raises(ReservationNotOwned):
            store.release(rid, by=intruder)
        with pytest.raises(ReservationNotOwned):
            store.commit(rid, {"spend": 0}, by=intruder)
    assert counters(store) == (0, 30, 0)
    assert store.commit(rid, {"spend": 25}, by="bot").actual == {"spend": 25}
    anonymous = reserved_id(store, "k2", line(10))
    store.release(anonymous, by=None)
    admins = reserved_id(store, "k3", line(10), owner="bot")
    store.release(admins, by=ANY_AGENT)
    assert counters(store) == (25, 0, 0)


# -- numbers no budget counts --------------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        line(0),
        line(-1),
        line(MAX_UNITS + 1, cap=MAX_UNITS),
        line(1, headroom=-1),
        line(1, cap=MAX_UNITS + 1),
        BudgetLine("spend", "global", 0, "units", 100, True),  # type: ignore[arg-type]
        BudgetLine("spend", "global", 0, "units", 100, 1.5),  # type: ignore[arg-type]
    ],
)
def test_a_reservation_of_an_absurd_amount_is_refused_and_changes_nothing(
    store: SqlStore, bad: BudgetLine
) -> None:
    with pytest.raises(AmountOutOfRange):
        reserve(store, "k1", bad)
    assert store.budget_rows() == []


@pytest.mark.parametrize("used", [-1, MAX_UNITS + 1, 2**62, 1.5, True, "10"])
def test_a_commit_of_an_absurd_usage_is_refused_and_changes_nothing(
    store: SqlStore, used: Any
) -> None:
    rid = reserved_id(store, "k1", line(30))
    with pytest.raises(AmountOutOfRange):
        store.commit(rid, {"spend": used})
    assert counters(store) == (0, 30, 0)
    assert store.get_reservation(rid).status is ReservationStatus.RESERVED


def test_the_counters_saturate_instead_of_overflowing(store: SqlStore) -> None:
    first = reserved_id(store, "k1", line(1, cap=MAX_UNITS))
    with store.transaction(write=True) as cur:  # a counter near the ceiling
        cur.execute(
            store.q("UPDATE budgets SET spent = ?, overage = ?, excess = ?"), (CEILING - 1,) * 3
        )
    store.commit(first, {"spend": MAX_UNITS})
    row = budget(store)
    assert (row.spent, row.overage, row.excess) == (CEILING, CEILING, CEILING)
    assert row.spent < 2**63 - 1


def test_a_reservation_made_before_headroom_existed_settles(store: SqlStore) -> None:
    rid = reserved_id(store, "k1", line(30))
    with store.transaction(write=True) as cur:  # the lines as schema 5 wrote them
        cur.execute(
            store.q("UPDATE reservations SET lines = ? WHERE id = ?"),
            ('[["spend","global",0,"units",100,30]]', rid),
        )
    assert store.get_reservation(rid).lines == (line(30),)
    store.commit(rid, {"spend": 30})
    assert counters(store) == (30, 0, 0)


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
