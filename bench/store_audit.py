"""Benchmark ``store-audit``: how many decisions per second the audit log makes
durable, with group commit, against one fsync per record.

Subjects, per back end (SQLite file in WAL mode; PostgreSQL when reachable):

* ``AuditWriter(durability="process")`` and ``"power"``: 16 threads write decision
  events (the guard's own records, built from the example policy) as fast as they
  can, each waiting for its record to be committed — as ``guard.check`` waits before
  it returns — for a fixed number of records. Reported: decisions/s over the whole
  run, each write's latency, and the mean records per commit (``writer.batches``).
* **baseline: one fsync per record** — a single-threaded loop of one-row INSERT +
  COMMIT (SQLite: WAL, ``synchronous=FULL``; PostgreSQL: an autocommit INSERT with
  ``synchronous_commit`` on), rows the size of a real record.

Afterwards every subject's chain must verify (``verify_audit().ok``) and hold exactly
the records written; anything else is a correctness problem.

The writer does its CPU work (redaction, JSON, the hash chain) in one thread, so the
run also times each of those steps alone, single-threaded: their sum is a ceiling on
records/s that no amount of batching lifts. ``--profile`` splits the writer thread's
time during a real run.
"""

from __future__ import annotations

import gc
import io
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, Final

from bench.harness import BenchResult, Stats, Target, summarise
from bench.store import (
    decision_events,
    pg_connect,
    pg_schema,
    pg_server_settings,
    pg_unavailable,
    sqlite_dir,
    sqlite_facts,
)
from interlock.core.redaction import Redactor
from interlock.store import AuditWriter, SqlStore, open_store
from interlock.store.chain import GENESIS, encode_body, link_hash

__all__ = ["profile", "run"]

THREADS: Final = 16
DEFAULT_RECORDS: Final = 24_000
QUICK_RECORDS: Final = 3_200
DEFAULT_FSYNC_RECORDS: Final = 1_500
QUICK_FSYNC_RECORDS: Final = 300
WARMUP: Final = 200
TARGET_PER_S: Final = 50_000.0


def _write_concurrently(
    writer: AuditWriter,
    tenant: str,
    events: Sequence[Any],
    records: int,
    threads: int = THREADS,
) -> tuple[list[int], int]:
    """``records`` writes from ``threads`` threads, each timed; returns samples and
    the wall time from the start signal to the last write."""
    per_thread = records // threads
    samples: list[list[int]] = [[0] * per_thread for _ in range(threads)]
    start = threading.Barrier(threads + 1)
    failures: list[BaseException] = []

    def work(index: int) -> None:
        mine = samples[index]
        clock = time.perf_counter_ns
        write = writer.write_event
        count = len(events)
        start.wait()
        try:
            for i in range(per_thread):
                event = events[(index + i) % count]
                t0 = clock()
                write(tenant, event)
                mine[i] = clock() - t0
        except BaseException as exc:
            failures.append(exc)

    workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    gc.collect()
    gc.disable()
    try:
        start.wait()
        began = time.perf_counter_ns()
        for worker in workers:
            worker.join()
        wall = time.perf_counter_ns() - began
    finally:
        gc.enable()
    if failures:
        raise RuntimeError(f"an audit write failed: {failures[0]!r}") from failures[0]
    return [x for mine in samples for x in mine], wall


