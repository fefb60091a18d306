"""Benchmark ``store-budget``: a budget reservation and its commit, against the one SQL
statement underneath.

Subjects, per back end (SQLite file in WAL mode; PostgreSQL when reachable):

* **reserve + commit** through the store API: ``store.reserve`` on one budget line with
  a fresh idempotency key, then ``store.commit`` of the reservation — two write
  transactions, as every budgeted call makes. The reserve and the commit are also
  timed apart.
* **baseline: the raw conditional UPDATE** — ``UPDATE budgets SET reserved = reserved
  + ? WHERE <key> AND spent + reserved + ? <= cap`` in a transaction of its own, on the
  same database through the same driver settings (sqlite3 in autocommit mode with
  ``BEGIN IMMEDIATE`` / ``COMMIT``, WAL, ``synchronous=NORMAL``; an autocommit psycopg
  connection).
* **floor for two transactions** — the raw reserve UPDATE and a raw settle UPDATE
  (``reserved - a, spent + a``), each in its own transaction: the least any
  reserve-then-commit design can cost without batching.
* **baseline: one raw transaction holding both writes** — the reservation row's INSERT
  and the budget's conditional UPDATE in one transaction (issue 13's baseline: the
  store's reserve + commit should cost at most twice this).
* **reserve + commit from a lease** — the same pair through a second store that serves
  the budget from a lease (``store.lease_budgets``): its own rows only, no shared row.

The subjects alternate in five rounds, so that drifting load lands on each alike.

On SQLite also **a budgeted call through the guard**, end to end: ``guard.check`` of a
tool call a budget covers (durability ``process``), then ``guard.commit`` of its
decision — the reservation, the decision's audit record, the settlement and its
``budget`` record. Two guards, each on its own file: one as shipped, where the
decision's record commits in its reservation's transaction (ADR 0012 §5), and the
same guard with that turned off (the record goes through the audit writer, one more
transaction): what joining the record saves. Afterwards each chain must verify and
hold two records per call, and ``spent`` must equal what was committed.

On PostgreSQL also the **hot budget**: 3 processes × 4 threads (each process its own
store) run reserve + commit pairs on ONE budget row for a few seconds, then the same
pairs served from a lease each process holds, then the raw UPDATE on one row as the
baseline. Afterwards the budget's ``spent`` must equal the sum of what the workers
committed and ``reserved`` must be 0 (the leases returned) — anything else is a
correctness problem. As a diagnostic, the leased pairs and the raw UPDATE run once more
with ``synchronous_commit = off`` (no commit waits for the disk): what is left is the
clients' CPU and the row lock.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from bench.harness import BenchResult, Stats, Target, summarise
from bench.store import (
    Worker,
    pg_connect,
    pg_schema,
    pg_server_settings,
    pg_unavailable,
    rounds,
    sqlite_dir,
    sqlite_facts,
)
from interlock import Action, Context, Guard, Verdict
from interlock.policy import load_policy_text
from interlock.store import BudgetLine, SqlStore, open_store

__all__ = ["profile", "run"]

DEFAULT_SQLITE_CALLS: Final = 20_000
DEFAULT_PG_CALLS: Final = 1_500
QUICK_SQLITE_CALLS: Final = 3_000
QUICK_PG_CALLS: Final = 200
HOT_PROCESSES: Final = 3
HOT_THREADS: Final = 4
HOT_SECONDS: Final = 4.0
QUICK_HOT_SECONDS: Final = 1.5
TARGET_SQLITE_PAIR_OVER_RAW_TXN: Final = 2.0
TARGET_PG_HOT_LEASE_OVER_RAW: Final = 3.0
HOT_LEASE_SLICE: Final = 2_000  # hot amounts are 1..10: some 360 pairs per top-up

TENANT: Final = "acme"
CAP: Final = 10**15  # never reached: the benchmark measures the allowed path
AMOUNT: Final = 1_000
TTL_US: Final = 600_000_000
LEASE_SLICE: Final = 50 * AMOUNT  # a top-up every 50 pairs
KEY: Final = ("all", 0)  # scope_key, window_start

RAW_RESERVE_SQLITE: Final = (
    "UPDATE budgets SET reserved = reserved + ? WHERE tenant = ? AND budget_id = ? "
    "AND scope_key = ? AND window_start = ? AND spent + reserved + ? <= cap"
)
RAW_SETTLE_SQLITE: Final = (
    "UPDATE budgets SET reserved = reserved - ?, spent = spent + ? WHERE tenant = ? "
    "AND budget_id = ? AND scope_key = ? AND window_start = ?"
)
RAW_INSERT_SQLITE: Final = (
    "INSERT INTO reservations (id, tenant, idempotency_key, status, lines, created_us, "
    "expires_us) VALUES (?, ?, ?, 'reserved', ?, ?, ?)"
)
RAW_STATUS_SQLITE: Final = (
    "UPDATE reservations SET status = 'committed', settled_us = 1, actual = '{\"raw3\":1000}' "
    "WHERE id = ? AND status = 'reserved'"
)
RAW_RESERVE_PG: Final = RAW_RESERVE_SQLITE.replace("?", "%s")
RAW_STATUS_PG: Final = RAW_STATUS_SQLITE.replace("?", "%s")
RAW_SETTLE_PG: Final = RAW_SETTLE_SQLITE.replace("?", "%s")
RAW_INSERT_PG: Final = RAW_INSERT_SQLITE.replace("?", "%s")
LINES_JSON: Final = f'[["raw1","{KEY[0]}",{KEY[1]},"units",{CAP},{AMOUNT},0]]'


def _line(budget_id: str) -> BudgetLine:
    return BudgetLine(budget_id, KEY[0], KEY[1], "units", CAP, AMOUNT)


def _pair_chunk(
    store: SqlStore, line: BudgetLine, tag: str, problems: list[str], label: str = "pair"
) -> Any:
    """Reserve + commit through the store, fresh idempotency keys every call."""
    counter = [0]

    def chunk(count: int) -> tuple[dict[str, list[int]], int]:
        start = counter[0]
        counter[0] += count
        keys = [f"{tag}-{i}" for i in range(start, start + count)]
        reserve_ns, commit_ns, pair_ns = [0] * count, [0] * count, [0] * count
        clock = time.perf_counter_ns
        reserve, commit = store.reserve, store.commit
        began = clock()
        for i in range(count):
            t0 = clock()
            outcome = reserve(tenant=TENANT, idempotency_key=keys[i], lines=(line,), ttl_us=TTL_US)
            t1 = clock()
            if outcome.reservation is None:
                problems.append(f"{tag}: a reservation under a cap of {CAP} was refused")
                continue
            commit(outcome.reservation.id)
            t2 = clock()
            reserve_ns[i], commit_ns[i], pair_ns[i] = t1 - t0, t2 - t1, t2 - t0
        wall = clock() - began
        if label != "pair":
            return {label: pair_ns}, wall
        return {"pair": pair_ns, "reserve": reserve_ns, "commit": commit_ns}, wall

    return chunk


def _raw_chunks(
    execute: Callable[[str, tuple[Any, ...]], int],
    begin: Callable[[], None],
    end: Callable[[], None],
    reserve_sql: str,
    settle_sql: str,
    insert_sql: str,
    problems: list[str],
) -> tuple[Any, Any, Any]:
    """The raw UPDATE alone, the raw two-transaction floor (reserve; settle), and one
    raw transaction holding both of a reservation's writes (its row; the budget's)."""
    reserve_args = (AMOUNT, TENANT, "raw", *KEY, AMOUNT)
    settle_args = (AMOUNT, AMOUNT, TENANT, "raw2", *KEY)
    reserve2_args = (AMOUNT, TENANT, "raw2", *KEY, AMOUNT)
    reserve1_args = (AMOUNT, TENANT, "raw1", *KEY, AMOUNT)
    reserve3_args = (AMOUNT, TENANT, "raw3", *KEY, AMOUNT)
    settle3_args = (AMOUNT, AMOUNT, TENANT, "raw3", *KEY)
    status_sql = RAW_STATUS_PG if "%s" in insert_sql else RAW_STATUS_SQLITE
    both_counter = [0]

    def one(count: int) -> tuple[dict[str, list[int]], int]:
        samples = [0] * count
        clock = time.perf_counter_ns
        began = clock()
        for i in range(count):
            t0 = clock()
            begin()
            changed = execute(reserve_sql, reserve_args)
            end()
            samples[i] = clock() - t0
            if changed != 1:
                problems.append("the raw reserve UPDATE changed no row")
        return {"raw": samples}, clock() - began

    def two(count: int) -> tuple[dict[str, list[int]], int]:
        samples = [0] * count
        clock = time.perf_counter_ns
        began = clock()
        for i in range(count):
            t0 = clock()
            begin()
            changed = execute(reserve_sql, reserve2_args)
            end()
            begin()
            execute(settle_sql, settle_args)
            end()
            samples[i] = clock() - t0
            if changed != 1:
                problems.append("the raw reserve UPDATE changed no row")
        return {"raw2": samples}, clock() - began

    def both(count: int) -> tuple[dict[str, list[int]], int]:
        samples = [0] * count
        clock = time.perf_counter_ns
        start = both_counter[0]
        both_counter[0] += count
        began = clock()
        for i in range(count):
            key = f"raw-{start + i}"
            t0 = clock()
            begin()
            execute(insert_sql, (key, TENANT, key, LINES_JSON, 0, TTL_US))
            changed = execute(reserve_sql, reserve1_args)
            end()
            samples[i] = clock() - t0
            if changed != 1:
                problems.append("the raw reserve UPDATE changed no row")
        return {"raw1": samples}, clock() - began

    def pair(count: int) -> tuple[dict[str, list[int]], int]:
        samples = [0] * count
        clock = time.perf_counter_ns
        start = both_counter[0]
        both_counter[0] += count
        began = clock()
        for i in range(count):
            key = f"rawpair-{start + i}"
            t0 = clock()
            begin()
            execute(insert_sql, (key, TENANT, key, LINES_JSON, 0, TTL_US))
            changed = execute(reserve_sql, reserve3_args)
            end()
            begin()
            execute(status_sql, (key,))
            execute(settle_sql, settle3_args)
            end()
            samples[i] = clock() - t0
            if changed != 1:
                problems.append("the raw reserve UPDATE changed no row")
        return {"rawpair": samples}, clock() - began

    return one, two, both, pair


def _seed_rows(store: SqlStore) -> None:
    """The budget rows the raw statements update (the store's own row is made by
    its first reserve)."""
    for budget_id in ("raw", "raw2", "raw1", "raw3"):
        outcome = store.reserve(
            tenant=TENANT,
            idempotency_key=f"seed-{budget_id}",
            lines=(_line(budget_id),),
            ttl_us=TTL_US,
        )
        assert outcome.reservation is not None
        store.commit(outcome.reservation.id)


def _check_line(store: SqlStore, budget_id: str, pairs: int, where: str) -> list[str]:
    rows = store.budget_rows(tenant=TENANT, budget_id=budget_id)
    if len(rows) != 1:
        return [f"{where}: expected one budget row for {budget_id}, found {len(rows)}"]
    row = rows[0]
    problems = []
    if row.spent != pairs * AMOUNT:
        problems.append(
            f"{where}: spent {row.spent} != {pairs} committed pairs × {AMOUNT} = {pairs * AMOUNT}"
        )
    if row.reserved != 0:
        problems.append(f"{where}: {row.reserved} still reserved after every pair committed")
    return problems


def _single(
    backend: str,
    store: SqlStore,
    leased: SqlStore,
    raw: tuple[Any, Any, Any],
    calls: int,
    result: BenchResult,
) -> dict[str, Stats]:
    warm = max(200, calls // 20)
    pair = _pair_chunk(store, _line("store"), f"{backend}-pair", result.problems)
    lease = _pair_chunk(leased, _line("leased"), f"{backend}-lease", result.problems, "lease")
    one, two, both, raw_pair = raw
    for chunk in (pair, lease, one, two, both, raw_pair):  # untimed warm-up
        chunk(warm)
    measured = rounds(
        [
            ("pair", pair),
            ("lease", lease),
            ("raw", one),
            ("raw2", two),
            ("raw1", both),
            ("rawpair", raw_pair),
        ],
        calls,
    )
    stats = {
        "pair": summarise(f"{backend} reserve+commit (store)", *measured["pair"]),
        "reserve": summarise(f"{backend} reserve alone", *measured["reserve"]),
        "commit": summarise(f"{backend} commit alone", *measured["commit"]),
        "lease": summarise(f"{backend} reserve+commit from a lease", *measured["lease"]),
        "raw": summarise(f"{backend} baseline: raw UPDATE", *measured["raw"]),
        "raw2": summarise(f"{backend} floor: 2 raw txns", *measured["raw2"]),
        "raw1": summarise(f"{backend} baseline: 1 raw txn, both writes", *measured["raw1"]),
        "rawpair": summarise(
            f"{backend} baseline: 2 raw txns, the pair's 4 writes", *measured["rawpair"]
        ),
    }
    result.problems.extend(_check_line(store, "store", warm + calls, f"{backend} store budget"))
    leased.close()  # returns the lease: the counter must then add up
    result.problems.extend(_check_line(store, "leased", warm + calls, f"{backend} leased budget"))
    return stats


def _leased_store(url: str) -> SqlStore:
    leased = open_store(url, migrate=False)
    leased.lease_budgets({"leased": LEASE_SLICE})
    return leased


def _sqlite(directory: Path, calls: int, result: BenchResult) -> dict[str, Stats]:
    path = directory / "budget.db"
    store = open_store(f"sqlite:///{path}")
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=10.0)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA busy_timeout=10000")
        _seed_rows(store)

        def execute(sql: str, args: tuple[Any, ...]) -> int:
            return conn.execute(sql, args).rowcount

        def begin() -> None:
            conn.execute("BEGIN IMMEDIATE")

        def end() -> None:
            conn.execute("COMMIT")

        raw = _raw_chunks(
            execute,
            begin,
            end,
            RAW_RESERVE_SQLITE,
            RAW_SETTLE_SQLITE,
            RAW_INSERT_SQLITE,
            result.problems,
        )
        stats = _single("sqlite", store, _leased_store(f"sqlite:///{path}"), raw, calls, result)
        stats.update(_guards(directory, max(200, calls // 4), result))
        result.info["sqlite"] = sqlite_facts(directory) | {
            "synchronous": "NORMAL (store and baseline)",
            "wal_bytes_after": (directory / "budget.db-wal").stat().st_size
            if (directory / "budget.db-wal").exists()
            else 0,
        }
        return stats
    finally:
        conn.close()
        store.close()


GUARD_POLICY: Final = """
version: 1
default: deny
audit:
  durability: process
