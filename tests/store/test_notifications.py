"""The approval webhook's bookkeeping: opening an approval writes no notice state; a
due approval is leased to one claimant at a time (threads, store objects, replicas);
a lease lapses; a failure waits for its retry time; a notified, decided or expired
approval is never due; a lapsed lease holder cannot overwrite the one who took over."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

from interlock.store import ApprovalStatus, SqlStore
from interlock.store.notifications import (
    NotificationClaim,
    NotificationState,
    claim_due,
    has_due,
    mark_failed,
    mark_notified,
    notification_state,
    release,
)

LEASE_US = 30_000_000
SECOND_US = 1_000_000


def ask(store: SqlStore, intent: str = "intent-1", *, ttl_s: int = 600) -> str:
    """A new pending approval, opened as the guard opens one; its id."""
    outcome = store.resolve_approval(
        tenant="acme",
        intent_hash=intent,
        action={"name": "refund_order", "arguments": {"amount": 250}},
        context={"agent": "support-bot"},
        rule_ids=["refund-large"],
        reason="refunds over 100 need a human",
        requested_by="support-bot",
        ttl_us=ttl_s * SECOND_US,
        grant_ttl_us=300 * SECOND_US,
    )
    assert outcome.created
    return outcome.record.id


def claim(store: SqlStore, limit: int = 10) -> list[NotificationClaim]:
    return claim_due(store, limit=limit, lease_us=LEASE_US)


def ids(claims: list[NotificationClaim]) -> list[str]:
    return [c.record.id for c in claims]


def test_opening_an_approval_writes_no_notice_state(store: SqlStore) -> None:
    approval_id = ask(store)
    assert notification_state(store, approval_id) == NotificationState(None, 0, None, None, None)
    assert has_due(store)


def test_a_due_approval_is_leased_to_one_claimant_until_the_lease_lapses(
    store: SqlStore, clock: Any
) -> None:
    approval_id = ask(store)
    (first,) = claim(store)
    assert (first.record.id, first.record.status, first.attempt) == (
        approval_id,
        ApprovalStatus.PENDING,
        1,
    )
    assert first.record.action == {"name": "refund_order", "arguments": {"amount": 250}}
    assert first.lease_until_us == clock.now + LEASE_US
    assert claim(store) == [] and not has_due(store)

    clock.advance(29.999999)
    assert claim(store) == []
    clock.advance(0.000001)  # the holder died: its lease lapses, the next one takes it
    (second,) = claim(store)
    assert (second.record.id, second.attempt) == (approval_id, 2)
    assert notification_state(store, approval_id).claimed_until_us == clock.now + LEASE_US


def test_a_notified_approval_is_never_due_again(store: SqlStore, clock: Any) -> None:
    approval_id = ask(store)
    (held,) = claim(store)
    assert mark_notified(store, approval_id)
    assert not mark_notified(store, approval_id)  # a second deliverer changes nothing
    state = notification_state(store, approval_id)
    assert (state.notified_us, state.claimed_until_us, state.attempts) == (clock.now, None, 1)
    clock.advance(3600)
    assert claim(store) == [] and not has_due(store)
    assert not mark_failed(store, held, "late", retry_at_us=clock.now)


def test_a_failure_keeps_its_error_and_waits_for_its_retry_time(
    store: SqlStore, clock: Any
) -> None:
    approval_id = ask(store)
    (held,) = claim(store)
    retry_at = clock.now + 2 * SECOND_US
    assert mark_failed(store, held, "HTTP 500 Internal Server Error", retry_at_us=retry_at)
    assert notification_state(store, approval_id) == NotificationState(
        None, 1, retry_at, None, "HTTP 500 Internal Server Error"
    )
    clock.advance(1.999999)
    assert claim(store) == [] and not has_due(store)
    clock.advance(0.000001)
    (again,) = claim(store)
    assert again.attempt == 2


def test_a_long_error_is_cut_short(store: SqlStore) -> None:
    approval_id = ask(store)
    (held,) = claim(store)
    mark_failed(store, held, "x" * 10_000, retry_at_us=0)
    assert notification_state(store, approval_id).error == "x" * 500


def test_decided_and_expired_approvals_are_never_due(store: SqlStore, clock: Any) -> None:
    approved, denied = ask(store, "approve-me"), ask(store, "deny-me")
    store.approve(approved, by="alice")
    store.deny(denied, by="alice")
    lapsing = ask(store, "lapses", ttl_s=60)
    reaped = ask(store, "reaped", ttl_s=60)
    clock.advance(60)
    store.reap()  # marks one expired; the other is past its expiry, status still pending
    ask(store, "lapses-too", ttl_s=60)  # a fresh one, to show claiming works at all
    claimed = ids(claim(store))
    assert approved not in claimed and denied not in claimed
    assert lapsing not in claimed and reaped not in claimed
    assert len(claimed) == 1


def test_claims_take_the_oldest_first_up_to_the_limit(store: SqlStore, clock: Any) -> None:
    opened = []
    for n in range(5):
        opened.append(ask(store, f"intent-{n}"))
        clock.advance(1)
    assert ids(claim(store, limit=2)) == opened[:2]
    assert ids(claim(store, limit=2)) == opened[2:4]
    assert ids(claim(store, limit=2)) == opened[4:]
    assert claim(store, limit=2) == []


def test_a_lapsed_lease_holder_cannot_overwrite_the_one_who_took_over(
    store: SqlStore, clock: Any
) -> None:
    approval_id = ask(store)
    (stale,) = claim(store)
    clock.advance(31)
    (current,) = claim(store)
    assert not mark_failed(store, stale, "too late", retry_at_us=clock.now + 3600 * SECOND_US)
    assert release(store, [stale]) == 0
    state = notification_state(store, approval_id)
    assert (state.claimed_until_us, state.error, state.attempts) == (
        current.lease_until_us,
        None,
        2,
    )


def test_a_released_claim_is_due_at_once_and_its_attempt_uncounted(store: SqlStore) -> None:
    approval_id = ask(store)
    held = claim(store)
    assert release(store, held) == 1
    assert notification_state(store, approval_id) == NotificationState(None, 0, None, None, None)
    assert ids(claim(store)) == [approval_id]


def test_racing_replicas_claim_each_approval_exactly_once(
    store: SqlStore, open_replica: Callable[..., SqlStore]
) -> None:
    opened = {ask(store, f"intent-{n}") for n in range(60)}
    replicas = [store, open_replica(), open_replica(), open_replica()]
    claimants = [replica for replica in replicas for _ in range(2)]  # two threads each
    barrier = threading.Barrier(len(claimants))
    taken: list[str] = []
    errors: list[BaseException] = []

    def take_all(replica: SqlStore) -> None:
        try:
            barrier.wait(10)
            while batch := claim(replica, limit=3):
                taken.extend(ids(batch))  # list.extend is atomic under the GIL
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=take_all, args=(r,)) for r in claimants]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    assert Counter(taken) == Counter(opened)  # every one, and none twice
