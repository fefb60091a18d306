"""The audit chain after a crash in the middle of a batch, and the batch path under
many threads, on both back ends.

A subprocess writes through the group-commit writer from 16 threads and is killed
(SIGKILL) while a commit holding records of several tenants is inside its
transaction — its rows inserted, the heads not yet moved. Reopened, every chain
verifies, every record acknowledged to a caller is there with its marker, and none
of the interrupted batch is (none of it was acknowledged).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from interlock.store import AuditWriter, SqlStore, open_store
from interlock.store.chain import encode_body

WORKER = Path(__file__).with_name("_audit_crash_worker.py")


def _run_until_mid_batch(url: str, durability: str) -> tuple[list[list[Any]], list[str]]:
    proc = subprocess.Popen(
        [sys.executable, str(WORKER), url, durability],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    acks: list[list[Any]] = []
    mid: list[str] | None = None
    timer = threading.Timer(60, proc.kill)  # a worker that never stalls fails, not hangs
    timer.start()
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            message = json.loads(line)
            if "mid_batch" in message:
                mid = message["mid_batch"]
                proc.send_signal(signal.SIGKILL)
                break
            acks.append(message["ack"])
        proc.wait(10)
        # Lines printed before the kill: acknowledged too.
        rest = proc.stdout.read()
        for line in rest.splitlines():
            if line.endswith("}"):
                message = json.loads(line)
                if "ack" in message:
                    acks.append(message["ack"])
    finally:
        timer.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        stderr = proc.stderr.read() if proc.stderr is not None else ""
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
    assert mid is not None, f"the worker never stalled mid-batch; stderr:\n{stderr}"
    assert proc.returncode == -signal.SIGKILL
    return acks, mid


@pytest.mark.slow
@pytest.mark.parametrize("durability", ["process", "power"])
def test_a_crash_mid_batch_leaves_every_chain_verifiable_and_every_acknowledged_record(
    store_url: str, durability: str
) -> None:
    acks, interrupted = _run_until_mid_batch(store_url, durability)
    assert len(acks) >= 16 and len(interrupted) >= 2

    with open_store(store_url) as after:
        report = after.verify_audit()
        assert report.ok, report.breaks
        stored = {
            (row.tenant, row.seq): json.loads(row.body)["marker"] for row in after.audit_rows()
        }
    for tenant, seq, marker in acks:
        assert stored.get((tenant, seq)) == marker, (tenant, seq, marker)
    assert len({(t, s) for t, s, _ in acks}) == len(acks)  # no position told twice
    assert not set(interrupted) & set(stored.values())  # the cut batch left nothing
    assert sum(report.checked.values()) == len(stored)


def _entries(tenant: str, count: int, start: int = 0) -> list[tuple[Any, ...]]:
    return [
        (tenant, 1_000 + i, "note", f"d-{tenant}-{i}", "bot", "allow", encode_body({"i": i}))
        for i in range(start, start + count)
    ]


def test_one_batch_over_several_tenants_moves_each_head_once(store: SqlStore) -> None:
    store.append_audit(_entries("acme", 2))
    batch = [
        e for pair in zip(_entries("globex", 5), _entries("acme", 5, 2), strict=True) for e in pair
    ]
    seqs = store.append_audit(batch)
    assert seqs == [s for pair in zip(range(1, 6), range(3, 8), strict=True) for s in pair]
    assert store.audit_head("acme") is not None and store.audit_head("acme")[0] == 7
    assert store.audit_head("globex") is not None and store.audit_head("globex")[0] == 5
    report = store.verify_audit()
    assert report.ok, report.breaks
    assert report.checked == {"acme": 7, "globex": 5}


def test_a_batch_too_big_for_one_statement_is_written_whole(store: SqlStore) -> None:
    # PostgreSQL: past the 65,535 parameters of one statement the rows go in batches
    # of executemany; SQLite: executemany always. Either way: one transaction.
    entries = _entries("acme", 6_100) + _entries("globex", 3)
    seqs = store.append_audit(entries)
    assert seqs[-1] == 3 and seqs[6_099] == 6_100
    report = store.verify_audit()
    assert report.ok, report.breaks
    assert report.checked == {"acme": 6_100, "globex": 3}


@pytest.mark.parametrize("durability", ["process", "power"])
def test_many_threads_share_commits_and_every_chain_holds_exactly_its_records(
    store: SqlStore, durability: str
) -> None:
    writer = AuditWriter(store, durability=durability)  # type: ignore[arg-type]
    tenants = ("acme", "globex", "initech")
    per_thread = 60
    told: list[tuple[str, int, str]] = []
    lock = threading.Lock()

    def work(index: int) -> None:
        for n in range(per_thread):
            tenant = tenants[(index + n) % 3]
            marker = f"{index}-{n}"
            seq = writer.write_record(tenant, "note", {"marker": marker})
            assert seq is not None
            with lock:
                told.append((tenant, seq, marker))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    writer.close()

    assert len(told) == 16 * per_thread
    assert writer.records == 16 * per_thread
    assert writer.batches < writer.records  # commits were shared
    report = store.verify_audit()
    assert report.ok, report.breaks
    assert report.checked == dict(Counter(t for t, _, _ in told))
    stored = {(r.tenant, r.seq): json.loads(r.body)["marker"] for r in store.audit_rows()}
    assert stored == {(t, s): m for t, s, m in told}