def _group_commit(
    backend: str,
    store: SqlStore,
    durability: str,
    events: Sequence[Any],
    records: int,
    result: BenchResult,
) -> Stats:
    tenant = f"bench-{durability}"
    writer = AuditWriter(store, durability=durability)  # type: ignore[arg-type]
    try:
        for i in range(WARMUP):
            writer.write_event(tenant, events[i % len(events)])
        batches = writer.batches
        samples, wall = _write_concurrently(writer, tenant, events, records)
        commits = writer.batches - batches
    finally:
        writer.close()
    written = WARMUP + (records // THREADS) * THREADS
    report = store.verify_audit(tenant)
    checked = report.checked.get(tenant, 0)
    if not report.ok:
        result.problems.append(
            f"{backend} {durability}: the chain does not verify: {report.breaks}"
        )
    if checked != written:
        result.problems.append(
            f"{backend} {durability}: {checked} records in the chain, {written} written"
        )
    stats = summarise(f"{backend} audit {durability} ({THREADS} threads)", samples, wall)
    result.info.setdefault("group_commit", {})[f"{backend}_{durability}"] = {
        "records": len(samples),
        "decisions_per_s": round(stats.throughput, 1),
        "commits": commits,
        "records_per_commit": round(len(samples) / commits, 2) if commits else None,
        "verified": report.ok,
        "chain_length": checked,
    }
    return stats


def _fsync_loop(label: str, insert: Callable[[int], None], records: int) -> Stats:
    for i in range(50):
        insert(-1 - i)
    samples = [0] * records
    clock = time.perf_counter_ns
    gc.collect()
    gc.disable()
    try:
        began = clock()
        for i in range(records):
            t0 = clock()
            insert(i)
            samples[i] = clock() - t0
        wall = clock() - began
    finally:
        gc.enable()
    return summarise(label, samples, wall)


def _body(events: Sequence[Any]) -> str:
    return encode_body(events[0].to_record(Redactor()))


def _sqlite_fsync(directory: Path, events: Sequence[Any], records: int) -> Stats:
    conn = sqlite3.connect(directory / "fsync.db", isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute(
            "CREATE TABLE floor (id INTEGER PRIMARY KEY, tenant TEXT, ts_us INTEGER, body TEXT)"
        )
        body = _body(events)

        def insert(i: int) -> None:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(
                "INSERT INTO floor (tenant, ts_us, body) VALUES (?, ?, ?)",
                ("acme", time.time_ns() // 1000, body),
            )
            conn.execute("COMMIT")

        return _fsync_loop("sqlite baseline: 1 fsync per record", insert, records)
    finally:
        conn.close()


def _pg_fsync(schema: str, events: Sequence[Any], records: int) -> Stats:
    conn = pg_connect(schema)
    try:
        conn.execute(
            "CREATE TABLE floor (id bigserial PRIMARY KEY, tenant text, ts_us bigint, body text)"
        )
        body = _body(events)

        def insert(i: int) -> None:
            conn.execute(
                "INSERT INTO floor (tenant, ts_us, body) VALUES (%s, %s, %s)",
                ("acme", time.time_ns() // 1000, body),
            )

        return _fsync_loop("postgres baseline: 1 fsync per record", insert, records)
    finally:
        conn.close()


def _step_costs(events: Sequence[Any], iterations: int = 3_000) -> dict[str, float]:
    """µs per record of each CPU step the writer thread runs, each alone."""
    redactor = Redactor()
    count = len(events)
    records = [e.to_record(redactor) for e in events]
    bodies = [encode_body(r) for r in records]
    clock = time.perf_counter_ns

    def per_call(fn: Callable[[int], object]) -> float:
        for i in range(200):
            fn(i)
        t0 = clock()
        for i in range(iterations):
            fn(i)
        return (clock() - t0) / iterations / 1000

    out = {
        "to_record_with_redaction_us": per_call(lambda i: events[i % count].to_record(redactor)),
        "encode_body_us": per_call(lambda i: encode_body(records[i % count])),
        "link_hash_us": per_call(
            lambda i: link_hash(
                GENESIS,
                "acme",
                i,
                1_700_000_000_000_000,
                "decision",
                "dec_1",
                "bot",
                "allow",
                bodies[i % count],
            )
        ),
    }
    total = sum(out.values())
    out["sum_us"] = total
    out["ceiling_records_per_s"] = 1e6 / total
    return {k: round(v, 2) for k, v in out.items()}


def run(calls: int | None = None, quick: bool = False) -> BenchResult:
    """``calls``: records per group-commit subject."""
    records = calls or (QUICK_RECORDS if quick else DEFAULT_RECORDS)
    records = max(THREADS, records // THREADS * THREADS)
    fsync_records = QUICK_FSYNC_RECORDS if quick else DEFAULT_FSYNC_RECORDS
    result = BenchResult(name="store-audit")
    result.info["records"] = {"group_commit": records, "fsync_baseline": fsync_records}
    events = decision_events()
    result.info["record_bytes"] = len(_body(events))
    result.info["writer_cpu_steps"] = _step_costs(events)
    stats: list[Stats] = []
    rates: dict[str, float] = {}
    with sqlite_dir() as directory:
        result.info["sqlite"] = sqlite_facts(directory)
        for durability in ("process", "power"):
            with open_store(f"sqlite:///{directory / durability}.db") as store:
                stats.append(_group_commit("sqlite", store, durability, events, records, result))
        stats.append(_sqlite_fsync(directory, events, fsync_records))
    rates |= {s.label: s.throughput for s in stats}
    skipped = pg_unavailable()
    if skipped:
        result.notes.append(f"PostgreSQL parts skipped: {skipped}")
    else:
        result.info["postgres"] = pg_server_settings()
        with pg_schema() as (url, schema), open_store(url) as store:
            pg_records = max(THREADS, records // 2 // THREADS * THREADS)
            for durability in ("process", "power"):
                stats.append(
                    _group_commit("postgres", store, durability, events, pg_records, result)
                )
            stats.append(_pg_fsync(schema, events, fsync_records))
        rates |= {s.label: s.throughput for s in stats}
    result.stats = stats
    ratios: dict[str, float] = {}
    targets: list[Target] = []
    for backend in ("sqlite", "postgres"):
        floor = next((s for s in stats if s.label.startswith(f"{backend} baseline")), None)
        for subject in stats:
            if floor is None or not subject.label.startswith(f"{backend} audit"):
                continue
            durability = subject.label.split()[2]
            ratios[f"{backend}_{durability}_over_fsync_per_record"] = (
                subject.throughput / floor.throughput
            )
            targets.append(
                Target(
                    f"{backend} durable decisions/s ({durability}, {THREADS} threads)",
                    subject.throughput,
                    ">=",
                    TARGET_PER_S,
                    "/s",
                )
            )
    result.targets = targets
    result.info["ratios"] = {k: round(v, 2) for k, v in ratios.items()}
    steps = result.info["writer_cpu_steps"]
    result.notes += [
        "throughput ratios (group commit / one fsync per record): "
        + ", ".join(f"{k} = {v:.1f}×" for k, v in result.info["ratios"].items()),
        "records per commit: "
        + ", ".join(
            f"{k} {v['records_per_commit']}" for k, v in result.info["group_commit"].items()
        ),
        f"writer thread CPU per record, each step alone: to_record+redaction "
        f"{steps['to_record_with_redaction_us']} µs, encode_body {steps['encode_body_us']} µs, "
        f"link_hash {steps['link_hash_us']} µs → ceiling ≈ "
        f"{steps['ceiling_records_per_s']:,.0f} records/s before any SQL",
    ]
    return result


# -- profile: where the writer thread's time goes ---------------------------------------------


@contextmanager
def _timed(totals: dict[str, int], key: str) -> Iterator[None]:
    t0 = time.perf_counter_ns()
    try:
        yield
    finally:
        totals[key] = totals.get(key, 0) + time.perf_counter_ns() - t0


def _instrument(writer: AuditWriter, store: SqlStore, totals: dict[str, int]) -> None:
    """Wrap the writer's steps (instance attributes shadow the methods)."""
    import interlock.store.sql_audit as sql_module

    entry, append, transaction = writer._entry, store.append_audit, store.audit_transaction
    lock_head, hasher = store._lock_head, vars(sql_module)["link_hash"]

    def timed_entry(*args: Any) -> Any:
        with _timed(totals, "encode: to_record + redaction + JSON"):
            return entry(*args)

    def timed_append(*args: Any, **kwargs: Any) -> Any:
        with _timed(totals, "append_audit (all)"):
            return append(*args, **kwargs)

    def timed_hash(*args: Any) -> Any:
        with _timed(totals, "  of which link_hash"):
            return hasher(*args)

    def timed_head(*args: Any) -> Any:
        with _timed(totals, "  of which lock the chain head"):
            return lock_head(*args)

    @contextmanager
    def timed_transaction(durable: bool) -> Iterator[Any]:
        manager: AbstractContextManager[Any] = transaction(durable)
        with _timed(totals, "  of which open the transaction (BEGIN)"):
            cur = manager.__enter__()
        try:
            yield cur
        except BaseException as exc:
            manager.__exit__(type(exc), exc, exc.__traceback__)
            raise
        with _timed(totals, "  of which close it (COMMIT)"):
            manager.__exit__(None, None, None)

    writer._entry = timed_entry  # type: ignore[method-assign,assignment]
    store.append_audit = timed_append  # type: ignore[method-assign]
    store.audit_transaction = timed_transaction  # type: ignore[method-assign]
    store._lock_head = timed_head  # type: ignore[method-assign,assignment]
    vars(sql_module)["link_hash"] = timed_hash  # looked up at each call


_STEPS: Final = (
    "encode: to_record + redaction + JSON",
    "append_audit (all)",
    "  of which open the transaction (BEGIN)",
    "  of which lock the chain head",
    "  of which link_hash",
    "  of which close it (COMMIT)",
)


def _profile_one(
    label: str,
    store: SqlStore,
    durability: str,
    events: Sequence[Any],
    records: int,
    threads: int = THREADS,
) -> str:
    writer = AuditWriter(store, durability=durability)  # type: ignore[arg-type]
    for i in range(WARMUP):
        writer.write_event(f"profile-{durability}", events[i % len(events)])
    totals: dict[str, int] = {}
    _instrument(writer, store, totals)
    batches = writer.batches
    samples, wall = _write_concurrently(writer, f"profile-{durability}", events, records, threads)
    commits = writer.batches - batches
    writer.close()
    lines = [
        f"{label} {durability}, {threads} thread(s): {records:,} records in {wall / 1e9:.2f} s"
        f" = {records / (wall / 1e9):,.0f}/s, {commits:,} commits ({records / commits:.1f} each),"
        f" a caller waits {sum(samples) / len(samples) / 1000:.1f} µs on average"
    ]
    busy = totals.get(_STEPS[0], 0) + totals.get(_STEPS[1], 0)
    for key in (*_STEPS, "writer thread busy (encode + append)"):
        value = busy if key.startswith("writer") else totals.get(key, 0)
        lines.append(
            f"  {key:40} {value / 1e9:6.2f} s {value / records / 1000:8.2f} µs/record"
            f" {100 * value / wall:6.1f}% of wall"
        )
    if threads == 1:  # one caller: its wait is the writer's work plus the hand-offs
        handoff = (sum(samples) - busy) / records / 1000
        lines.append(f"  {'hand-off (caller wait − writer busy)':40} {handoff:17.2f} µs/record")
    return "\n".join(lines) + "\n"


def profile(records: int = 16_000) -> str:
    """The writer thread's time, split by step, during a 16-thread run and a
    one-thread run (SQLite, and PostgreSQL when reachable; process and power). The
    wrappers add about a microsecond per step. The rest of the wall time the writer
    waits for work. On PostgreSQL "open" and "close" include taking the pool
    connection and giving it back."""
    import interlock.store.sql_audit as sql_module

    original_hash = vars(sql_module)["link_hash"]
    events = decision_events()
    out = io.StringIO()
    try:
        with sqlite_dir() as directory:
            for durability in ("process", "power"):
                with open_store(f"sqlite:///{directory / durability}.db") as store:
                    out.write(_profile_one("sqlite", store, durability, events, records))
                    out.write(_profile_one("sqlite", store, durability, events, records // 8, 1))
        if pg_unavailable() is None:
            with pg_schema() as (url, _), open_store(url) as store:
                for durability in ("process", "power"):
                    out.write(_profile_one("postgres", store, durability, events, records // 4))
                    out.write(_profile_one("postgres", store, durability, events, records // 16, 1))
    finally:
        vars(sql_module)["link_hash"] = original_hash
    return out.getvalue()
