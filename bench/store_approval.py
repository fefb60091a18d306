"""Benchmark ``store-approval``: how soon a waiting agent resumes once a human
approves, when the approval is made by another process.

Per back end: a pending approval is opened in this process, and a thread here calls
``store.wait_for_approval(id, timeout=10)``. A separate process with its own store
object (``bench/store_workers.py approver``) sleeps for a random 350–450 ms — long
enough for the waiter's backoff to have reached its slowest poll, as it has when a
human takes seconds — reads the wall clock (``time.time_ns()``) just before calling
``store.approve(id)``, and reports that reading. The waiter reads the same clock the
moment ``wait_for_approval`` returns the approved record. Latency = waiter's reading −
approver's reading: both processes read one CLOCK_REALTIME on one machine, so no
clock offset enters, and the latency includes the approve transaction itself, the
wake-up and the waiter's re-read of the record.

* **PostgreSQL**: the decision is announced with ``NOTIFY`` inside the approve
  transaction; a listener thread in the waiting process wakes the waiter.
* **SQLite**: no notifications across processes; the waiter polls with backoff
  (2 ms doubling to 100 ms), so the latency is up to one poll interval.
* **baseline (floor)**: a bare ``NOTIFY`` from another process to a psycopg
  connection here blocked in ``notifies()`` — what PostgreSQL itself costs.

The external comparison, not measured: a popular approvals SDK polls every 3 s, so a
waiting agent resumes on average 1.5 s after the approval.
"""

from __future__ import annotations

import queue
import random
import secrets
import threading
import time
from typing import Any, Final

from bench.harness import BenchResult, Stats, Target, summarise
from bench.store import (
    Worker,
    pg_schema,
    pg_server_settings,
    pg_server_url,
    pg_unavailable,
    sqlite_dir,
)
from interlock.store import ApprovalRecord, ApprovalStatus, SqlStore, open_store

__all__ = ["run"]

DEFAULT_REPEATS: Final = 30
QUICK_REPEATS: Final = 8
WARMUP: Final = 2
DELAY_S: Final = (0.35, 0.45)  # the approver's wait before approving
NOTIFY_DELAY_S: Final = (0.02, 0.05)
TARGET_PG_MS: Final = 100.0
SDK_POLL_S: Final = 3.0


def _open_pending(store: SqlStore) -> str:
    outcome = store.resolve_approval(
        tenant="acme",
        intent_hash=secrets.token_hex(32),
        action={"kind": "tool", "name": "refund_order", "arguments": {"amount": 500}},
        context={"tenant": "acme", "agent": "support-bot"},
        rule_ids=["refund-large"],
        reason="refunds over 100 need a human",
        requested_by="support-bot",
        ttl_us=600_000_000,
        grant_ttl_us=600_000_000,
    )
    if outcome.state is not ApprovalStatus.PENDING:
        raise RuntimeError(f"a new approval came back {outcome.state}, not pending")
    return outcome.record.id


def _approve_once(
    store: SqlStore, approver: Worker
) -> tuple[int | None, ApprovalRecord | None, dict[str, Any]]:
    """One approval: a waiter thread here, the approver process there. Returns the
    waiter's wall clock on waking, the record it got, and the approver's answer."""
    approval_id = _open_pending(store)
    woke: list[tuple[int, ApprovalRecord]] = []

    def wait() -> None:
        record = store.wait_for_approval(approval_id, timeout=10)
        woke.append((time.time_ns(), record))

    waiter = threading.Thread(target=wait)
    waiter.start()
    approver.send({"id": approval_id, "delay": random.uniform(*DELAY_S)})
    answer = approver.receive(timeout=30)
    waiter.join(15)
    if not woke:
        return None, None, answer
    return woke[0][0], woke[0][1], answer


def _approvals(
    label: str, store: SqlStore, url: str, repeats: int, result: BenchResult
) -> tuple[Stats, list[int]]:
    """Latency samples (ns) of ``repeats`` approvals made by another process."""
    approver = Worker.start("approver", {"url": url})
    samples: list[int] = []
    approve_ns: list[int] = []
    try:
        approver.receive(timeout=60)
        for i in range(WARMUP + repeats):
            woke, record, answer = _approve_once(store, approver)
            if woke is None or record is None or record.status is not ApprovalStatus.APPROVED:
                status = record.status.value if record else "no answer"
                result.problems.append(f"{label}: the waiter did not see the approval ({status})")
                continue
            if i >= WARMUP:
                samples.append(woke - answer["t0_ns"])
                approve_ns.append(answer["t1_ns"] - answer["t0_ns"])
    finally:
        approver.close()
    stats = summarise(f"{label} approve → waiter resumes", samples, sum(samples))
    return stats, approve_ns


