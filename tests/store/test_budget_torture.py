"""Budget torture, on SQLite and PostgreSQL: agents in separate processes hammer one
token budget through real Guards on the store — estimates random, missing or zero;
real usage above the reservation, within its max_overage and now and then past it;
some calls released — while an admin reopens the budget whenever an overrun closes it
and two of the agents are killed with SIGKILL mid-flight. Afterwards the reaper
expires what the dead left reserved.

What must hold (docs/adr/0007-budgets-that-cannot-be-dodged.md):

- at every moment anyone looked, ``spent + reserved + headroom - excess <= cap``: what
  was spent within the bounds never passed the cap, whatever the concurrency;
- every token a client logged before committing is charged, exactly; the only calls
  not charged what their client logged are those of killed agents, and each of those
  is charged its reservation instead (money spent late is still spent);
- ``excess`` is exactly what the clients' commits ran past reservation + headroom;
- nothing stays reserved, and the counters add up to the reservations, one by one.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from interlock.store import ReservationStatus, SqlStore

TENANT = "torture"
CAP = 16_000
AGENTS = 6
KILLED = 2
SECONDS = 4.0

POLICY = f"""
version: 1
default: deny
audit:
  durability: none            # the ledger is under test here, not the audit log
budgets:
  - id: pool
    limit: {CAP}
    unit: tokens
    scope: tenant
    kind: llm
    default_estimate: 60      # a call that states nothing reserves this
    max_overage: "100%"       # and may use up to twice what it reserved
rules:
  - id: models
    decision: allow
    reason: the model may think
    kind: llm
"""


class Monitor(threading.Thread):
    """Samples the budget's (spent, reserved, headroom, excess) until stopped."""

    def __init__(self, store: SqlStore) -> None:
        super().__init__(daemon=True)
        self.store = store
        self.samples: list[tuple[int, int, int, int]] = []
        self.errors: list[BaseException] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.wait(0.005):
            try:
                for row in self.store.budget_rows(tenant=TENANT, budget_id="pool"):
                    self.samples.append((row.spent, row.reserved, row.headroom, row.excess))
            except BaseException as exc:
                self.errors.append(exc)
                return

    def stop(self) -> None:
        self.stopping.set()
        self.join(10)


class Admin(threading.Thread):
    """Reopens the budget whenever an overrun has closed it, and counts how often."""

    def __init__(self, store: SqlStore) -> None:
        super().__init__(daemon=True)
        self.store = store
        self.reopened = 0
        self.errors: list[BaseException] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.wait(0.05):
            try:
                self.reopened += len(self.store.reopen_budget(tenant=TENANT, budget_id="pool"))
            except BaseException as exc:
                self.errors.append(exc)
                return

    def stop(self) -> None:
        self.stopping.set()
        self.join(10)


def read_log(path: Path) -> tuple[list[dict[str, Any]], set[str]]:
    """A client's log: what it was about to report, and the ids it saw settled."""
    reports, settled = [], set()
    for line in path.read_text(encoding="utf-8").splitlines():
        entry = json.loads(line)  # the client flushes whole lines; a kill cuts none
        if "settled" in entry:
            settled.add(entry["settled"])
        else:
            reports.append(entry)
    return reports, settled


