"""Benchmark ``store-audit``: how many decisions per second the audit log makes
durable, with group commit, against one fsync per record.

Subjects, per back end (SQLite file in WAL mode; PostgreSQL when reachable):

* ``AuditWriter(durability="process")`` and ``"power"``: 16 threads write decision
  events (the guard's own records, built from the example policy) as fast as they
  can, each waiting for its record to be committed — as ``guard.check`` waits before
  it returns — for a fixed number of records. Reported: decisions/s over the whole
  run, each write's latency, and the mean records per commit (``writer.batches``).
* **baseline: raw SQL of the same schema** — one thread on a bare connection
  (``sqlite3``; ``psycopg``) running the statements a commit of the store runs, with
  every row built beforehand (no redaction, JSON or hashing): SQLite ``BEGIN
  IMMEDIATE``, the head's conditional ``UPDATE``, one multi-row ``INSERT``, ``COMMIT``;
  PostgreSQL the one autocommit statement that moves the head and inserts the rows.
  Measured at 8 and 64 rows a transaction and at the batch size each subject reached;
  the subject's ratio is to the raw SQL at its own batch size, on the same back end
  and durability. The statements of the store before it knew its heads (SQLite: head
  ``SELECT``, ``executemany``, head ``UPDATE`` in ``BEGIN IMMEDIATE … COMMIT``;
  PostgreSQL: ``BEGIN``, ``SELECT … FOR UPDATE``, one statement, ``COMMIT``) run too,
  labelled "(the statements before)", and ``process`` gets a ratio to them as well.
* **baseline: one fsync per record** — a single-threaded loop of one-row INSERT +
  COMMIT (SQLite: WAL, ``synchronous=FULL``; PostgreSQL: an autocommit INSERT with
  ``synchronous_commit`` on), rows the size of a real record.

The writer's CPU per record is its commits' thread CPU time (``time.thread_time``
around each commit, on whichever thread made it: hashing and SQL) divided by the
records they wrote; a waiting caller encodes its own record before queueing it, and
that cost is reported apart (``writer_cpu_steps``).

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
from interlock.store.chain import GENESIS, encode_body, link_hash, link_material

__all__ = ["profile", "raw_postgres", "raw_rows", "raw_sqlite", "run"]

THREADS: Final = 16
DEFAULT_RECORDS: Final = 24_000
QUICK_RECORDS: Final = 3_200
DEFAULT_FSYNC_RECORDS: Final = 1_500
QUICK_FSYNC_RECORDS: Final = 300
WARMUP: Final = 200
TARGET_PER_S: Final = 50_000.0
#: In the label of a raw-SQL baseline of the store's statements before it knew its heads.
BEFORE: Final = " (the statements before)"


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
    cpu = [0]
    try:
        for i in range(WARMUP):
            writer.write_event(tenant, events[i % len(events)])
        _count_commit_cpu(store, cpu)
        batches, written_before = writer.batches, writer.records
        samples, wall = _write_concurrently(writer, tenant, events, records)
        commits = writer.batches - batches
        commit_cpu = cpu[0]
        committed = writer.records - written_before
    finally:
        vars(store).pop("append_audit", None)
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
        "writer_cpu_us_per_record": round(commit_cpu / committed / 1000, 2) if committed else None,
        "verified": report.ok,
        "chain_length": checked,
    }
    return stats


def _count_commit_cpu(store: SqlStore, total: list[int]) -> None:
    """Add each commit's thread CPU time (on whichever thread makes it) to
    ``total[0]`` (an instance attribute shadows the method; ≈ 6 µs a commit more)."""
    append = store.append_audit
    clock = time.thread_time_ns

    def counted(entries: Any, *, durable: bool = False) -> list[int]:
        started = clock()
        try:
            return append(entries, durable=durable)
        finally:
            total[0] += clock() - started

    store.append_audit = counted  # type: ignore[method-assign]


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


# -- raw SQL of the same schema ------------------------------------------------------------


def raw_rows(events: Sequence[Any], tenant: str, records: int) -> list[tuple[Any, ...]]:
    """The rows the subjects write — the same events cycled, so the same timestamps,
    decision ids and bodies land in the same index positions — with a real-looking
    hash, built beforehand: the raw loops time SQL only."""
    redactor = Redactor()
    cycle = []
    for event in events:
        record = event.to_record(redactor)
        cycle.append(
            (
                int(event.ts * 1_000_000),
                record.get("decision_id"),
                record.get("agent"),
                record.get("decision"),
                encode_body(record),
            )
        )
    digest = "ab" * 32
    rows: list[tuple[Any, ...]] = []
    for seq in range(1, records + 1):
        ts_us, decision_id, agent, decision, body = cycle[seq % len(cycle)]
        link = (digest, digest, "k1")
        rows.append((tenant, seq, ts_us, "decision", decision_id, agent, decision, body, *link))
    return rows


def _raw_loop(label: str, rows: Sequence[tuple[Any, ...]], batch: int, commit: Any) -> Stats:
    """``commit(rows)`` per ``batch`` rows, each timed; every row gets its
    transaction's latency, so throughput is rows per second."""
    for start in range(0, min(len(rows), 4 * batch), batch):  # warm-up (head exists)
        commit(rows[start : start + batch])
    rows = rows[4 * batch :]
    samples: list[int] = []
    clock = time.perf_counter_ns
    gc.collect()
    gc.disable()
    try:
        began = clock()
        for start in range(0, len(rows) - batch + 1, batch):
            t0 = clock()
            commit(rows[start : start + batch])
            samples += [clock() - t0] * batch
        wall = clock() - began
    finally:
        gc.enable()
    return summarise(label, samples, wall)


