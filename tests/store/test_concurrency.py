"""Under contention and crashes: a budget hammered by many processes never overspends
and ends exactly where its clients say; a client killed between reserve and commit
leaves a reservation the reaper charges (the call may have run); a writer killed
mid-batch loses no record it reported durable."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from interlock.store import ReservationStatus, SqlStore

CAP = 1000


def reservation_counts(store: SqlStore, tenant: str) -> Counter[str]:
    with store.transaction(write=False) as cur:
        cur.execute(
            store.q("SELECT status, COUNT(*) FROM reservations WHERE tenant = ? GROUP BY status"),
            (tenant,),
        )
        return Counter({str(status): int(n) for status, n in cur.fetchall()})


class Monitor(threading.Thread):
    """Samples one budget's (spent, reserved, overage, headroom, excess) until stopped."""

    def __init__(self, store: SqlStore, tenant: str, budget_id: str) -> None:
        super().__init__(daemon=True)
        self.store, self.tenant, self.budget_id = store, tenant, budget_id
        self.samples: list[tuple[int, int, int, int, int]] = []
        self.errors: list[BaseException] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                for row in self.store.budget_rows(tenant=self.tenant, budget_id=self.budget_id):
                    self.samples.append(
                        (row.spent, row.reserved, row.overage, row.headroom, row.excess)
                    )
            except BaseException as exc:
                self.errors.append(exc)
                return
            time.sleep(0.002)

    def stop(self) -> None:
        self.stopping.set()
        self.join(10)


@pytest.mark.slow
def test_a_hammered_budget_never_overspends_and_ends_where_its_clients_say(
    store: SqlStore,
    store_url: str,
    backend: str,
    open_replica: Callable[..., SqlStore],
    spawn_worker: Callable[..., Any],
    tmp_path: Path,
) -> None:
    processes, threads = (4, 4) if backend == "sqlite" else (3, 4)
    per_thread = ["--store-per-thread"] if backend == "postgres" else []
    outs = [tmp_path / f"worker-{n}.jsonl" for n in range(processes)]
    workers = [
        spawn_worker(
            "hammer",
            store_url,
            str(out),
            "--worker-id",
            f"w{n}",
            "--tenant",
            "acme",
            "--budget",
            "spend",
            "--cap",
            str(CAP),
            "--threads",
            str(threads),
            "--iterations",
            "60",
            "--seed",
            str(n),
            *per_thread,
        )
        for n, out in enumerate(outs)
    ]
    for worker in workers:
        worker.expect("ready")
    monitor = Monitor(open_replica(), "acme", "spend")
    monitor.start()
    for worker in workers:
        worker.send("go")
    for worker in workers:
        worker.expect("done", timeout=120)
        worker.finish()
    monitor.stop()

    seen = [json.loads(text) for out in outs for text in out.read_text().splitlines()]
    by_op: dict[str, list[dict[str, Any]]] = {}
    for entry in seen:
        by_op.setdefault(entry["op"], []).append(entry)
    reserved, committed = by_op.get("reserved", []), by_op.get("committed", [])
    released, refused = by_op.get("released", []), by_op.get("refused", [])
    assert committed and released and refused  # the cap was contended, both ways settled

    # Never over the cap, at any moment anyone looked, headroom held included (no
    # commit ran past its headroom, so nothing is excess).
    assert monitor.errors == []
    assert len(monitor.samples) > 10
    for sample in monitor.samples:
        spent, held, _, headroom, excess = sample
        assert held >= 0 and headroom >= 0 and excess == 0, sample
        assert spent + held + headroom <= CAP, sample

    # Replays returned the first outcome and changed nothing.
    for replay in by_op.get("replayed_reserve", []):
        assert replay["replayed"] and replay["replay_id"] == replay["id"], replay
    first_actual = {entry["id"]: entry["actual"] for entry in committed}
    for replay in by_op.get("replayed_commit", []):
        assert replay["replayed"] and replay["actual"] == first_actual[replay["id"]], replay

    # Each reservation settled once, and the totals are what the clients saw.
    ids = [entry["id"] for entry in reserved]
    assert len(ids) == len(set(ids))
    assert len(first_actual) == len(committed)
    assert set(first_actual).isdisjoint(e["id"] for e in released)
    assert set(first_actual) | {e["id"] for e in released} == set(ids)
    final = store.budget_rows(tenant="acme", budget_id="spend")[0]
    assert final.spent == sum(e["actual"] for e in committed)
    assert final.overage == sum(max(0, e["actual"] - e["amount"]) for e in committed)
    assert final.reserved == 0
    assert reservation_counts(store, "acme") == {
        "committed": len(committed),
        "released": len(released),
    }
    for entry in committed:
        stored = store.get_reservation(entry["id"])
        assert stored.actual == {"spend": entry["actual"]}


@pytest.mark.slow
def test_a_client_killed_between_reserve_and_commit_is_charged_by_the_reaper(
    store: SqlStore, store_url: str, clock: Any, spawn_worker: Callable[..., Any]
) -> None:
    client = spawn_worker("reserve-and-hang", store_url, "--amount", "100", "--ttl-us", "1000000")
    held = client.expect("id")
    client.kill()
    assert client.proc.returncode == -9

    row = store.budget_rows(tenant="acme", budget_id="spend")[0]
    assert (row.spent, row.reserved) == (0, 100)

    clock.now = held["expires_us"] - 1
    assert store.reap().reservations == 0
    assert store.budget_rows(tenant="acme")[0].reserved == 100
    assert store.get_reservation(held["id"]).status is ReservationStatus.RESERVED

    clock.now = held["expires_us"]
    assert store.reap().reservations == 1
    row = store.budget_rows(tenant="acme", budget_id="spend")[0]
    assert (row.spent, row.reserved) == (100, 0)  # money spent late is still spent
    assert store.get_reservation(held["id"]).status is ReservationStatus.EXPIRED


@pytest.mark.slow
def test_a_writer_killed_mid_batch_loses_no_record_it_reported_durable(
    store_url: str, open_replica: Callable[..., SqlStore], spawn_worker: Callable[..., Any]
) -> None:
    writer = spawn_worker("audit-writer", store_url, "--threads", "4", "--tenants", "acme,globex")
    reported = [writer.expect("seq", timeout=30)]
    until = time.monotonic() + 1.0
    while time.monotonic() < until:
        reported.append(writer.expect("seq"))
    writer.kill()
    assert writer.proc.returncode == -9
    reported += writer.read_all()  # what it printed before it died
    assert len(reported) > 20

    after = open_replica()
    report = after.verify_audit()
    assert report.ok, report.breaks
    bodies = {(row.tenant, row.seq): json.loads(row.body) for row in after.audit_rows()}
    for message in reported:
        key = (message["tenant"], message["seq"])
        assert key in bodies, message
        assert bodies[key]["marker"] == message["marker"]
    assert len({(m["tenant"], m["seq"]) for m in reported}) == len(reported)
