"""What the store benchmarks run in other processes: ``python -m bench.store_workers
<mode> <json args>``. Each worker opens its own store (or raw connection), prints
``{"ready": true}``, then takes one JSON command per line on stdin and answers with one
JSON object per line on stdout.

Modes:

* ``hot`` — N threads hammer one budget, either with reserve + commit pairs through the
  store API (``kind: pair``; ``kind: lease``: the same, served from a budget lease of
  ``slice`` units this process holds) or with the raw conditional UPDATE (``kind: raw``), from
  the ``go`` command for ``duration`` seconds; answers with counts, the committed sum
  and every operation's latency.
* ``approver`` — on ``approve``: sleeps ``delay`` seconds, reads the wall clock, calls
  ``store.approve(id)``; answers with the clock reading taken just before the call.
* ``notifier`` — on ``notify``: the same, with a bare ``NOTIFY channel, payload`` on an
  autocommit psycopg connection (the floor for the approval wake-up).
"""

from __future__ import annotations

import json
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

__all__ = ["main"]

RAW_RESERVE = (
    "UPDATE budgets SET reserved = reserved + %s WHERE tenant = %s AND budget_id = %s "
    "AND scope_key = %s AND window_start = %s AND spent + reserved + %s <= cap"
)


def _say(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def _commands() -> Any:
    for line in sys.stdin:
        command = json.loads(line)
        if command.get("op") == "quit":
            return
        yield command


@dataclass
class _Tally:
    """One hot-budget thread's counts."""

    ops: int = 0
    refused: int = 0
    amount: int = 0
    errors: int = 0
    error: str | None = None
    samples: list[int] = field(default_factory=list)


def hot(args: dict[str, Any]) -> None:
    from interlock.store import BudgetLine, open_store

    threads: int = args["threads"]
    duration_ns = int(args["duration"] * 1e9)
    tenant, budget_id, cap = args["tenant"], args["budget_id"], args["cap"]
    prefix = args["prefix"]
    store = None
    connections: list[Any] = []
    url = args["url"]
    if args.get("sync_off"):  # the CPU-bound regime: no wait for the disk (diagnostic)
        url += "&options=-c%20synchronous_commit%3Doff"
    if args["kind"] in ("pair", "lease"):
        store = open_store(url, migrate=False)
        if args["kind"] == "lease":  # this process serves the budget from its own lease
            store.lease_budgets({budget_id: args.get("slice", 5_000)})
    else:
        from bench.store import pg_connect

        connections = [pg_connect(args["schema"]) for _ in range(threads)]
        if args.get("sync_off"):
            for conn in connections:
                conn.execute("SET synchronous_commit = off")

    def operation(thread: int, i: int, amount: int) -> bool:
        """One reservation (and its commit); False when the budget refused it."""
        if store is not None:
            line = BudgetLine(budget_id, "all", 0, "units", cap, amount)
            outcome = store.reserve(
                tenant=tenant,
                idempotency_key=f"{prefix}-{thread}-{i}",
                lines=[line],
                ttl_us=600_000_000,
            )
            if outcome.reservation is None:
                return False
            store.commit(outcome.reservation.id)
            return True
        cur = connections[thread].execute(
            RAW_RESERVE, (amount, tenant, budget_id, "all", 0, amount)
        )
        return bool(cur.rowcount == 1)

    state = [_Tally() for _ in range(threads)]
    warm = 0
    for thread in range(threads):  # untimed: connections, prepared statements
        for i in range(5):
            amount = 1 + i % 10
            if operation(thread, -1 - i, amount):
                warm += amount
    _say({"ready": True})
    go = sys.stdin.readline()
    if json.loads(go).get("op") != "go":
        return
    clock = time.perf_counter_ns
    began = clock()
    deadline = began + duration_ns

    def run(thread: int) -> None:
        mine = state[thread]
        i = 0
        while clock() < deadline:
            amount = 1 + i % 10
            t0 = clock()
            try:
                ok = operation(thread, i, amount)
            except Exception as exc:
                mine.errors += 1
                mine.error = mine.error or f"{type(exc).__name__}: {exc}"
                i += 1
                continue
            mine.samples.append(clock() - t0)
            if ok:
                mine.ops += 1
                mine.amount += amount
            else:
                mine.refused += 1
            i += 1

    workers = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    wall = clock() - began
    _say(
        {
            "wall_ns": wall,
            "ops": sum(s.ops for s in state),
            "refused": sum(s.refused for s in state),
            "errors": sum(s.errors for s in state),
            "first_error": next((s.error for s in state if s.error), None),
            "amount": sum(s.amount for s in state),
            "warm_amount": warm,
            "samples": [x for s in state for x in s.samples],
        }
    )
    if store is not None:
        store.close()
    for conn in connections:
        conn.close()


def approver(args: dict[str, Any]) -> None:
    from interlock.store import open_store

    store = open_store(args["url"], migrate=False)
    _say({"ready": True})
    try:
        for command in _commands():
            time.sleep(command["delay"])
            t0 = time.time_ns()
            store.approve(command["id"], by="bench-approver", reason="benchmark")
            t1 = time.time_ns()
            _say({"t0_ns": t0, "t1_ns": t1})
    finally:
        store.close()


def notifier(args: dict[str, Any]) -> None:
    import psycopg
    from psycopg import sql

    conn = psycopg.connect(args["url"], autocommit=True, connect_timeout=5)
    _say({"ready": True})
    try:
        for command in _commands():
            statement = sql.SQL("NOTIFY {}, {}").format(
                sql.Identifier(command["channel"]), sql.Literal(command["payload"])
            )
            time.sleep(command["delay"])
            t0 = time.time_ns()
            conn.execute(statement)
            t1 = time.time_ns()
            _say({"t0_ns": t0, "t1_ns": t1})
    finally:
        conn.close()


MODES = {"hot": hot, "approver": approver, "notifier": notifier}


def main(argv: list[str]) -> int:
    mode, raw = argv[1], argv[2]
    try:
        MODES[mode](json.loads(raw))
    except Exception as exc:
        _say({"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()})
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