def raw_sqlite(
    path: Path,
    rows: Sequence[tuple[Any, ...]],
    batch: int,
    *,
    full: bool,
    before: bool = False,
) -> Stats:
    """The store's SQLite commit as raw SQL on a bare ``sqlite3`` connection (the
    store's schema, WAL, ``synchronous`` NORMAL or FULL): ``BEGIN IMMEDIATE``, the head
    moved by its conditional ``UPDATE``, the rows in one multi-row ``INSERT``,
    ``COMMIT`` — what a commit of a chain the store knows runs. ``before``: the five
    statements of the store before it knew its heads (``BEGIN IMMEDIATE``, the head
    ``SELECT``, an ``executemany`` INSERT, the head UPDATE, ``COMMIT``)."""
    open_store(f"sqlite:///{path}").close()  # the schema, by the store's migrations
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={'FULL' if full else 'NORMAL'}")
        conn.execute("PRAGMA wal_autocheckpoint=8000")
        tenant = rows[0][0]
        conn.execute(
            "INSERT INTO audit_heads (tenant, seq, hash) VALUES (?, 0, ?)", (tenant, GENESIS)
        )
        columns = (
            "tenant, seq, ts_us, kind, decision_id, agent, decision, body, prev_hash, hash, key_id"
        )
        insert = f"INSERT INTO audit_events ({columns}) VALUES (?,?,?,?,?,?,?,?,?,?,?)"
        many = f"INSERT INTO audit_events ({columns}) VALUES " + ",".join(
            ["(?,?,?,?,?,?,?,?,?,?,?)"] * batch
        )
        move = (
            "UPDATE audit_heads SET seq = ?, hash = ?, key_id = ? "
            "WHERE tenant = ? AND seq = ? AND hash = ?"
        )
        head = [0, GENESIS]

        def commit(chunk: Sequence[tuple[Any, ...]]) -> None:
            last = chunk[-1]
            conn.execute("BEGIN IMMEDIATE")
            if conn.execute(move, (last[1], last[9], last[10], tenant, *head)).rowcount != 1:
                raise RuntimeError("raw SQL: the head did not move")  # a floor doing less
            conn.execute(many, chunk[0] if batch == 1 else [v for row in chunk for v in row])
            conn.execute("COMMIT")
            head[:] = last[1], last[9]

        def commit_before(chunk: Sequence[tuple[Any, ...]]) -> None:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(
                "SELECT seq, hash, key_id FROM audit_heads WHERE tenant = ?", (tenant,)
            ).fetchone()
            conn.executemany(insert, chunk)
            last = chunk[-1]
            conn.execute(
                "UPDATE audit_heads SET seq = ?, hash = ?, key_id = ? WHERE tenant = ?",
                (last[1], last[9], last[10], tenant),
            )
            conn.execute("COMMIT")

        sync = "FULL" if full else "NORMAL"
        label = f"sqlite raw SQL {sync}{BEFORE if before else ''}, {batch} rows a transaction"
        return _raw_loop(label, rows, batch, commit_before if before else commit)
    finally:
        conn.close()