budgets:
  - id: spend
    limit: 1000000000
    unit: USD
    name: pay
    max_overage: 0
rules:
  - id: pay
    decision: allow
    reason: payments are budgeted
    name: pay
"""
GUARD_COST: Final = 0.001  # USD a call: the cap is never reached


def _guard_chunk(guard: Guard, label: str, problems: list[str]) -> Any:
    """``guard.check`` of a budgeted call, then ``guard.commit`` of its decision."""
    action = Action.tool("pay", {"to": "shop", "est_cost": GUARD_COST}, context=GUARD_CONTEXT)

    def chunk(count: int) -> tuple[dict[str, list[int]], int]:
        check_ns, pair_ns = [0] * count, [0] * count
        clock = time.perf_counter_ns
        check, commit = guard.check, guard.commit
        began = clock()
        for i in range(count):
            t0 = clock()
            decision = check(action)
            t1 = clock()
            if decision.verdict is not Verdict.ALLOW:
                problems.append(f"{label}: a budgeted call was not allowed: {decision.reason}")
                continue
            commit(decision)
            t2 = clock()
            check_ns[i], pair_ns[i] = t1 - t0, t2 - t0
        return {f"{label}_check": check_ns, f"{label}_pair": pair_ns}, clock() - began

    return chunk


GUARD_CONTEXT: Final = Context(tenant="acme", agent="bench")


def _guards(directory: Path, calls: int, result: BenchResult) -> dict[str, Stats]:
    """The budgeted call through two guards: the record joined, and not."""
    policy = load_policy_text(GUARD_POLICY)
    guards: dict[str, Guard] = {}
    for label in ("joined", "writer"):
        guards[label] = Guard(
            policy, store=f"sqlite:///{directory / f'guard-{label}.db'}", reap_interval=None
        )
    guards["writer"]._joined = lambda action, start: None  # type: ignore[method-assign]
    chunks = [
        (label, _guard_chunk(guard, label, result.problems)) for label, guard in guards.items()
    ]
    amounts: dict[str, int] = {}
    for label, guard in guards.items():  # one call each, to learn a call's amount in units
        first = guard.check(Action.tool("pay", {"est_cost": GUARD_COST}, context=GUARD_CONTEXT))
        assert first.reservation is not None
        guard.commit(first)
        amounts[label] = first.reservation.amounts[0][1]
    try:
        warm = max(200, calls // 20)
        for _, chunk in chunks:
            chunk(warm)
        measured = rounds(chunks, calls)
        for label, guard in guards.items():
            audit = guard.audit
            assert audit is not None and guard.store is not None
            result.info[f"guard_{label}_writer_batches"] = audit.batches
            store = guard.store
            report = store.verify_audit()
            total = warm + calls + 1
            held = sum(report.checked.values())
            if not report.ok or held != 2 * total:
                result.problems.append(
                    f"guard ({label}): the chain holds {held} records for {total} calls "
                    f"(2 each expected), verifies: {report.ok}"
                )
            (row,) = store.budget_rows(budget_id="spend")
            if row.reserved != 0 or row.spent != total * amounts[label]:
                result.problems.append(
                    f"guard ({label}): spent {row.spent}, reserved {row.reserved} after "
                    f"{total} calls of {amounts[label]} units each"
                )
    finally:
        for guard in guards.values():
            guard.close()
    names = {
        "joined_check": "sqlite guard.check, budgeted (record joined)",
        "joined_pair": "sqlite guard.check + commit (record joined)",
        "writer_check": "sqlite guard.check, budgeted (record by the writer)",
        "writer_pair": "sqlite guard.check + commit (record by the writer)",
    }
    return {key: summarise(name, *measured[key]) for key, name in names.items()}


def _postgres(calls: int, hot_seconds: float, result: BenchResult) -> dict[str, Stats]:
    with pg_schema() as (url, schema):
        store = open_store(url)
        conn = pg_connect(schema)
        try:
            _seed_rows(store)

            def execute(sql: str, args: tuple[Any, ...]) -> int:
                return int(conn.execute(sql, args).rowcount)

            def begin() -> None:
                if not in_transaction[0]:
                    conn.execute("BEGIN")
                    in_transaction[0] = True

            def end() -> None:
                if in_transaction[0]:
                    conn.execute("COMMIT")
                    in_transaction[0] = False

            in_transaction = [False]
            raw_one, raw_two, _, _ = _raw_chunks(
                execute,
                lambda: None,
                lambda: None,
                RAW_RESERVE_PG,
                RAW_SETTLE_PG,
                RAW_INSERT_PG,
                result.problems,
            )
            _, _, raw_both, raw_pair = _raw_chunks(
                execute, begin, end, RAW_RESERVE_PG, RAW_SETTLE_PG, RAW_INSERT_PG, result.problems
            )
            raw = (raw_one, raw_two, raw_both, raw_pair)
            stats = _single("postgres", store, _leased_store(url), raw, calls, result)
        finally:
            conn.close()
            store.close()
        stats.update(_hot(url, schema, hot_seconds, result))
    return stats


def _hot_run(url: str, schema: str, name: str, seconds: float) -> list[dict[str, Any]]:
    """``name``: a kind (``pair``, ``lease``, ``raw``), ``_nosync`` appended for the
    diagnostic runs with ``synchronous_commit = off``."""
    kind = name.removesuffix("_nosync")
    workers = [
        Worker.start(
            "hot",
            {
                "url": url,
                "schema": schema,
                "threads": HOT_THREADS,
                "duration": seconds,
                "kind": kind,
                "tenant": "hot",
                "budget_id": f"hot-{name}",
                "cap": CAP,
                "prefix": f"{name}-p{p}",  # idempotency keys unique across runs
                "slice": HOT_LEASE_SLICE,
                "sync_off": name.endswith("_nosync"),
            },
        )
        for p in range(HOT_PROCESSES)
    ]
    try:
        for worker in workers:
            worker.receive(timeout=60)
        for worker in workers:
            worker.send({"op": "go"})
        return [worker.receive(timeout=seconds + 60) for worker in workers]
    finally:
        for worker in workers:
            worker.close()


def _hot(url: str, schema: str, seconds: float, result: BenchResult) -> dict[str, Stats]:
    out: dict[str, Stats] = {}
    summary: dict[str, Any] = {}
    with open_store(url, migrate=False) as store:  # the rows the raw UPDATE needs
        for budget_id in ("hot-raw", "hot-raw_nosync"):
            seed = store.reserve(
                tenant="hot",
                idempotency_key=f"seed-{budget_id}",
                lines=(BudgetLine(budget_id, *KEY, "units", CAP, AMOUNT),),
                ttl_us=TTL_US,
            )
            assert seed.reservation is not None
            store.commit(seed.reservation.id)
    kinds = (
        ("pair", "reserve+commit"),
        ("lease", "reserve+commit from leases"),
        ("raw", "baseline: raw UPDATE"),
        # diagnostic: no commit waits for the disk, so the clients' CPU is the limit
        ("lease_nosync", "reserve+commit from leases, synchronous_commit off"),
        ("raw_nosync", "baseline: raw UPDATE, synchronous_commit off"),
    )
    for kind, label in kinds:
        answers = _hot_run(url, schema, kind, seconds)
        ops = sum(a["ops"] for a in answers)
        wall = max(a["wall_ns"] for a in answers)
        samples = [x for a in answers for x in a["samples"]]
        rate = sum(a["ops"] / (a["wall_ns"] / 1e9) for a in answers)
        errors = sum(a["errors"] for a in answers)
        refused = sum(a["refused"] for a in answers)
        if errors:
            first = next(a["first_error"] for a in answers if a["first_error"])
            result.problems.append(f"hot budget ({kind}): {errors} operations failed: {first}")
        if refused:
            result.problems.append(f"hot budget ({kind}): {refused} reservations refused")
        stats = summarise(
            f"postgres hot budget {label} ({HOT_PROCESSES}×{HOT_THREADS})", samples, wall
        )
        out[f"hot_{kind}"] = stats
        committed = sum(a["amount"] + a["warm_amount"] for a in answers)
        summary[kind] = {
            "ops": ops,
            "per_s": round(rate, 1),
            "errors": errors,
            "refused": refused,
            "committed_amount": committed,
            "seconds": seconds,
        }
        result.problems.extend(_check_hot(url, kind, committed))
    result.info["hot_budget"] = summary
    return out


def _check_hot(url: str, kind: str, committed: int) -> list[str]:
    """No overspend, no leak: spent (pairs) or reserved (raw) equals what was done."""
    with open_store(url, migrate=False) as store:
        rows = store.budget_rows(tenant="hot", budget_id=f"hot-{kind}")
    if len(rows) != 1:
        return [f"hot budget ({kind}): expected one budget row, found {len(rows)}"]
    row = rows[0]
    if kind.removesuffix("_nosync") in ("pair", "lease"):
        problems = []
        if row.spent != committed:
            problems.append(
                f"hot budget: spent {row.spent} != {committed}, the sum the workers committed"
            )
        if row.reserved != 0:
            problems.append(f"hot budget: {row.reserved} left reserved after every commit")
        return problems
    if row.reserved != committed:
        return [f"hot raw UPDATE: reserved {row.reserved} != {committed} applied"]
    return []


def run(calls: int | None = None, quick: bool = False) -> BenchResult:
    """``calls``: reserve+commit pairs per SQLite subject (PostgreSQL gets a tenth)."""
    sqlite_calls = calls or (QUICK_SQLITE_CALLS if quick else DEFAULT_SQLITE_CALLS)
    pg_calls = max(100, calls // 10) if calls else (QUICK_PG_CALLS if quick else DEFAULT_PG_CALLS)
    hot_seconds = QUICK_HOT_SECONDS if quick else HOT_SECONDS
    result = BenchResult(name="store-budget")
    result.info["calls"] = {"sqlite": sqlite_calls, "postgres": pg_calls, "rounds": 5}
    with sqlite_dir() as directory:
        lite = _sqlite(directory, sqlite_calls, result)
    order = ("pair", "reserve", "commit", "lease", "raw1", "rawpair", "raw", "raw2")
    stats = [lite[k] for k in order]
    stats += [lite[k] for k in ("joined_check", "writer_check", "joined_pair", "writer_pair")]
    ratios: dict[str, float] = {
        "sqlite_pair_over_raw_txn_p50": lite["pair"].p50_ns / lite["raw1"].p50_ns,
        "sqlite_pair_over_raw_pair_p50": lite["pair"].p50_ns / lite["rawpair"].p50_ns,
        "sqlite_guard_check_joined_over_writer_p50": lite["joined_check"].p50_ns
        / lite["writer_check"].p50_ns,
        "sqlite_guard_pair_joined_over_writer_p50": lite["joined_pair"].p50_ns
        / lite["writer_pair"].p50_ns,
        "sqlite_lease_pair_over_raw_txn_p50": lite["lease"].p50_ns / lite["raw1"].p50_ns,
        "sqlite_pair_over_raw_p50": lite["pair"].p50_ns / lite["raw"].p50_ns,
        "sqlite_pair_over_2raw_p50": lite["pair"].p50_ns / lite["raw2"].p50_ns,
    }
    targets = [
        Target(
            "sqlite reserve+commit p50 / 1 raw txn holding both writes",
            ratios["sqlite_pair_over_raw_txn_p50"],
            "<=",
            TARGET_SQLITE_PAIR_OVER_RAW_TXN,
            "×",
        )
    ]
    skipped = pg_unavailable()
    if skipped:
        result.notes.append(f"PostgreSQL parts skipped: {skipped}")
    else:
        result.info["postgres"] = pg_server_settings()
        pg = _postgres(pg_calls, hot_seconds, result)
        stats += [pg[k] for k in order]
        stats += [pg["hot_pair"], pg["hot_lease"], pg["hot_raw"]]
        stats += [pg["hot_lease_nosync"], pg["hot_raw_nosync"]]
        hot = result.info["hot_budget"]
        ratios |= {
            "postgres_pair_over_raw_txn_p50": pg["pair"].p50_ns / pg["raw1"].p50_ns,
            "postgres_pair_over_raw_pair_p50": pg["pair"].p50_ns / pg["rawpair"].p50_ns,
            "postgres_lease_pair_over_raw_txn_p50": pg["lease"].p50_ns / pg["raw1"].p50_ns,
            "postgres_pair_over_raw_p50": pg["pair"].p50_ns / pg["raw"].p50_ns,
            "postgres_pair_over_2raw_p50": pg["pair"].p50_ns / pg["raw2"].p50_ns,
            "postgres_hot_pairs_over_raw_updates_per_s": hot["pair"]["per_s"] / hot["raw"]["per_s"],
            "postgres_hot_leased_pairs_over_raw_updates_per_s": hot["lease"]["per_s"]
            / hot["raw"]["per_s"],
            "postgres_hot_leased_pairs_over_plain_pairs_per_s": hot["lease"]["per_s"]
            / hot["pair"]["per_s"],
            "postgres_hot_nosync_leased_pairs_over_raw_updates_per_s": hot["lease_nosync"]["per_s"]
            / hot["raw_nosync"]["per_s"],
        }
        targets.append(
            Target(
                f"postgres hot budget, leased pairs/s over raw UPDATEs/s "
                f"({HOT_PROCESSES}×{HOT_THREADS})",
                ratios["postgres_hot_leased_pairs_over_raw_updates_per_s"],
                ">=",
                TARGET_PG_HOT_LEASE_OVER_RAW,
                "×",
            )
        )
    result.stats = stats
    result.targets = targets
    result.info["ratios"] = {k: round(v, 2) for k, v in ratios.items()}
    result.notes.append(
        "ratios: " + ", ".join(f"{k} = {v:.2f}" for k, v in result.info["ratios"].items())
    )
    if "hot_budget" in result.info:
        hot = result.info["hot_budget"]
        result.notes.append(
            f"hot budget: {hot['pair']['per_s']:,.0f} reserve+commit pairs/s, "
            f"{hot['lease']['per_s']:,.0f} from leases, vs "
            f"{hot['raw']['per_s']:,.0f} raw UPDATEs/s ({HOT_PROCESSES} processes × "
            f"{HOT_THREADS} threads, {hot_seconds:g} s each)"
        )
    return result


# -- profile: where a SQLite reserve + commit spends its time -----------------------------------


class _TimedCursor:
    """A sqlite3 cursor that adds each statement's time to ``totals``."""

    def __init__(self, cursor: sqlite3.Cursor, totals: dict[str, list[int]]) -> None:
        self._cursor = cursor
        self._totals = totals

    @property
    def rowcount(self) -> int:
        return self._cursor.rowcount

    def execute(self, sql: str, params: Any = ()) -> _TimedCursor:
        t0 = time.perf_counter_ns()
        self._cursor.execute(sql, params)
        self._totals.setdefault(" ".join(sql.split()[:3]), []).append(time.perf_counter_ns() - t0)
        return self

    def executemany(self, sql: str, params: Any) -> _TimedCursor:
        self._cursor.executemany(sql, params)
        return self

    def fetchone(self) -> Any:
        return self._cursor.fetchone()

    def fetchall(self) -> list[Any]:
        return self._cursor.fetchall()

    def close(self) -> None:
        self._cursor.close()


