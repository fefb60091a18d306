"""Subprocesses for the store's cross-process tests.

Run by path, ``python tests/store/_workers.py COMMAND URL ...`` (the ``tests`` folder is
not a package; ``interlock`` comes from the installed package). Each command speaks JSON
lines on stdout, one message per line, written whole and flushed at once; commands that
must start together say ``{"ready": ...}`` and wait for ``go`` on stdin.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from interlock.store import AuditWriter, BudgetLine, SqlStore, open_store

HOUR_US = 3_600_000_000
_print_lock = threading.Lock()


def emit(**message: Any) -> None:
    line = json.dumps(message) + "\n"
    with _print_lock:
        sys.stdout.write(line)
        sys.stdout.flush()


def ready_then_wait_for_go(**about: Any) -> None:
    emit(ready=True, **about)
    if sys.stdin.readline().strip() != "go":
        raise SystemExit("expected 'go' on stdin")


def stores_for(url: str, threads: int, per_thread: bool) -> list[SqlStore]:
    if per_thread:
        return [open_store(url) for _ in range(threads)]
    return [open_store(url)] * threads


def run_threads(count: int, target: Callable[[int], None]) -> None:
    errors: list[str] = []

    def guarded(index: int) -> None:
        try:
            target(index)
        except BaseException:
            errors.append(traceback.format_exc())

    threads = [threading.Thread(target=guarded, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise SystemExit("\n".join(errors))


def resolve(store: SqlStore, tenant: str, intent_hash: str) -> Any:
    return store.resolve_approval(
        tenant=tenant,
        intent_hash=intent_hash,
        action={"name": "refund"},
        context={"agent": "bot"},
        rule_ids=["refunds"],
        reason="large refund",
        requested_by="bot",
        ttl_us=HOUR_US,
        grant_ttl_us=HOUR_US,
    )


# -- commands -----------------------------------------------------------------------------


def claim_race(args: argparse.Namespace) -> None:
    """Every thread resolves the same (approved) intent at once; each says what it got."""
    stores = stores_for(args.url, args.threads, args.store_per_thread)
    barrier = threading.Barrier(args.threads)
    ready_then_wait_for_go()

    def one(index: int) -> None:
        barrier.wait(30)
        outcome = resolve(stores[index], args.tenant, args.intent)
        emit(state=outcome.state.value, id=outcome.record.id)

    run_threads(args.threads, one)
    for store in set(stores):
        store.close()


def approve(args: argparse.Namespace) -> None:
    """Approve one request ``delay`` seconds after ``go``."""
    store = open_store(args.url)
    ready_then_wait_for_go()
    time.sleep(args.delay)
    record = store.approve(args.id, by=args.by)
    emit(approved=record.id, status=record.status.value)
    store.close()


def hammer(args: argparse.Namespace) -> None:
    """Reserve, commit or release, and replay both, in a loop on one budget; write
    every outcome seen to ``args.out`` (JSON lines) at the end."""
    stores = stores_for(args.url, args.threads, args.store_per_thread)
    barrier = threading.Barrier(args.threads)
    seen: list[list[dict[str, Any]]] = [[] for _ in range(args.threads)]
    ready_then_wait_for_go()

    def loop(index: int) -> None:
        store, log = stores[index], seen[index]
        rng = random.Random(args.seed * 1000 + index)
        barrier.wait(30)
        for i in range(args.iterations):
            key = f"{args.worker_id}-{index}-{i}"
            amount = rng.randint(1, 30)
            # headroom 4: the commits below run at most 4 past the reservation
            line = BudgetLine(args.budget, "global", 0, "units", args.cap, amount, 4)
            outcome = store.reserve(
                tenant=args.tenant, idempotency_key=key, lines=[line], ttl_us=HOUR_US
            )
            reservation = outcome.reservation
            if reservation is None:
                log.append({"op": "refused", "key": key, "amount": amount})
                continue
            log.append({"op": "reserved", "id": reservation.id, "key": key, "amount": amount})
            if rng.random() < 0.3:
                again = store.reserve(
                    tenant=args.tenant, idempotency_key=key, lines=[line], ttl_us=HOUR_US
                )
                log.append(
                    {
                        "op": "replayed_reserve",
                        "id": reservation.id,
                        "replay_id": again.reservation.id if again.reservation else None,
                        "replayed": bool(again.reservation and again.reservation.replayed),
                    }
                )
            if rng.random() < 0.6:
                actual = max(0, amount + rng.randint(-amount, 4))  # sometimes above it
                done = store.commit(reservation.id, {args.budget: actual})
                assert done.actual is not None
                log.append(
                    {
                        "op": "committed",
                        "id": reservation.id,
                        "amount": amount,
                        "actual": done.actual[args.budget],
                    }
                )
                if rng.random() < 0.3:
                    again_done = store.commit(reservation.id, {args.budget: actual + 7})
                    log.append(
                        {
                            "op": "replayed_commit",
                            "id": reservation.id,
                            "replayed": again_done.replayed,
                            "actual": (again_done.actual or {}).get(args.budget),
                        }
                    )
            else:
                store.release(reservation.id)
                log.append({"op": "released", "id": reservation.id, "amount": amount})

    run_threads(args.threads, loop)
    with open(args.out, "w", encoding="utf-8") as out:
        for log in seen:
            for entry in log:
                out.write(json.dumps(entry) + "\n")
    emit(done=sum(len(log) for log in seen))
    for store in set(stores):
        store.close()


def reserve_and_hang(args: argparse.Namespace) -> None:
    """Reserve, say the reservation's id, then hang until killed."""
    store = open_store(args.url)
    line = BudgetLine(args.budget, "global", 0, "units", args.cap, args.amount)
    outcome = store.reserve(
        tenant=args.tenant, idempotency_key="hang-1", lines=[line], ttl_us=args.ttl_us
    )
    assert outcome.reservation is not None, outcome.refusal
    emit(id=outcome.reservation.id, expires_us=outcome.reservation.expires_us)
    time.sleep(600)


