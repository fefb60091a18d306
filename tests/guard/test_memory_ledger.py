"""The in-memory ledger of a guard without a store keeps the store's semantics: the
same random sequence of reservations, commits (within and past their headroom),
releases, settlements by strangers, reaps, reopenings and rate-limit slots gives the
same outcomes and the same counters on a ``MemoryLedger`` as on SQLite."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from interlock.errors import InterlockError
from interlock.ledger.memory import MemoryLedger
from interlock.store import BudgetLine, SqlStore, open_store

BUDGETS = (("tokens", "tokens", 500), ("dollars", "USD", 2_000_000))
AGENTS = ("bot", "other", None)


@pytest.fixture
def sqlite(tmp_path: Path, clock: Any) -> Iterator[SqlStore]:
    with open_store(f"sqlite:///{tmp_path / 'ledger.db'}", clock=clock) as store:
        yield store


def run_script(ledger: Any, clock: Any, seed: int) -> list[Any]:
    """A random script (the same for a seed), and what each step answered."""
    rng = random.Random(seed)
    made: list[tuple[str, str | None]] = []  # (reservation id, owner)
    seen: list[Any] = []
    for step in range(300):
        op = rng.random()
        try:
            if op < 0.4 or not made:
                lines = [
                    BudgetLine(b, rng.choice(["tenant", "agent:x"]), 0, unit, cap, amount, head)
                    for b, unit, cap in rng.sample(BUDGETS, rng.randint(1, 2))
                    for amount, head in [(rng.randint(1, 120), rng.choice([0, 10, 60]))]
                ]
                owner = rng.choice(AGENTS)
                outcome = ledger.reserve(
                    tenant="acme",
                    idempotency_key=f"k{rng.randint(0, step)}",
                    lines=lines,
                    ttl_us=rng.choice([1_000_000, 30_000_000]),
                    force=rng.random() < 0.05,
                    owner=owner,
                )
                if outcome.reservation is not None:
                    made.append((outcome.reservation.id, outcome.reservation.owner))
                    seen.append(("reserved", outcome.reservation.replayed))
                else:
                    refusal = outcome.refusal
                    seen.append(("refused", refusal.available, refusal.closed is not None))
            elif op < 0.65:
                rid, owner = rng.choice(made)
                by = owner if rng.random() < 0.9 else "stranger"
                actual = {b: rng.randint(0, 200) for b, _, _ in BUDGETS if rng.random() < 0.7}
                done = ledger.commit(rid, actual, by=by)
                seen.append(("committed", done.status.value, done.replayed))
            elif op < 0.8:
                rid, owner = rng.choice(made)
                done = ledger.release(rid, by=owner)
                seen.append(("released", done.status.value, done.replayed))
            elif op < 0.88:
                clock.advance(rng.choice([0.5, 2.0]))
                seen.append(("reaped", ledger.reap().reservations))
            elif op < 0.93:
                budget = rng.choice(BUDGETS)[0]
                lifted = ledger.reopen_budget(tenant="acme", budget_id=budget)
                seen.append(("reopened", [(c.scope_key, c.excess) for c in lifted]))
            else:
                rate = ledger.rate_acquire(
                    tenant="acme", limit_id="r", key="bot", interval_us=400_000, window_us=1_000_000
                )
                seen.append(("rate", rate.allowed, round(rate.retry_after, 3)))
        except InterlockError as exc:
            seen.append(("error", type(exc).__name__))
    rows = [
        (
            r.budget_id,
            r.scope_key,
            r.spent,
            r.reserved,
            r.headroom,
            r.overage,
            r.excess,
            r.closed_us,
        )
        for r in ledger.budget_rows()
    ]
    return [*seen, rows]


@pytest.mark.parametrize("seed", range(6))
def test_the_memory_ledger_answers_as_the_store_does(
    sqlite: SqlStore, clock: Any, seed: int
) -> None:
    start = clock.now
    in_store = run_script(sqlite, clock, seed)
    clock.now = start
    in_memory = run_script(MemoryLedger(clock=clock), clock, seed)
    assert in_memory == in_store
    kinds = {step[0] for step in in_store[:-1]}
    assert {"reserved", "refused", "committed", "released", "error"} <= kinds
