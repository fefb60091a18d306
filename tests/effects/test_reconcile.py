"""The reconciler: a worker thread that settles what a restart left open, and
concurrent reconcilers that settle each attempt once."""

from __future__ import annotations

import json
import threading

from interlock import Guard
from interlock.effects import EffectStatus, Outcome, Reconciler, reconcile_effect, run_effect
from interlock.effects.http import HttpEffect
from interlock.effects.records import get_effect

from .chaos import CutProxy
from .provider import Provider, Served
from .support import refund, spent


def test_the_worker_settles_an_open_attempt(
    guard: Guard, provider: tuple[Provider, Served], proxy: CutProxy, refunds: HttpEffect
) -> None:
    assert guard.store is not None
    proxy.next("drop_after")
    result = run_effect(guard, refunds, refund(), idempotency_key="w-1")
    assert result.outcome is Outcome.INDETERMINATE
    worker = Reconciler(guard.store, [refunds], interval=0.05, audit=guard.audit)
    worker.start()
    try:
        for _ in range(2000):
            record = get_effect(guard.store, result.effect_id)
            if record is not None and not record.status.open:
                break
            threading.Event().wait(0.01)
    finally:
        worker.stop()
    assert record is not None and record.status is EffectStatus.COMMITTED
    assert spent(guard.store)[1] == 0 and len(provider[0].effects) == 1


def test_racing_reconcilers_settle_once(
    guard: Guard, provider: tuple[Provider, Served], proxy: CutProxy, refunds: HttpEffect
) -> None:
    store = guard.store
    assert store is not None
    proxy.next("drop_after")
    result = run_effect(guard, refunds, refund(), idempotency_key="w-race")
    held = spent(store)[1]
    barrier = threading.Barrier(4)
    statuses: list[EffectStatus] = []

    def reconcile() -> None:
        barrier.wait()
        settled = reconcile_effect(store, [refunds], result.effect_id, audit=guard.audit)
        statuses.append(settled.status)

    threads = [threading.Thread(target=reconcile) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert statuses == [EffectStatus.COMMITTED] * 4
    assert spent(store) == (held, 0)
    assert guard.audit is not None
    guard.audit.flush()
    records = [json.loads(row.body) for row in store.audit_rows(tenant="acme")]
    reconciled = [r for r in records if r.get("event") == "reconciled"]
    assert len(reconciled) == 1  # the one reconciler that moved the record
    assert reconciled[0]["status"] == "committed"