def _notify_floor(repeats: int) -> Stats:
    """A bare NOTIFY from another process to a connection blocked in notifies()."""
    import psycopg

    channel = f"bench_{secrets.token_hex(4)}"
    received: queue.Queue[tuple[str, int]] = queue.Queue()
    listener = psycopg.connect(pg_server_url(), autocommit=True, connect_timeout=5)
    listener.execute(f"LISTEN {channel}")
    stop = threading.Event()

    def listen() -> None:
        while not stop.is_set():
            for note in listener.notifies(timeout=0.5):
                received.put((note.payload, time.time_ns()))

    thread = threading.Thread(target=listen, daemon=True)
    thread.start()
    notifier = Worker.start("notifier", {"url": pg_server_url()})
    samples: list[int] = []
    try:
        notifier.receive(timeout=60)
        for i in range(WARMUP + repeats):
            payload = f"n{i}"
            notifier.send(
                {"channel": channel, "payload": payload, "delay": random.uniform(*NOTIFY_DELAY_S)}
            )
            answer = notifier.receive(timeout=30)
            got, at = received.get(timeout=10)
            if got != payload:
                raise RuntimeError(f"NOTIFY payload {got!r}, expected {payload!r}")
            if i >= WARMUP:
                samples.append(at - answer["t0_ns"])
    finally:
        notifier.close()
        stop.set()
        thread.join(2)
        listener.close()
    return summarise("postgres baseline: bare NOTIFY → LISTEN", samples, sum(samples))


def run(calls: int | None = None, quick: bool = False) -> BenchResult:
    """``calls``: approvals per back end."""
    repeats = calls or (QUICK_REPEATS if quick else DEFAULT_REPEATS)
    result = BenchResult(name="store-approval")
    result.info["repeats"] = repeats
    result.info["approver_delay_s"] = DELAY_S
    result.info["clock"] = "time.time_ns() in both processes (one CLOCK_REALTIME)"
    stats: list[Stats] = []
    approve_call: dict[str, float] = {}
    with sqlite_dir() as directory:
        url = f"sqlite:///{directory / 'approvals.db'}"
        with open_store(url) as store:
            lite, approve_ns = _approvals("sqlite", store, url, repeats, result)
        stats.append(lite)
        approve_call["sqlite"] = sorted(approve_ns)[len(approve_ns) // 2] / 1e6
    targets: list[Target] = []
    ratios: dict[str, float] = {}
    skipped = pg_unavailable()
    if skipped:
        result.notes.append(f"PostgreSQL parts skipped: {skipped}")
    else:
        result.info["postgres"] = pg_server_settings()
        with pg_schema() as (url, _), open_store(url) as store:
            pg, approve_ns = _approvals("postgres", store, url, repeats, result)
        approve_call["postgres"] = sorted(approve_ns)[len(approve_ns) // 2] / 1e6
        floor = _notify_floor(repeats)
        stats += [pg, floor]
        ratios["postgres_over_notify_p50"] = pg.p50_ns / floor.p50_ns
        targets += [
            Target("postgres approval-to-resume p50", pg.p50_ns / 1e6, "<=", TARGET_PG_MS, "ms"),
            Target("postgres approval-to-resume p99", pg.p99_ns / 1e6, "<=", TARGET_PG_MS, "ms"),
        ]
    mean_sdk_ms = SDK_POLL_S / 2 * 1000
    for backend, subject in zip(("sqlite", "postgres"), stats, strict=False):
        ratios[f"sdk_3s_poll_mean_over_{backend}_mean"] = mean_sdk_ms / (subject.mean_ns / 1e6)
    result.stats = stats
    result.targets = targets
    result.info["approve_call_p50_ms"] = {k: round(v, 2) for k, v in approve_call.items()}
    result.info["ratios"] = {k: round(v, 2) for k, v in ratios.items()}
    result.info["external"] = (
        f"a popular approvals SDK polls every {SDK_POLL_S:g} s: mean wait "
        f"{mean_sdk_ms / 1000:g} s (not measured)"
    )
    result.notes += [
        "latency = waiter's time.time_ns() on waking − approver's time.time_ns() just before "
        "approve() (same machine clock); the table's calls/s column is meaningless here",
        "approve() call itself, p50: "
        + ", ".join(f"{k} {v:.2f} ms" for k, v in result.info["approve_call_p50_ms"].items()),
        "ratios: " + ", ".join(f"{k} = {v:.1f}" for k, v in result.info["ratios"].items()),
        result.info["external"],
    ]
    return result
