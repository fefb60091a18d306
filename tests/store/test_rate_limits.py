"""Rate limits: a smoothed limit (GCRA) per tenant, limit and key."""

from __future__ import annotations

from typing import Any

import pytest

from interlock.store import RateOutcome, SqlStore

SECOND_US = 1_000_000


def take(
    store: SqlStore, *, tenant: str = "acme", limit_id: str = "calls", key: str = "bot"
) -> RateOutcome:
    """One slot of '3 per 3 s'."""
    return store.rate_acquire(
        tenant=tenant, limit_id=limit_id, key=key, interval_us=SECOND_US, window_us=3 * SECOND_US
    )


def test_three_per_three_seconds_allows_three_then_refuses_for_about_a_second(
    store: SqlStore,
) -> None:
    assert [take(store).allowed for _ in range(3)] == [True, True, True]
    refused = take(store)
    assert not refused.allowed
    assert refused.retry_after == pytest.approx(1.0)
    assert not take(store).allowed  # refusals do not use up anything


def test_after_one_interval_one_more_is_allowed(store: SqlStore, clock: Any) -> None:
    for _ in range(3):
        take(store)
    clock.advance(0.5)
    half = take(store)
    assert not half.allowed
    assert half.retry_after == pytest.approx(0.5)

    clock.advance(0.5)
    assert take(store).allowed
    assert not take(store).allowed


def test_a_quiet_spell_refills_the_whole_burst_and_no_more(store: SqlStore, clock: Any) -> None:
    for _ in range(3):
        take(store)
    clock.advance(60)
    assert [take(store).allowed for _ in range(4)] == [True, True, True, False]


@pytest.mark.parametrize(
    "other",
    [{"key": "other-bot"}, {"tenant": "globex"}, {"limit_id": "other-limit"}],
    ids=["key", "tenant", "limit"],
)
def test_keys_tenants_and_limits_are_counted_apart(store: SqlStore, other: dict[str, str]) -> None:
    for _ in range(3):
        take(store)
    assert not take(store).allowed
    assert [take(store, **other).allowed for _ in range(4)] == [True, True, True, False]