def raw_postgres(
    schema: str, rows: Sequence[tuple[Any, ...]], batch: int, *, before: bool = False
) -> Stats:
    """The store's PostgreSQL commit of a chain it knows as raw SQL on a bare
    ``psycopg`` connection: the one autocommit statement that moves the head if it is
    still the one known and inserts the rows if it moved (one round trip, as the
    store's). ``before``: the store's commit before it knew its heads — ``BEGIN``, the
    head ``SELECT … FOR UPDATE``, the one statement that inserts the rows and moves the
    head, ``COMMIT`` (four round trips)."""
    conn = pg_connect(schema)
    try:
        tenant = rows[0][0]
        conn.execute(
            "INSERT INTO audit_heads (tenant, seq, hash) VALUES (%s, 0, %s)", (tenant, GENESIS)
        )
        head = [0, GENESIS]

        def commit(chunk: Sequence[tuple[Any, ...]]) -> None:
            last = chunk[-1]
            params: list[Any] = [last[1], last[9], last[10], tenant, head[0], head[1]]
            for row in chunk:
                params += row
            if conn.execute(_pg_known_sql(len(chunk)), params).rowcount != len(chunk):
                raise RuntimeError("raw SQL: the rows did not land")  # a floor doing less
            head[:] = last[1], last[9]

        def commit_before(chunk: Sequence[tuple[Any, ...]]) -> None:
            conn.execute("BEGIN")
            conn.execute(
                "SELECT seq, hash, key_id FROM audit_heads WHERE tenant = %s FOR UPDATE",
                (tenant,),
            ).fetchone()
            last = chunk[-1]
            params: list[Any] = [tenant, last[1], last[9], last[10]]
            for row in chunk:
                params += row
            conn.execute(_pg_locked_sql(len(chunk)), params)
            conn.execute("COMMIT")

        label = f"postgres raw SQL{BEFORE if before else ''}, {batch} rows a transaction"
        return _raw_loop(label, rows, batch, commit_before if before else commit)
    finally:
        conn.close()


_PG_ROW: Final = "(%s, %s::bigint, %s::bigint, %s, %s, %s, %s, %s, %s, %s, %s)"
_PG_INSERT: Final = (
    "INSERT INTO audit_events "
    "(tenant, seq, ts_us, kind, decision_id, agent, decision, body, prev_hash, hash, key_id) "
)


def _pg_known_sql(rows: int) -> str:
    """The store's statement for a chain it knows (written out here, so that this
    bench runs against a tree before it too)."""
    return (
        "WITH moved AS (UPDATE audit_heads SET seq = %s::bigint, hash = %s, key_id = %s "
        "WHERE tenant = %s AND seq = %s::bigint AND hash = %s RETURNING 1) "
        + _PG_INSERT
        + "SELECT * FROM (VALUES "
        + ", ".join([_PG_ROW] * rows)
        + ") AS r WHERE EXISTS (SELECT 1 FROM moved)"
    )


def _pg_locked_sql(rows: int) -> str:
    """The store's statement after it locked the head: the head moved and the rows
    inserted, one statement."""
    return (
        "WITH moved AS (UPDATE audit_heads AS h SET seq = v.seq, hash = v.hash, "
        "key_id = v.key_id FROM (VALUES (%s, %s::bigint, %s, %s)) "
        "AS v (tenant, seq, hash, key_id) WHERE h.tenant = v.tenant) "
        + _PG_INSERT
        + "VALUES "
        + ", ".join([_PG_ROW] * rows)
    )