@pytest.mark.slow
def test_budget_torture_spends_within_the_bound_and_charges_every_reported_token(
    store: SqlStore,
    store_url: str,
    open_replica: Callable[..., SqlStore],
    spawn_worker: Callable[..., Any],
    tmp_path: Path,
) -> None:
    policy = tmp_path / "interlock.yaml"
    policy.write_text(POLICY)
    logs = [tmp_path / f"agent-{n}.jsonl" for n in range(AGENTS)]
    workers = [
        spawn_worker(
            "torture",
            store_url,
            str(policy),
            str(log),
            "--worker-id",
            f"agent-{n}",
            "--tenant",
            TENANT,
            "--seconds",
            str(SECONDS),
            "--seed",
            str(n),
        )
        for n, log in enumerate(logs)
    ]
    for worker in workers:
        worker.expect("ready", timeout=60)
    monitor = Monitor(open_replica(clock=None))
    admin = Admin(open_replica(clock=None))
    monitor.start()
    admin.start()
    for worker in workers:
        worker.send("go")

    rng = random.Random(12)
    killed = rng.sample(range(AGENTS), KILLED)
    for victim in killed:  # mid-flight, while the budget has room: calls every few ms
        time.sleep(rng.uniform(0.3, 0.7))
        workers[victim].kill()
        assert workers[victim].proc.returncode == -9
    for n, worker in enumerate(workers):
        if n not in killed:
            worker.expect("done", timeout=120)
            worker.finish()
    admin.stop()
    monitor.stop()

    # The reaper, after the reservation TTL: what the dead left reserved is charged.
    dead = {f"agent-{n}" for n in killed}
    leftovers = [r for r in _reservations(store) if r.status is ReservationStatus.RESERVED]
    assert {r.owner for r in leftovers} <= dead
    assert store.reap(now=store.clock() + 3_600_000_000).reservations == len(leftovers)

    # 1. At every moment anyone looked, spent within the bounds never passed the cap.
    assert monitor.errors == [] and admin.errors == []
    assert len(monitor.samples) > 50
    for sample in monitor.samples:
        spent, reserved, headroom, excess = sample
        assert spent + reserved + headroom - excess <= CAP, sample

    # 2. Every reported token is charged; only the dead have calls charged otherwise.
    reservations = {r.id: r for r in _reservations(store)}
    reported: dict[str, dict[str, Any]] = {}
    for n, log in enumerate(logs):
        reports, settled = read_log(log)
        for report in reports:
            reported[report["id"]] = {**report, "agent": f"agent-{n}"}
        unsettled = [r for r in reports if r["id"] not in settled]
        assert len(unsettled) <= (1 if n in killed else 0), (n, unsettled)
    expected_excess = 0
    for rid, reservation in reservations.items():
        report = reported.get(rid)
        line = reservation
        if reservation.status is ReservationStatus.EXPIRED:
            # a dead agent's last call: it may have run, so its reservation is charged
            assert reservation.owner in dead, reservation
            assert reservation.actual == {"pool": line.amount}
            continue
        assert report is not None, f"{rid} was settled but no client reported it"
        assert (report["amount"], report["headroom"]) == (line.amount, line.headroom)
        if report["used"] is None:
            assert reservation.status is ReservationStatus.RELEASED, reservation
        else:
            assert reservation.status is ReservationStatus.COMMITTED, reservation
            assert reservation.actual == {"pool": report["used"]}, (reservation, report)
            expected_excess += max(0, report["used"] - line.amount - line.headroom)
    assert set(reported) <= set(reservations)

    # 3. The counter adds up to the reservations, and its excess to the overruns.
    (row,) = store.budget_rows(tenant=TENANT, budget_id="pool")
    charged = sum(
        (r.actual or {}).get("pool", 0)
        for r in reservations.values()
        if r.status in (ReservationStatus.COMMITTED, ReservationStatus.EXPIRED)
    )
    assert (row.reserved, row.headroom) == (0, 0)
    assert row.spent == charged
    assert row.excess == expected_excess
    assert row.spent - row.excess <= CAP
    assert row.spent > CAP // 4, "the agents barely used the budget: no contention"
    assert sum(1 for r in reported.values() if r["used"] is None) > 0
    # overruns past the bound happened, closed the budget, and an admin reopened it
    assert expected_excess > 0 and admin.reopened > 0


@dataclass(frozen=True)
class Held:
    """One reservation as the store holds it."""

    id: str
    status: ReservationStatus
    owner: str | None
    amount: int
    headroom: int
    actual: dict[str, int] | None


def _reservations(store: SqlStore) -> list[Held]:
    with store.transaction(write=False) as cur:
        cur.execute(
            store.q("SELECT id, status, owner, lines, actual FROM reservations WHERE tenant = ?"),
            (TENANT,),
        )
        rows = cur.fetchall()
    held = []
    for rid, status, owner, lines, actual in rows:
        ((*_, amount, headroom),) = json.loads(lines)
        held.append(
            Held(
                str(rid),
                ReservationStatus(status),
                owner,
                int(amount),
                int(headroom),
                None if actual is None else json.loads(actual),
            )
        )
    return held