def torture(args: argparse.Namespace) -> None:
    """One agent of the budget torture: model calls through a Guard on the store, with
    random estimates (none, zero, some), each allowed one committed with a random real
    usage (within its max_overage, or now and then past it) or released. Before each
    settlement it writes what it is about to report to ``args.out`` (a line, flushed):
    the client's own log, which a kill -9 cannot take back."""
    from interlock import Action, Context, Guard, Verdict
    from interlock.ledger.usage import Usage
    from interlock.policy import load_policy

    policy = load_policy(args.policy)
    (spec,) = policy.budgets
    rng = random.Random(args.seed)
    guard = Guard(
        policy,
        store=args.url,
        context=Context(tenant=args.tenant, agent=args.worker_id),
        reservation_ttl=args.ttl,
        reap_interval=None,
    )
    log = open(args.out, "a", encoding="utf-8")  # noqa: SIM115 - kept open until killed
    ready_then_wait_for_go()
    deadline = time.monotonic() + args.seconds
    calls = 0
    while time.monotonic() < deadline:
        calls += 1
        shape = rng.random()
        if shape < 0.2:
            arguments: dict[str, Any] = {}  # no estimate: the budget's default
        elif shape < 0.35:
            arguments = {"input_tokens": 0, "max_output_tokens": 0}  # zero: the same
        else:
            arguments = {
                "messages": [{"role": "user", "content": "x" * rng.randint(0, 200)}],
                "max_tokens": rng.randint(1, 120),
            }
        decision = guard.check(Action.llm("m", arguments=arguments))
        if decision.verdict is not Verdict.ALLOW:
            if decision.verdict is Verdict.UNDETERMINED:
                raise SystemExit(f"undetermined: {decision.reason}")
            time.sleep(0.002)
            continue
        assert decision.reservation is not None
        ((_, amount, _),) = decision.reservation.amounts
        headroom = spec.headroom(amount)
        fate = rng.random()
        if fate < 0.1:
            used = None  # the call failed: released
        elif fate < 0.13:
            used = amount + headroom + rng.randint(1, 40)  # past its bound: excess
        else:
            used = rng.randint(0, amount + headroom)  # above the reservation, within
        entry = {"id": decision.reservation.id, "amount": amount, "headroom": headroom}
        log.write(json.dumps({**entry, "used": used}) + "\n")
        log.flush()
        if used is None:
            guard.release(decision)
        else:
            guard.commit(decision, Usage(used, 0), model="m")
        log.write(json.dumps({"settled": decision.reservation.id}) + "\n")
        log.flush()
    guard.close()
    emit(done=calls)