def _step_costs(events: Sequence[Any], iterations: int = 3_000) -> dict[str, float]:
    """CPU µs per record (``time.thread_time``) of each step a record goes through,
    each alone: what the waiting caller does before it queues it (event → redacted
    record, JSON) and what the commit does per record besides SQL (the link's
    material and HMAC)."""
    from interlock.store.audit_keys import AuditKey

    redactor = Redactor()
    count = len(events)
    records = [e.to_record(redactor) for e in events]
    bodies = [encode_body(r) for r in records]
    key = AuditKey(b"k" * 32)
    clock = time.thread_time_ns

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
        "link_hmac_us": per_call(
            lambda i: key.digest(
                link_material(
                    GENESIS,
                    "acme",
                    i,
                    1_700_000_000_000_000,
                    "decision",
                    "dec_1",
                    "bot",
                    "allow",
                    bodies[i % count],
                    key.key_id,
                )
            )
        ),
        "link_sha256_unkeyed_us": per_call(
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
    total = out["to_record_with_redaction_us"] + out["encode_body_us"] + out["link_hmac_us"]
    out["sum_us"] = total
    out["ceiling_records_per_s"] = 1e6 / total
    return {k: round(v, 2) for k, v in out.items()}


def _raw_sizes(result: BenchResult, backend: str) -> list[int]:
    """8 and 64 rows a transaction, and each size the subjects reached."""
    sizes = {8, 64}
    for key, value in result.info.get("group_commit", {}).items():
        if key.startswith(backend) and value["records_per_commit"]:
            sizes.add(max(1, round(value["records_per_commit"])))
    return sorted(sizes)


def _raw_ratios(result: BenchResult, stats: Sequence[Stats]) -> dict[str, float]:
    """Each subject's throughput ÷ the raw SQL's at the batch size it reached (same
    back end, same durability)."""
    ratios: dict[str, float] = {}
    for key, value in result.info.get("group_commit", {}).items():
        backend, durability = key.split("_", 1)
        size = max(1, round(value["records_per_commit"] or 1))
        sync = "" if backend == "postgres" else (" FULL" if durability == "power" else " NORMAL")
        raw = next(
            (s for s in stats if s.label == f"{backend} raw SQL{sync}, {size} rows a transaction"),
            None,
        )
        if raw is not None:
            value["raw_sql_per_s_at_that_batch"] = round(raw.throughput, 1)
            ratios[f"{key}_over_raw_sql_at_{size}_rows"] = value["decisions_per_s"] / raw.throughput
        label = f"{backend} raw SQL{'' if backend == 'postgres' else ' NORMAL'}{BEFORE}"
        old = next((s for s in stats if s.label == f"{label}, {size} rows a transaction"), None)
        if old is not None and durability == "process":
            value["raw_sql_before_per_s_at_that_batch"] = round(old.throughput, 1)
            ratios[f"{key}_over_raw_sql_before_at_{size}_rows"] = (
                value["decisions_per_s"] / old.throughput
            )
    return ratios


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
    with sqlite_dir() as directory:
        result.info["sqlite"] = sqlite_facts(directory)
        for durability in ("process", "power"):
            with open_store(f"sqlite:///{directory / durability}.db") as store:
                stats.append(_group_commit("sqlite", store, durability, events, records, result))
        rows = raw_rows(events, "raw", records)
        for size in _raw_sizes(result, "sqlite"):
            for full in (False, True):
                name = f"raw-{size}-{'full' if full else 'normal'}.db"
                stats.append(raw_sqlite(directory / name, rows, size, full=full))
            name = f"raw-{size}-normal-before.db"
            stats.append(raw_sqlite(directory / name, rows, size, full=False, before=True))
        stats.append(_sqlite_fsync(directory, events, fsync_records))
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
            rows = raw_rows(events, "raw", pg_records)
            for size in _raw_sizes(result, "postgres"):
                for before in (False, True):
                    with store.transaction() as cur:  # a fresh chain for each run
                        cur.execute(store.q("DELETE FROM audit_events WHERE tenant = 'raw'"))
                        cur.execute(store.q("DELETE FROM audit_heads WHERE tenant = 'raw'"))
                    stats.append(raw_postgres(schema, rows, size, before=before))
            stats.append(_pg_fsync(schema, events, fsync_records))
    result.stats = stats
    ratios = _raw_ratios(result, stats)
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
    for key, value in ratios.items():
        if "_over_raw_sql_at_" in key:
            targets.append(Target(f"{key} (throughput)", value, ">=", 0.8, "×"))
    cpu = result.info["group_commit"].get("sqlite_process", {}).get("writer_cpu_us_per_record")
    if cpu is not None:
        targets.append(
            Target("sqlite process: the writer's CPU per record", cpu, "<=", 20.0, " µs")
        )
    result.targets = targets
    result.info["ratios"] = {k: round(v, 2) for k, v in ratios.items()}
    steps = result.info["writer_cpu_steps"]
    result.notes += [
        "throughput ratios: "
        + ", ".join(f"{k} = {v:.2f}×" for k, v in result.info["ratios"].items()),
        "records per commit: "
        + ", ".join(
            f"{k} {v['records_per_commit']}" for k, v in result.info["group_commit"].items()
        ),
        "commit CPU per record (hashing + SQL, all committing threads): "
        + ", ".join(
            f"{k} {v['writer_cpu_us_per_record']} µs"
            for k, v in result.info["group_commit"].items()
        ),
        f"CPU per record, each step alone: before queueing (the caller) to_record+redaction "
        f"{steps['to_record_with_redaction_us']} µs + encode_body {steps['encode_body_us']} µs; "
        f"in the commit the link's HMAC {steps['link_hmac_us']} µs",
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
    lock_head, hasher = store._lock_head, vars(sql_module)["link_material"]

    def timed_entry(*args: Any) -> Any:
        with _timed(totals, "encode: to_record + redaction + JSON"):
            return entry(*args)

    def timed_append(*args: Any, **kwargs: Any) -> Any:
        with _timed(totals, "append_audit (all)"):
            return append(*args, **kwargs)

    def timed_hash(*args: Any) -> Any:
        with _timed(totals, "  of which link material"):
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
    vars(sql_module)["link_material"] = timed_hash  # looked up at each call


_STEPS: Final = (
    "encode: to_record + redaction + JSON",
    "append_audit (all)",
    "  of which open the transaction (BEGIN)",
    "  of which lock the chain head",
    "  of which link material",
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

    original_hash = vars(sql_module)["link_material"]
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
        vars(sql_module)["link_material"] = original_hash
    return out.getvalue()
