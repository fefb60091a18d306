"""Benchmark ``store-check``: what a durable audit log costs ``guard.check``.

One small policy (``examples/interlock.yaml``, the demo's rules) and one workload
of 9 allowed and denied calls (no approvals, no budgets: those add store
transactions of their own, measured by ``store-approval`` and ``store-budget``).
Subjects, all on SQLite in WAL mode, each on a fresh file:

* ``guard.check`` with **no store** — the baseline;
* with a store, **durability none** — the record is queued and the call returns;
* with a store, **durability process** (the default) — the call returns once the
  transaction holding its record has committed;
* with a store, **durability power** — committed and synced to disk.

First single-threaded, each call timed; then 8 threads calling at once, where many
waiting calls share one commit (group commit). Afterwards each store's chain must
verify and hold one record per check.

The floor for the durable check is **raw SQL**: the statements a durable check's
commit runs, on a bare ``sqlite3`` connection to a file of the store's schema (WAL,
``synchronous=NORMAL`` as ``process``), one record a transaction, the row built
beforehand — ``BEGIN IMMEDIATE``, the head's conditional ``UPDATE``, the ``INSERT``,
``COMMIT`` (what a commit of a chain the store knows runs). It is timed just after
the ``process`` subject, and again just before it, so that drift in the machine's
load lands on both. The five statements of the store before it knew its heads
(``BEGIN IMMEDIATE``, the head ``SELECT``, the ``INSERT``, the head ``UPDATE``,
``COMMIT``) are timed beside them, and the check gets a ratio to those too.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from bench.harness import BenchResult, Stats, Target, atime_calls, summarise, time_calls
from bench.store import (
    WORKLOAD,
    decision_events,
    example_policy,
    sqlite_dir,
    sqlite_facts,
    workload_actions,
)
from bench.store_audit import raw_rows, raw_sqlite
from interlock import Guard
from interlock.store import open_store

__all__ = ["run"]

#: timed calls per single-threaded subject (default, quick)
CALLS: Final = {
    "no store": (100_000, 10_000),
    "none": (30_000, 3_000),
    "process": (8_000, 1_000),
    "power": (3_000, 500),
}
THREADS: Final = 8
#: subjects also timed through ``await guard.acheck`` (one task)
ASYNC_SUBJECTS: Final = ("no store", "process")
#: calls per thread in the 8-thread runs (default, quick)
THREAD_CALLS: Final = {"no store": (10_000, 1_000), "process": (2_000, 250), "power": (1_000, 150)}
WARMUP: Final = 1_000
TARGET_PER_S: Final = 50_000.0


def _concurrent(guard: Guard, actions: Sequence[Any], per_thread: int) -> tuple[list[int], int]:
    samples: list[list[int]] = [[0] * per_thread for _ in range(THREADS)]
    start = threading.Barrier(THREADS + 1)

    def work(index: int) -> None:
        mine = samples[index]
        clock = time.perf_counter_ns
        check = guard.check
        count = len(actions)
        start.wait()
        for i in range(per_thread):
            action = actions[(index + i) % count]
            t0 = clock()
            check(action)
            mine[i] = clock() - t0

    threads = [threading.Thread(target=work, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    gc.collect()
    gc.disable()
    try:
        start.wait()
        began = time.perf_counter_ns()
        for thread in threads:
            thread.join()
        wall = time.perf_counter_ns() - began
    finally:
        gc.enable()
    return [x for mine in samples for x in mine], wall


def _verify(guard: Guard, expected: int, label: str, result: BenchResult) -> dict[str, Any]:
    assert guard.store is not None and guard.audit is not None
    guard.audit.flush()
    report = guard.store.verify_audit("acme")
    checked = report.checked.get("acme", 0)
    if not report.ok:
        result.problems.append(f"{label}: the audit chain does not verify: {report.breaks}")
    if checked != expected:
        result.problems.append(f"{label}: {checked} audit records, {expected} checks made")
    return {"verified": report.ok, "records": checked}


def _verdicts(guard: Guard, actions: Sequence[Any], label: str, result: BenchResult) -> int:
    for call, action in zip(WORKLOAD, actions, strict=True):
        verdict = guard.check(action).verdict.value
        if verdict != call.expect:
            result.problems.append(
                f"{label}: {call.tool} {call.arguments} is {verdict}, expected {call.expect}"
            )
    return len(actions)


def _guard(policy: Any, subject: str, directory: Path) -> Guard:
    if subject == "no store":
        return Guard(policy)
    return Guard(
        policy,
        store=open_store(f"sqlite:///{directory / subject}.db"),
        durability=subject,  # type: ignore[arg-type]
    )


def _measure(
    guard: Guard,
    subject: str,
    actions: Sequence[Any],
    calls: int,
    per_thread: int | None,
    result: BenchResult,
) -> tuple[Stats, Stats | None]:
    """One subject: single-threaded, then (when asked) 8 threads; then the audit
    chain is checked against the number of checks made."""
    label = "guard.check, no store" if subject == "no store" else f"guard.check, sqlite {subject}"
    made = _verdicts(guard, actions, subject, result)
    samples, wall = time_calls(guard.check, actions, calls, WARMUP)
    single = summarise(f"{label} (1 thread)", samples, wall)
    made += WARMUP + calls
    audit = guard.audit
    if audit is not None:  # what was still queued when the loop ended
        t0 = time.perf_counter_ns()
        audit.flush()
        result.info.setdefault("flush_after_single_thread_s", {})[subject] = round(
            (time.perf_counter_ns() - t0) / 1e9, 3
        )
    if subject in ASYNC_SUBJECTS:
        samples, wall = asyncio.run(atime_calls(guard.acheck, actions, calls, WARMUP))
        label_async = label.replace("guard.check", "guard.acheck")
        result.info.setdefault("async", {})[subject] = summarise(
            f"{label_async} (1 task)", samples, wall
        )
        made += WARMUP + calls
        if audit is not None:
            audit.flush()
    multi = None
    if per_thread is not None:
        before = audit.batches if audit is not None else 0
        samples, wall = _concurrent(guard, actions, per_thread)
        multi = summarise(f"{label} ({THREADS} threads)", samples, wall)
        made += len(samples)
        if audit is not None:
            result.info.setdefault("records_per_commit_8_threads", {})[subject] = round(
                len(samples) / max(1, audit.batches - before), 2
            )
    if audit is not None:
        result.info.setdefault("audit", {})[subject] = _verify(guard, made, label, result)
    return single, multi


def run(calls: int | None = None, quick: bool = False) -> BenchResult:
    """``calls``: no-store checks; the store subjects get proportionally fewer."""
    pick = 1 if quick else 0
    counts = {k: v[pick] for k, v in CALLS.items()}
    if calls:
        scale = calls / CALLS["no store"][0]
        counts = {k: max(100, int(v[0] * scale)) for k, v in CALLS.items()}
    per_thread = {k: v[pick] for k, v in THREAD_CALLS.items()}
    policy = example_policy()
    actions = workload_actions("acme")
    result = BenchResult(name="store-check")
    result.info["calls"] = {"single": counts, "per_thread": per_thread, "threads": THREADS}
    result.info["policy"] = {"file": "examples/interlock.yaml", "rules": len(policy.rules)}
    single: dict[str, Stats] = {}
    multi: dict[str, Stats] = {}
    raws: list[Stats] = []
    befores: list[Stats] = []  # the store's five statements before it knew its heads
    rows = raw_rows(decision_events(), "raw", counts["process"] + 8)
    with sqlite_dir() as directory:
        result.info["sqlite"] = sqlite_facts(directory)
        for subject in CALLS:
            if subject == "process":
                raws.append(raw_sqlite(directory / "raw-before.db", rows, 1, full=False))
                befores.append(
                    raw_sqlite(directory / "raw-before-1.db", rows, 1, full=False, before=True)
                )
            guard = _guard(policy, subject, directory)
            try:
                one, many = _measure(
                    guard, subject, actions, counts[subject], per_thread.get(subject), result
                )
            finally:
                guard.close()
                if guard.store is not None:
                    guard.store.close()
            single[subject] = one
            if many is not None:
                multi[subject] = many
            if subject == "process":
                raws.append(raw_sqlite(directory / "raw-after.db", rows, 1, full=False))
                befores.append(
                    raw_sqlite(directory / "raw-before-5.db", rows, 1, full=False, before=True)
                )
    async_stats: dict[str, Stats] = result.info.pop("async")
    raw = min(raws, key=lambda s: s.p50_ns)  # the floor: the quicker of the two
    raw = dataclasses.replace(raw, label="raw SQL, 1 record a transaction (1 thread)")
    result.info["raw_sql_p50_us"] = [round(s.p50_ns / 1000, 2) for s in raws]
    result.info["raw_sql_before_p50_us"] = [round(s.p50_ns / 1000, 2) for s in befores]
    before = min(befores, key=lambda s: s.p50_ns)
    result.stats = (
        [raw]
        + [single[k] for k in CALLS]
        + [async_stats[k] for k in ASYNC_SUBJECTS]
        + [multi[k] for k in THREAD_CALLS]
    )
    base = single["no store"]
    ratios: dict[str, float] = {
        f"{k}_over_no_store_p50": single[k].p50_ns / base.p50_ns
        for k in ("none", "process", "power")
    }
    ratios["process_over_raw_sql_p50"] = single["process"].p50_ns / raw.p50_ns
    ratios["process_over_raw_sql_before_p50"] = single["process"].p50_ns / before.p50_ns
    ratios["process_acheck_over_no_store_acheck_p50"] = (
        async_stats["process"].p50_ns / async_stats["no store"].p50_ns
    )
    ratios |= {
        f"{k}_8_threads_over_1_thread_per_s": multi[k].throughput / single[k].throughput
        for k in THREAD_CALLS
    }
    result.info["ratios"] = {k: round(v, 2) for k, v in ratios.items()}
    commits = result.info["records_per_commit_8_threads"]
    result.targets = [
        Target(
            "durable (process) guard.check p50 ÷ its raw SQL p50",
            ratios["process_over_raw_sql_p50"],
            "<=",
            1.5,
            "×",
        ),
        Target(
            f"durable (process) guard.check decisions/s, {THREADS} threads",
            multi["process"].throughput,
            ">=",
            TARGET_PER_S,
            "/s",
        ),
    ]
    result.notes += [
        "ratios: " + ", ".join(f"{k} = {v:.2f}" for k, v in result.info["ratios"].items()),
        "records per commit with 8 threads: "
        + ", ".join(f"{k} {v:.1f}" for k, v in commits.items()),
        "audit backlog flushed after the single-thread loop: "
        + ", ".join(
            f"{k} {v:.2f} s" for k, v in result.info["flush_after_single_thread_s"].items()
        ),
    ]
    return result
