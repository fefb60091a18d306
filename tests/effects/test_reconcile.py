"""The reconciler: a worker thread that settles what a restart left open, and
concurrent reconcilers that settle each attempt once."""

from __future__ import annotations

import json
import os
import threading

import pytest

from interlock import Guard
from interlock.effects import EffectStatus, Outcome, Reconciler, reconcile_effect, run_effect
from interlock.effects.http import HttpEffect
from interlock.effects.reconcile import is_orphaned
from interlock.effects.records import EffectRecord, get_effect, machine_id

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


def _executing(runner: str, deadline_us: int) -> EffectRecord:
    return EffectRecord(
        "eff_1", "acme", "k", "http", "1", "sha256:" + "0" * 64, None, None, "d", None,
        None, runner, EffectStatus.EXECUTING, 1, {}, None, None, "", deadline_us, 0, 0,
    )  # fmt: skip


def _dead_pid() -> int:
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()  # reaped: the pid names no process now
    return proc.pid


@pytest.mark.parametrize(
    ("runner", "deadline_us", "orphaned"),
    [
        (f"{machine_id()}:{os.getpid()}", 10**18, False),  # this very process
        (f"{machine_id()}:{_dead_pid()}", 10**18, True),  # gone from this machine
        (f"elsewhere/abcd/1:{_dead_pid()}", 10**18, False),  # another machine's pid
        (f"{machine_id().split('/')[0]}/ffffffff/1:{_dead_pid()}", 10**18, False),  # rebooted
        (f"elsewhere/abcd/1:{os.getpid()}", 1_000, True),  # past its deadline: anyone's
        ("garbage", 10**18, False),
    ],
    ids=["alive", "dead-here", "other-machine", "other-boot", "past-deadline", "garbage"],
)
def test_an_executing_attempt_is_orphaned_only_when_it_provably_is(
    runner: str, deadline_us: int, orphaned: bool
) -> None:
    assert is_orphaned(_executing(runner, deadline_us), 10_000_000) is orphaned
