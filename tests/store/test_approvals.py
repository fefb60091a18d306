"""Approvals: one request per intent, never approved by its requester, a grant claimed
exactly once (by any number of threads, store objects and processes), denials that
stand for the grant TTL, expiry, tenant isolation, and waiting for a decision."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from interlock.errors import ApprovalClosed, ApprovalNotFound, SelfApproval
from interlock.store import ApprovalStatus, ClaimOutcome, SqlStore

TTL_S = 600
GRANT_TTL_S = 300
HOUR_US = 3_600_000_000


def ask(
    store: SqlStore,
    intent: str = "intent-1",
    *,
    tenant: str = "acme",
    requested_by: str | None = "bot",
    ttl_us: int = TTL_S * 1_000_000,
    grant_ttl_us: int = GRANT_TTL_S * 1_000_000,
) -> ClaimOutcome:
    """What the guard does for a call that needs approval."""
    return store.resolve_approval(
        tenant=tenant,
        intent_hash=intent,
        action={"name": "refund", "arguments": {"amount": 500}},
        context={"agent": "bot", "session": "s1"},
        rule_ids=["refunds-over-100"],
        reason="refunds over 100 need a human",
        requested_by=requested_by,
        ttl_us=ttl_us,
        grant_ttl_us=grant_ttl_us,
    )


def approved(store: SqlStore, intent: str = "intent-1", **options: Any) -> str:
    """An approved request for ``intent``; its id."""
    request = ask(store, intent, **options)
    store.approve(request.record.id, by="alice", tenant=options.get("tenant"))
    return request.record.id


# -- the life of a request ---------------------------------------------------------------


def test_the_first_resolve_opens_a_pending_request_and_the_next_finds_it(
    store: SqlStore, clock: Any
) -> None:
    first = ask(store)
    assert (first.state, first.created) == (ApprovalStatus.PENDING, True)
    record = first.record
    assert record.status is ApprovalStatus.PENDING
    assert (record.tenant, record.intent_hash, record.requested_by) == ("acme", "intent-1", "bot")
    assert record.action == {"name": "refund", "arguments": {"amount": 500}}
    assert record.rule_ids == ("refunds-over-100",)
    assert record.expires_us == clock.now + TTL_S * 1_000_000

    again = ask(store)
    assert (again.state, again.created, again.record.id) == (
        ApprovalStatus.PENDING,
        False,
        record.id,
    )
    assert store.get_approval(record.id) == record


def test_the_requester_cannot_approve_its_own_request(store: SqlStore) -> None:
    request = ask(store, requested_by="bot").record
    with pytest.raises(SelfApproval):
        store.approve(request.id, by="bot")
    with pytest.raises(SelfApproval):
        store.deny(request.id, by="bot")
    with pytest.raises(SelfApproval):
        store.approve(request.id, by="  ")  # an approver must say who they are
    assert store.get_approval(request.id).status is ApprovalStatus.PENDING


# The requester's name written so that it looks — or is — the same: each must be refused.
LOOK_ALIKES = {
    "fullwidth": "\uff41\uff4c\uff49\uff43\uff45",  # ａｌｉｃｅ
    "zero width space": "al\u200bice",
    "zero width joiner": "ali\u200dce",
    "byte order mark": "\ufeffalice",
    "soft hyphen": "ali\u00adce",
    "word joiner and bidi override": "\u2060\u202ealice\u202c",
    "variation selector": "alice\ufe0f",
    "tag characters": "alice\U000e0041\U000e007f",
    "cyrillic a": "\u0430lice",
    "cyrillic e and o": "alic\u0435",
    "cyrillic c": "ali\u0441e",
    "greek capital alpha": "\u0391LICE",
    "capital I for l": "aIice",
    "digit one for l": "a1ice",
    "mixed case": "ALiCe",
    "padded": "  alice\t",
    "decomposed accent": "ren\u0065\u0301e",
}
LOOK_ALIKE_OF = {name: ("ren\u00e9e" if "accent" in name else "alice") for name in LOOK_ALIKES}


@pytest.mark.parametrize("variant", sorted(LOOK_ALIKES), ids=str)
def test_the_requester_cannot_approve_under_a_look_alike_name(
    store: SqlStore, variant: str
) -> None:
    request = ask(store, requested_by=LOOK_ALIKE_OF[variant]).record
    for decide in (store.approve, store.deny):
        with pytest.raises(SelfApproval, match="cannot decide it"):
            decide(request.id, by=LOOK_ALIKES[variant])
    assert store.get_approval(request.id).status is ApprovalStatus.PENDING


@pytest.mark.parametrize("invisible", ["\u200b", "\u200d\ufeff", "\u00ad", "\U000e0020"])
def test_an_approver_made_only_of_invisible_characters_is_no_approver(
    store: SqlStore, invisible: str
) -> None:
    request = ask(store).record
    with pytest.raises(SelfApproval, match="approver identity is required"):
        store.approve(request.id, by=invisible)


@pytest.mark.parametrize(("requester", "approver"), [("alice", "alicia"), ("bob", "rob")])
def test_distinct_names_stay_distinct(store: SqlStore, requester: str, approver: str) -> None:
    request = ask(store, requested_by=requester).record
    assert store.approve(request.id, by=approver).status is ApprovalStatus.APPROVED


def test_an_approved_request_is_claimed_exactly_once_then_a_new_request_opens(
    store: SqlStore, clock: Any
) -> None:
    request = ask(store).record
    decided = store.approve(request.id, by="alice", reason="ok for this customer")
    assert decided.status is ApprovalStatus.APPROVED
    assert (decided.decided_by, decided.decision_reason) == ("alice", "ok for this customer")
    assert decided.decided_us == clock.now
    assert decided.expires_us == clock.now + GRANT_TTL_S * 1_000_000

    claim = ask(store)
    assert (claim.state, claim.record.id) == (ApprovalStatus.CLAIMED, request.id)
    assert claim.record.claimed_us == clock.now

    after = ask(store)
    assert (after.state, after.created) == (ApprovalStatus.PENDING, True)
    assert after.record.id != request.id
    assert store.get_approval(request.id).status is ApprovalStatus.CLAIMED


def test_a_decided_request_cannot_be_decided_again(store: SqlStore) -> None:
    request = ask(store).record
    store.approve(request.id, by="alice")
    with pytest.raises(ApprovalClosed):
        store.approve(request.id, by="carol")
    with pytest.raises(ApprovalClosed):
        store.deny(request.id, by="carol")
    assert store.get_approval(request.id).decided_by == "alice"


def test_a_denial_stands_until_the_grant_ttl_passes(store: SqlStore, clock: Any) -> None:
    request = ask(store).record
    denied = store.deny(request.id, by="alice", reason="no")
    assert denied.status is ApprovalStatus.DENIED

    clock.advance(GRANT_TTL_S - 1)
    still = ask(store)
    assert (still.state, still.created, still.record.id) == (
        ApprovalStatus.DENIED,
        False,
        request.id,
    )

    clock.advance(2)
    fresh = ask(store)
    assert (fresh.state, fresh.created) == (ApprovalStatus.PENDING, True)
    assert fresh.record.id != request.id


def test_an_approved_grant_lapses_after_the_grant_ttl(store: SqlStore, clock: Any) -> None:
    grant = approved(store)
    clock.advance(GRANT_TTL_S + 1)
    after = ask(store)
    assert (after.state, after.created) == (ApprovalStatus.PENDING, True)
    assert store.get_approval(grant).status is ApprovalStatus.EXPIRED


def test_a_request_past_its_ttl_cannot_be_approved_and_shows_as_expired(
    store: SqlStore, clock: Any
) -> None:
    request = ask(store).record
    clock.advance(TTL_S + 1)

    with pytest.raises(ApprovalClosed):
        store.approve(request.id, by="alice")
    assert store.get_approval(request.id).status is ApprovalStatus.EXPIRED
    assert [r.id for r in store.list_approvals(status="expired")] == [request.id]
    assert store.list_approvals(status=ApprovalStatus.PENDING) == []
    assert [r.status for r in store.list_approvals()] == [ApprovalStatus.EXPIRED]

    fresh = ask(store)
    assert (fresh.state, fresh.created) == (ApprovalStatus.PENDING, True)


def test_a_different_intent_is_a_different_request(store: SqlStore) -> None:
    grant = approved(store, "intent-1")
    other = ask(store, "intent-2")
    assert (other.state, other.created) == (ApprovalStatus.PENDING, True)
    assert other.record.id != grant
    assert ask(store, "intent-1").state is ApprovalStatus.CLAIMED


def test_tenants_never_see_each_others_requests(store: SqlStore) -> None:
    request = ask(store, tenant="acme").record
    with pytest.raises(ApprovalNotFound):
        store.get_approval(request.id, tenant="globex")
    with pytest.raises(ApprovalNotFound):
        store.approve(request.id, by="alice", tenant="globex")
    with pytest.raises(ApprovalNotFound):
        store.deny(request.id, by="alice", tenant="globex")
    assert store.get_approval(request.id, tenant="acme").status is ApprovalStatus.PENDING

    store.approve(request.id, by="alice", tenant="acme")
    theirs = ask(store, tenant="globex")  # the same intent, another tenant: not acme's grant
    assert (theirs.state, theirs.created) == (ApprovalStatus.PENDING, True)
    assert [r.id for r in store.list_approvals(tenant="globex")] == [theirs.record.id]
    assert ask(store, tenant="acme").state is ApprovalStatus.CLAIMED


def test_an_unknown_id_is_not_found(store: SqlStore) -> None:
    with pytest.raises(ApprovalNotFound):
        store.get_approval("apr_nope")
    with pytest.raises(ApprovalNotFound):
        store.approve("apr_nope", by="alice")


def test_list_approvals_filters_by_status_newest_first(store: SqlStore, clock: Any) -> None:
    first = ask(store, "i1").record
    clock.advance(1)
    second = ask(store, "i2").record
    clock.advance(1)
    third = ask(store, "i3").record
    store.approve(second.id, by="alice")
    store.deny(third.id, by="alice")
    assert [r.id for r in store.list_approvals()] == [third.id, second.id, first.id]
    assert [r.id for r in store.list_approvals(status="pending")] == [first.id]
    assert [r.id for r in store.list_approvals(status="approved")] == [second.id]
    assert [r.id for r in store.list_approvals(status="denied")] == [third.id]
    assert [r.id for r in store.list_approvals(limit=1)] == [third.id]


def test_unclaim_gives_a_claimed_grant_back_once(store: SqlStore) -> None:
    grant = approved(store)
    assert ask(store).state is ApprovalStatus.CLAIMED
    assert store.unclaim_approval(grant) is True
    assert store.get_approval(grant).status is ApprovalStatus.APPROVED
    assert store.unclaim_approval(grant) is False  # not claimed any more

    again = ask(store)
    assert (again.state, again.record.id) == (ApprovalStatus.CLAIMED, grant)


def test_unclaim_is_refused_once_a_new_request_for_the_intent_is_open(store: SqlStore) -> None:
    grant = approved(store)
    assert ask(store).state is ApprovalStatus.CLAIMED
    newer = ask(store)
    assert newer.created
    assert store.unclaim_approval(grant) is False
    assert store.get_approval(grant).status is ApprovalStatus.CLAIMED
    assert ask(store).record.id == newer.record.id


def test_reap_expires_lapsed_requests_and_grants(store: SqlStore, clock: Any) -> None:
    lapsed_request = ask(store, "i1", ttl_us=10_000_000).record
    lapsed_grant = approved(store, "i2", grant_ttl_us=10_000_000)
    live = ask(store, "i3", ttl_us=60_000_000).record
    clock.advance(11)

    assert store.reap().approvals == 2
    assert store.get_approval(lapsed_request.id).status is ApprovalStatus.EXPIRED
    assert store.get_approval(lapsed_grant).status is ApprovalStatus.EXPIRED
    assert store.get_approval(live.id).status is ApprovalStatus.PENDING
    assert store.reap().approvals == 0


# -- racing for one grant ----------------------------------------------------------------


@pytest.mark.parametrize("topology", ["one-store", "store-per-thread"])
def test_twenty_threads_racing_for_one_grant_claim_it_exactly_once(
    store: SqlStore, open_replica: Callable[..., SqlStore], topology: str
) -> None:
    grant = approved(store)
    threads = 20
    stores = (
        [store] * threads if topology == "one-store" else [open_replica() for _ in range(threads)]
    )
    start = threading.Barrier(threads)
    outcomes: list[ClaimOutcome] = []
    errors: list[BaseException] = []

    def race(mine: SqlStore) -> None:
        try:
            start.wait(30)
            outcomes.append(ask(mine))
        except BaseException as exc:
            errors.append(exc)

    racers = [threading.Thread(target=race, args=(s,)) for s in stores]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join(60)

    assert errors == []
    states = Counter(o.state for o in outcomes)
    assert states == {ApprovalStatus.CLAIMED: 1, ApprovalStatus.PENDING: threads - 1}
    (claim,) = [o for o in outcomes if o.state is ApprovalStatus.CLAIMED]
    assert claim.record.id == grant
    # The losers all found one new request, opened by exactly one of them.
    pending = [o for o in outcomes if o.state is ApprovalStatus.PENDING]
    assert len({o.record.id for o in pending}) == 1
    assert sum(o.created for o in pending) == 1
    assert Counter(r.status for r in store.list_approvals()) == {
        ApprovalStatus.CLAIMED: 1,
        ApprovalStatus.PENDING: 1,
    }


@pytest.mark.slow
def test_processes_racing_for_one_grant_claim_it_exactly_once(
    store: SqlStore, store_url: str, backend: str, spawn_worker: Callable[..., Any]
) -> None:
    grant = approved(store)
    per_thread = ["--store-per-thread"] if backend == "postgres" else []
    workers = [
        spawn_worker("claim-race", store_url, "acme", "intent-1", "--threads", "5", *per_thread)
        for _ in range(4)
    ]
    for worker in workers:
        worker.expect("ready")
    for worker in workers:
        worker.send("go")
    seen = []
    for worker in workers:
        seen += worker.read_all()
        worker.finish()

    assert len(seen) == 20
    assert Counter(m["state"] for m in seen) == {"claimed": 1, "pending": 19}
    assert [m["id"] for m in seen if m["state"] == "claimed"] == [grant]
    assert len({m["id"] for m in seen if m["state"] == "pending"}) == 1
    assert store.get_approval(grant).status is ApprovalStatus.CLAIMED


# -- waiting for a decision --------------------------------------------------------------

WAIT_S = 10.0


def approve_soon(store: SqlStore, approval_id: str, delay: float = 0.2) -> threading.Timer:
    timer = threading.Timer(delay, store.approve, args=(approval_id,), kwargs={"by": "alice"})
    timer.start()
    return timer


def assert_woke_with_the_decision(record: Any, approval_id: str, elapsed: float) -> None:
    assert record.id == approval_id
    assert record.status is ApprovalStatus.APPROVED
    assert record.decided_by == "alice"
    assert elapsed < WAIT_S / 2  # it woke on the decision, not at its timeout


def test_wait_wakes_when_approved_through_the_same_store(store: SqlStore) -> None:
    request = ask(store).record
    timer = approve_soon(store, request.id)
    started = time.monotonic()
    record = store.wait_for_approval(request.id, WAIT_S)
    assert_woke_with_the_decision(record, request.id, time.monotonic() - started)
    timer.join()


def test_wait_wakes_when_approved_through_another_store_object(
    store: SqlStore, open_replica: Callable[..., SqlStore]
) -> None:
    request = ask(store).record
    timer = approve_soon(open_replica(), request.id)
    started = time.monotonic()
    record = store.wait_for_approval(request.id, WAIT_S)
    assert_woke_with_the_decision(record, request.id, time.monotonic() - started)
    timer.join()


def test_wait_wakes_when_approved_from_another_process(
    store: SqlStore, store_url: str, spawn_worker: Callable[..., Any]
) -> None:
    request = ask(store).record
    approver = spawn_worker("approve", store_url, request.id, "--by", "alice", "--delay", "0.2")
    approver.expect("ready")
    approver.send("go")
    started = time.monotonic()
    record = store.wait_for_approval(request.id, WAIT_S)
    assert_woke_with_the_decision(record, request.id, time.monotonic() - started)
    assert approver.expect("approved")["approved"] == request.id
    approver.finish()


async def test_await_wakes_when_approved_through_another_store_object(
    store: SqlStore, open_replica: Callable[..., SqlStore]
) -> None:
    request = ask(store).record
    timer = approve_soon(open_replica(), request.id)
    started = time.monotonic()
    record = await store.await_approval(request.id, WAIT_S)
    assert_woke_with_the_decision(record, request.id, time.monotonic() - started)
    timer.join()


async def test_await_wakes_when_approved_through_the_same_store(store: SqlStore) -> None:
    request = ask(store).record
    timer = approve_soon(store, request.id)
    started = time.monotonic()
    record = await store.await_approval(request.id, WAIT_S)
    assert_woke_with_the_decision(record, request.id, time.monotonic() - started)
    timer.join()


def test_wait_returns_the_pending_record_when_the_timeout_passes(store: SqlStore) -> None:
    request = ask(store).record
    started = time.monotonic()
    record = store.wait_for_approval(request.id, 0.3)
    assert time.monotonic() - started >= 0.3
    assert (record.id, record.status) == (request.id, ApprovalStatus.PENDING)


async def test_await_returns_the_pending_record_when_the_timeout_passes(store: SqlStore) -> None:
    request = ask(store).record
    started = time.monotonic()
    record = await store.await_approval(request.id, 0.3)
    assert time.monotonic() - started >= 0.3
    assert (record.id, record.status) == (request.id, ApprovalStatus.PENDING)


def test_wait_returns_a_request_that_is_already_decided_at_once(store: SqlStore) -> None:
    request = ask(store).record
    store.deny(request.id, by="alice")
    record = store.wait_for_approval(request.id, WAIT_S)
    assert record.status is ApprovalStatus.DENIED
