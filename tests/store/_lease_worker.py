"""One replica of the budget-lease torture (``test_budget_lease_torture.py``).

Run by path: ``python tests/store/_lease_worker.py URL NAME CAP SLICE SECONDS SEED [HOLD]``.
Opens its own store, leases the budget ``pool``, and runs threads that reserve
random amounts (some with headroom), then commit (some past the reservation, within
its headroom), release, or abandon them, until the budget has refused each thread a
few times (or ``SECONDS`` pass). Says ``{"ready": true}`` and waits for
``go``; then one JSON line per settled call, written whole and flushed *after* the
store returned (so a line is proof the call was done), and ``{"done": ...}`` after
closing the store (which returns its leases).

With ``HOLD`` > 0 (the replica the test kills), once ``HOLD`` calls are settled each
thread takes one more reservation and keeps it in flight, and when all of them have
stopped it says ``{"holding": n}`` (``n`` reservations in flight) and never finishes:
it is killed holding its lease and those reservations, whatever the machine's load (a
replica that merely ran on could finish before the kill reached it).
"""

from __future__ import annotations

import json
import random
import sys
import threading
import time
from typing import Any

from interlock.store import BudgetLine, open_store

TENANT = "torture"
THREADS = 3
REFUSALS = 5  # a thread stops once the budget refused it this often (or at SECONDS)
TTL_US = 60_000_000
_print = threading.Lock()


def emit(**message: Any) -> None:
    line = json.dumps(message) + "\n"
    with _print:
        sys.stdout.write(line)
        sys.stdout.flush()


def main() -> None:
    url, name, cap, lease_slice, seconds, seed = sys.argv[1:7]
    hold_after = int(sys.argv[7]) if len(sys.argv) > 7 else 0
    store = open_store(url)
    store.lease_budgets({"pool": int(lease_slice)}, ttl=2.0, idle=0.3, max_age=1.0)
    emit(ready=True)
    if sys.stdin.readline().strip() != "go":
        raise SystemExit("expected 'go'")
    stop = time.monotonic() + float(seconds)
    counts = {"reserved": 0, "refused": 0, "settled": 0, "in_flight": 0}
    lock = threading.Lock()
    holding = threading.Barrier(THREADS, action=lambda: emit(holding=counts["in_flight"]))

    def hold_forever() -> None:
        holding.wait()
        threading.Event().wait()  # until the kill

    def agent(index: int) -> None:
        rng = random.Random(f"{seed}-{index}")
        n = refused = 0
        while time.monotonic() < stop and refused < REFUSALS:
            n += 1
            amount = rng.randint(1, 20)
            headroom = rng.choice((0, 0, amount // 2))
            line = BudgetLine("pool", "all", 0, "tokens", int(cap), amount, headroom)
            outcome = store.reserve(
                tenant=TENANT,
                idempotency_key=f"{name}-{index}-{n}",
                lines=(line,),
                ttl_us=TTL_US,
                owner=f"{name}-{index}",
            )
            held = outcome.reservation
            if hold_after and counts["settled"] >= hold_after:
                if held is not None:
                    with lock:
                        counts["in_flight"] += 1
                hold_forever()
            if held is None:
                refused += 1
                with lock:
                    counts["refused"] += 1
                time.sleep(0.002)
                continue
            with lock:
                counts["reserved"] += 1
            roll = rng.random()
            if roll < 0.6:
                used = rng.randint(0, amount + headroom)
                store.commit(held.id, {"pool": used}, by=f"{name}-{index}")
                emit(committed=held.id, used=used)
            elif roll < 0.85:
                store.release(held.id, by=f"{name}-{index}")
                emit(released=held.id)
            else:
                emit(abandoned=held.id, amount=amount)  # the reaper's, in the end
            with lock:
                counts["settled"] += 1
        if hold_after:
            hold_forever()

    threads = [threading.Thread(target=agent, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    store.close()
    emit(done=True, reserved=counts["reserved"], refused=counts["refused"])


if __name__ == "__main__":
    main()