def audit_writer(args: argparse.Namespace) -> None:
    """Threads write records through one group-commit writer, forever; each record's
    (tenant, seq, marker) is printed the moment ``write_record`` returns it."""
    store = open_store(args.url)
    writer = AuditWriter(store, durability="process")
    tenants = args.tenants.split(",")

    def loop(index: int) -> None:
        tenant = tenants[index % len(tenants)]
        for n in range(1_000_000):
            marker = f"m-{index}-{n}"
            seq = writer.write_record(tenant, "note", {"marker": marker, "thread": index})
            emit(tenant=tenant, seq=seq, marker=marker)

    run_threads(args.threads, loop)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="_workers")
    commands = parser.add_subparsers(dest="command", required=True)

    race = commands.add_parser("claim-race")
    race.add_argument("url")
    race.add_argument("tenant")
    race.add_argument("intent")
    race.add_argument("--threads", type=int, default=5)
    race.add_argument("--store-per-thread", action="store_true")
    race.set_defaults(run=claim_race)

    approver = commands.add_parser("approve")
    approver.add_argument("url")
    approver.add_argument("id")
    approver.add_argument("--by", default="alice")
    approver.add_argument("--delay", type=float, default=0.2)
    approver.set_defaults(run=approve)

    hammering = commands.add_parser("hammer")
    hammering.add_argument("url")
    hammering.add_argument("out")
    hammering.add_argument("--worker-id", required=True)
    hammering.add_argument("--tenant", default="acme")
    hammering.add_argument("--budget", default="spend")
    hammering.add_argument("--cap", type=int, default=1000)
    hammering.add_argument("--threads", type=int, default=4)
    hammering.add_argument("--iterations", type=int, default=50)
    hammering.add_argument("--seed", type=int, default=0)
    hammering.add_argument("--store-per-thread", action="store_true")
    hammering.set_defaults(run=hammer)

    hang = commands.add_parser("reserve-and-hang")
    hang.add_argument("url")
    hang.add_argument("--tenant", default="acme")
    hang.add_argument("--budget", default="spend")
    hang.add_argument("--cap", type=int, default=1000)
    hang.add_argument("--amount", type=int, default=100)
    hang.add_argument("--ttl-us", type=int, default=1_000_000)
    hang.set_defaults(run=reserve_and_hang)

    tortured = commands.add_parser("torture")
    tortured.add_argument("url")
    tortured.add_argument("policy")
    tortured.add_argument("out")
    tortured.add_argument("--worker-id", required=True)
    tortured.add_argument("--tenant", default="torture")
    tortured.add_argument("--seconds", type=float, default=4.0)
    tortured.add_argument("--ttl", type=float, default=120.0)
    tortured.add_argument("--seed", type=int, default=0)
    tortured.set_defaults(run=torture)

    auditing = commands.add_parser("audit-writer")
    auditing.add_argument("url")
    auditing.add_argument("--threads", type=int, default=4)
    auditing.add_argument("--tenants", default="acme,globex")
    auditing.set_defaults(run=audit_writer)

    args = parser.parse_args(argv)
    args.run(args)


if __name__ == "__main__":
    main()
