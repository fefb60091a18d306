"""The approval webhook's bookkeeping: opening an approval writes no notice state; a
due approval is leased to one claimant at a time (threads, store objects, replicas);
a lease lapses; a failure waits for its retry time; a notified, decided or expired
approval is never due; a lapsed lease holder cannot overwrite the one who took over.
The decided notice: due only for a human decision on a delivered request, kept apart
from the request's, leased and fenced alike, given up a day after the decision, and
not due for decisions taken before its migration."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from interlock.store import ApprovalStatus, SqlStore, open_store
from interlock.store import migrate as migrations
from interlock.store.notifications import (
    DECIDED,
    DECIDED_GIVE_UP_US,
    REQUESTED,
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


def claim_decided(store: SqlStore, limit: int = 10) -> list[NotificationClaim]:
    return claim_due(store, limit=limit, lease_us=LEASE_US, event=DECIDED)


def ask_delivered(store: SqlStore, intent: str = "intent-1", *, ttl_s: int = 600) -> str:
    """A new pending approval whose request a receiver accepted; its id."""
    approval_id = ask(store, intent, ttl_s=ttl_s)
    assert mark_notified(store, approval_id)
    return approval_id


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


# -- the decided notice --------------------------------------------------------------


def test_a_decided_notice_is_due_once_a_delivered_request_is_decided(
    store: SqlStore, clock: Any
) -> None:
    approval_id = ask(store)
    assert not has_due(store, event=DECIDED)
    (request,) = claim(store)
    assert request.event == REQUESTED
    assert mark_notified(store, approval_id)
    assert not has_due(store, event=DECIDED)  # requested, not decided yet
    clock.advance(5)
    store.approve(approval_id, by="alice", reason="fine")
    decided_at = clock.now
    assert notification_state(store, approval_id, event=DECIDED) == NotificationState(
        None, 0, None, None, None
    )
    assert has_due(store, event=DECIDED) and not has_due(store)

    (held,) = claim_decided(store)
    assert (held.event, held.attempt, held.lease_until_us) == (DECIDED, 1, clock.now + LEASE_US)
    assert (held.record.id, held.record.status, held.record.decided_by) == (
        approval_id,
        ApprovalStatus.APPROVED,
        "alice",
    )
    assert held.record.decided_us == decided_at
    assert claim_decided(store) == [] and not has_due(store, event=DECIDED)
    assert notification_state(store, approval_id, event=DECIDED) == NotificationState(
        None, 1, None, clock.now + LEASE_US, None
    )

    clock.advance(1)
    assert mark_notified(store, approval_id, event=DECIDED)
    assert not mark_notified(store, approval_id, event=DECIDED)
    assert notification_state(store, approval_id, event=DECIDED) == NotificationState(
        clock.now, 1, None, None, None
    )
    # The request's notice is its own: untouched by the decision's.
    assert notification_state(store, approval_id) == NotificationState(
        decided_at - 5 * SECOND_US, 1, None, None, None
    )
    clock.advance(3600)
    assert claim_decided(store) == [] and not has_due(store, event=DECIDED)


def test_only_a_human_decision_on_a_delivered_request_is_due_a_decided_notice(
    store: SqlStore, clock: Any
) -> None:
    approved, denied = ask_delivered(store, "approve-me"), ask_delivered(store, "deny-me")
    claimed, lapsed = ask_delivered(store, "claim-me"), ask_delivered(store, "lapse-me")
    expired_pending = ask_delivered(store, "expires-pending", ttl_s=60)
    still_pending = ask_delivered(store, "still-pending", ttl_s=3600)
    decided_first = ask(store, "decided-first")  # its request never delivered
    store.approve(lapsed, by="alice")  # its grant lapses first
    clock.advance(60)  # expired_pending: pending to the end
    for approval_id in (approved, claimed, decided_first):
        store.approve(approval_id, by="alice")
    store.deny(denied, by="alice")
    outcome = store.resolve_approval(  # the approved call, retried: the grant is used
        tenant="acme",
        intent_hash="claim-me",
        action={"name": "refund_order", "arguments": {"amount": 250}},
        context={"agent": "support-bot"},
        rule_ids=["refund-large"],
        reason="refunds over 100 need a human",
        requested_by="support-bot",
        ttl_us=600 * SECOND_US,
        grant_ttl_us=300 * SECOND_US,
    )
    assert (outcome.state, outcome.record.id) == (ApprovalStatus.CLAIMED, claimed)
    clock.advance(240)  # lapsed: its grant unused
    store.reap()
    assert store.get_approval(lapsed).status is ApprovalStatus.EXPIRED
    assert store.get_approval(expired_pending).status is ApprovalStatus.EXPIRED

    statuses = {c.record.id: c.record.status for c in claim_decided(store)}
    assert statuses == {
        approved: ApprovalStatus.APPROVED,
        denied: ApprovalStatus.DENIED,
        claimed: ApprovalStatus.CLAIMED,
        lapsed: ApprovalStatus.EXPIRED,
    }
    for approval_id in (expired_pending, still_pending, decided_first):
        assert notification_state(store, approval_id, event=DECIDED).attempts == 0


def test_a_decided_notice_is_given_up_a_day_after_the_decision(store: SqlStore, clock: Any) -> None:
    approval_id = ask_delivered(store)
    store.deny(approval_id, by="alice")
    (held,) = claim_decided(store)
    assert mark_failed(store, held, "HTTP 503 Service Unavailable", retry_at_us=clock.now)
    assert DECIDED_GIVE_UP_US == 24 * 3600 * SECOND_US
    clock.advance(24 * 3600 - 0.000001)
    assert has_due(store, event=DECIDED)  # retried for as long as a day
    clock.advance(0.000001)
    assert not has_due(store, event=DECIDED) and claim_decided(store) == []
    state = notification_state(store, approval_id, event=DECIDED)
    assert (state.notified_us, state.attempts, state.error) == (
        None,
        1,
        "HTTP 503 Service Unavailable",
    )


def test_a_lapsed_decided_lease_holder_cannot_overwrite_the_one_who_took_over(
    store: SqlStore, clock: Any
) -> None:
    approval_id = ask_delivered(store)
    store.approve(approval_id, by="alice")
    (stale,) = claim_decided(store)
    clock.advance(31)
    (current,) = claim_decided(store)
    assert current.attempt == 2
    assert not mark_failed(store, stale, "too late", retry_at_us=clock.now + 3600 * SECOND_US)
    assert release(store, [stale]) == 0
    state = notification_state(store, approval_id, event=DECIDED)
    assert (state.claimed_until_us, state.error, state.attempts) == (
        current.lease_until_us,
        None,
        2,
    )
    retry_at = clock.now + 2 * SECOND_US
    assert mark_failed(store, current, "HTTP 500 Internal Server Error", retry_at_us=retry_at)
    assert notification_state(store, approval_id, event=DECIDED) == NotificationState(
        None, 2, retry_at, None, "HTTP 500 Internal Server Error"
    )
    assert notification_state(store, approval_id) == NotificationState(
        clock.now - 31 * SECOND_US, 0, None, None, None
    )
    clock.advance(1.999999)
    assert claim_decided(store) == []
    clock.advance(0.000001)
    (again,) = claim_decided(store)
    assert release(store, [again]) == 1  # never tried: due at once, its attempt uncounted
    assert notification_state(store, approval_id, event=DECIDED).attempts == 2
    assert ids(claim_decided(store)) == [approval_id]


def test_decided_notices_are_claimed_in_the_order_of_their_decisions(
    store: SqlStore, clock: Any
) -> None:
    opened = [ask_delivered(store, f"intent-{n}") for n in range(4)]
    for approval_id in reversed(opened):
        store.approve(approval_id, by="alice")
        clock.advance(1)
    assert ids(claim_decided(store, limit=3)) == opened[::-1][:3]
    assert ids(claim_decided(store, limit=3)) == opened[:1]


def test_racing_replicas_claim_each_decided_notice_exactly_once(
    store: SqlStore, open_replica: Callable[..., SqlStore]
) -> None:
    opened = {ask_delivered(store, f"intent-{n}") for n in range(60)}
    for approval_id in opened:
        store.deny(approval_id, by="alice")
    replicas = [store, open_replica(), open_replica(), open_replica()]
    claimants = [replica for replica in replicas for _ in range(2)]  # two threads each
    barrier = threading.Barrier(len(claimants))
    taken: list[str] = []
    errors: list[BaseException] = []

    def take_all(replica: SqlStore) -> None:
        try:
            barrier.wait(10)
            while batch := claim_decided(replica, limit=3):
                taken.extend(ids(batch))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=take_all, args=(r,)) for r in claimants]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    assert Counter(taken) == Counter(opened)  # every one, and none twice


def test_an_event_without_a_notice_is_refused(store: SqlStore) -> None:
    approval_id = ask(store)
    with pytest.raises(ValueError, match=r"approval\.decided"):
        has_due(store, event="approval.expired")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"approval\.requested"):
        notification_state(store, approval_id, event="approval.expired")  # type: ignore[arg-type]


def test_decisions_taken_before_the_decided_notice_existed_are_never_sent(
    store_url: str, clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Schema 3, as an older Interlock left it, then upgraded: its decisions count as
    notified, its pending approvals get a decided notice once decided."""
    every = migrations.known_migrations
    assert [m.version for m in every("sqlite")][3:4] == [4]
    # Every migration but 4: the later ones add columns today's code writes (audit key ids).
    monkeypatch.setattr(
        migrations,
        "known_migrations",
        lambda dialect: [m for m in every(dialect) if m.version != 4],
    )
    with open_store(store_url, clock=clock) as old:
        approved, denied = ask_delivered(old, "approve-me"), ask_delivered(old, "deny-me")
        pending = ask_delivered(old, "decided-after")
        old.approve(approved, by="alice")
        clock.advance(1)
        old.deny(denied, by="alice")
        decided_us = {a: old.get_approval(a).decided_us for a in (approved, denied)}
    monkeypatch.undo()

    with open_store(store_url, clock=clock, migrate=False) as upgraded:
        assert upgraded.migrate()[:1] == ["0004_approval_decided_notices"]  # and later ones
        for approval_id in (approved, denied):
            state = notification_state(upgraded, approval_id, event=DECIDED)
            assert state == NotificationState(decided_us[approval_id], 0, None, None, None)
        assert notification_state(upgraded, pending, event=DECIDED).notified_us is None
        assert not has_due(upgraded, event=DECIDED) and claim_decided(upgraded) == []
        upgraded.approve(pending, by="alice")
        assert ids(claim_decided(upgraded)) == [pending]


def test_a_long_error_is_redacted_before_it_is_cut(store: SqlStore) -> None:
    approval_id = ask(store)
    (held,) = claim(store)
    secret = "Zq8Xv2Lm9Pw4Rt7Ks1Nb6Hy3"  # cut first, 13 characters of it would be kept
    mark_failed(store, held, "e" * 480 + " token=" + secret, retry_at_us=0)
    error = notification_state(store, approval_id).error
    assert error is not None and len(error) <= 500
    assert secret[:6] not in error