class _TimedConnection:
    """A sqlite3 connection whose BEGIN / COMMIT and cursors are timed."""

    def __init__(self, conn: sqlite3.Connection, totals: dict[str, list[int]]) -> None:
        self._conn = conn
        self._totals = totals

    def execute(self, sql: str, params: Any = ()) -> sqlite3.Cursor:
        t0 = time.perf_counter_ns()
        cursor = self._conn.execute(sql, params)
        self._totals.setdefault(sql.split(maxsplit=1)[0], []).append(time.perf_counter_ns() - t0)
        return cursor

    def cursor(self) -> _TimedCursor:
        return _TimedCursor(self._conn.cursor(), self._totals)

    def rollback(self) -> None:
        self._conn.rollback()


def profile(pairs: int = 5_000, top: int = 15) -> str:
    """SQLite reserve + commit: each SQL statement's time (p50 and mean per pair),
    then a cProfile of the same loop (top functions by own time)."""
    import cProfile
    import io
    import pstats

    out = io.StringIO()
    with sqlite_dir() as directory, open_store(f"sqlite:///{directory / 'p.db'}") as store:
        pair = _pair_chunk(store, _line("store"), "profile", [])
        pair(500)
        totals: dict[str, list[int]] = {}
        real = store._connection()  # type: ignore[attr-defined]
        local = store._local  # type: ignore[attr-defined]
        kept = getattr(local, "usual", None)  # the thread's cursor for the usual statements
        local.conn, local.usual = _TimedConnection(real, totals), None
        samples, _ = pair(pairs)
        local.conn, local.usual = real, kept
        ordered = sorted(samples["pair"])
        print(
            f"{pairs:,} pairs: p50 {ordered[len(ordered) // 2] / 1000:.1f} µs, mean "
            f"{sum(ordered) / len(ordered) / 1000:.1f} µs (statements timed)",
            file=out,
        )
        statement_total = 0.0
        for name, values in totals.items():
            values.sort()
            per_pair = sum(values) / pairs / 1000
            statement_total += per_pair
            print(
                f"  {name:32} ×{len(values) / pairs:.0f}/pair  p50 "
                f"{values[len(values) // 2] / 1000:6.1f} µs  mean per pair {per_pair:6.1f} µs",
                file=out,
            )
        print(f"  {'all SQL, mean per pair':32} {statement_total:32.1f} µs", file=out)
        profiler = cProfile.Profile()
        profiler.enable()
        pair(pairs)
        profiler.disable()
        stream = io.StringIO()
        pstats.Stats(profiler, stream=stream).sort_stats("tottime").print_stats(top)
        out.write(stream.getvalue())
    return out.getvalue()
