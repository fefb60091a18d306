"""The effects table on SQLite and PostgreSQL: one attempt per key at a time, each
attempt settled once, the budget charged once, whatever the interleaving."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from interlock.effects.outcomes import record_outcome
from interlock.effects.protocol import Outcome, ProviderResult
from interlock.effects.records import (
    HELD_UNTIL_US,
    EffectStatus,
    NewAttempt,
    begin_attempt,
    find_effect,
    finish_attempt,
    list_effects,
    unsettled_effects,
)
from interlock.store.records import BudgetLine
from interlock.store.sql import SqlStore

THREADS = 8


def _attempt(key: str, reservation_id: str | None = None, **changes: Any) -> NewAttempt:
    fields: dict[str, Any] = {
        "id": f"eff_{key}_{threading.get_ident()}_{changes.pop('n', 0)}",
        "tenant": "acme",
        "idempotency_key": key,
        "adapter_id": "http",
        "adapter_version": "1",
        "intent_hash": "sha256:" + "1" * 64,
        "binding": None,
        "grant_id": None,
        "decision_id": "d_1",
        "reservation_id": reservation_id,
        "agent": "bot",
        "request": {"method": "POST"},
        "deadline_us": 2**40,
    }
    fields.update(changes)
    return NewAttempt(**fields)


def _reserve(store: SqlStore, key: str) -> str:
    line = BudgetLine("refunds", "acme", 0, "USD", 1_000, 10)
    outcome = store.reserve(tenant="acme", idempotency_key=key, lines=[line], ttl_us=1_000_000)
    assert outcome.reservation is not None
    return outcome.reservation.id


def _race(count: int, work: Any) -> list[Any]:
    barrier = threading.Barrier(count)
    results: list[Any] = [None] * count

    def run(index: int) -> None:
        barrier.wait()
        results[index] = work(index)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def test_one_first_attempt_per_key_under_a_race(store: SqlStore) -> None:
    started = _race(THREADS, lambda i: begin_attempt(store, _attempt("k", n=i)))
    assert sum(r is not None for r in started) == 1
    record = find_effect(store, "acme", "k")
    assert record is not None and record.status is EffectStatus.EXECUTING and record.attempt == 1


def test_one_retry_per_never_executed_attempt_under_a_race(store: SqlStore) -> None:
    first = begin_attempt(store, _attempt("k"))
    assert first is not None
    assert finish_attempt(store, first.id, 1, EffectStatus.NEVER_EXECUTED, reason="lost")
    retried = _race(THREADS, lambda i: begin_attempt(store, _attempt("k", n=i), after=1))
    assert sum(r is not None for r in retried) == 1
    record = find_effect(store, "acme", "k")
    assert record is not None and record.attempt == 2 and record.id == first.id


@pytest.mark.parametrize("status", [EffectStatus.COMMITTED, EffectStatus.FAILED])
def test_a_settled_attempt_is_never_taken_again(store: SqlStore, status: EffectStatus) -> None:
    first = begin_attempt(store, _attempt("k"))
    assert first is not None and finish_attempt(store, first.id, 1, status, reason="done")
    assert begin_attempt(store, _attempt("k"), after=1) is None
    assert begin_attempt(store, _attempt("k")) is None
    assert not finish_attempt(store, first.id, 1, EffectStatus.INDETERMINATE, reason="late")


def test_a_retry_for_another_intent_is_refused(store: SqlStore) -> None:
    first = begin_attempt(store, _attempt("k"))
    assert first is not None
    finish_attempt(store, first.id, 1, EffectStatus.NEVER_EXECUTED, reason="lost")
    other = _attempt("k", intent_hash="sha256:" + "2" * 64)
    assert begin_attempt(store, other, after=1) is None


def test_beginning_holds_the_reservation_past_the_reaper(store: SqlStore) -> None:
    reservation = _reserve(store, "r-hold")
    record = begin_attempt(store, _attempt("k", reservation_id=reservation))
    assert record is not None
    assert store.get_reservation(reservation).expires_us == HELD_UNTIL_US
    store.reap(now=2**61)
    assert store.get_reservation(reservation).status.value == "reserved"


def test_concurrent_settlements_charge_the_budget_once(store: SqlStore) -> None:
    reservation = _reserve(store, "r-once")
    record = begin_attempt(store, _attempt("k", reservation_id=reservation))
    assert record is not None
    committed = ProviderResult(Outcome.COMMITTED, 201, {"ok": True}, reason="201")
    settled = _race(THREADS, lambda i: record_outcome(store, None, record, committed, None))
    assert {s.status for s in settled} == {EffectStatus.COMMITTED}
    rows = store.budget_rows(tenant="acme", budget_id="refunds")
    assert [(r.spent, r.reserved) for r in rows] == [(10, 0)]


def test_open_attempts_are_listed_for_the_reconciler(store: SqlStore) -> None:
    a = begin_attempt(store, _attempt("a"))
    b = begin_attempt(store, _attempt("b"))
    c = begin_attempt(store, _attempt("c"))
    assert a and b and c
    finish_attempt(store, b.id, 1, EffectStatus.INDETERMINATE, reason="lost")
    finish_attempt(store, c.id, 1, EffectStatus.COMMITTED, reason="done")
    assert sorted(r.idempotency_key for r in unsettled_effects(store)) == ["a", "b"]
    assert [r.idempotency_key for r in list_effects(store, statuses=(EffectStatus.COMMITTED,))] == [
        "c"
    ]
    assert len(list_effects(store, tenant="other")) == 0
