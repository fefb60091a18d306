"""Budget-lease torture, on SQLite and PostgreSQL: three replica processes each hold a
lease on one budget and hammer it from three threads (reserve, then commit within the
headroom, release, or abandon), running into its cap, while this process reaps
concurrently — and one replica is killed with SIGKILL mid-run, its lease and its
reservations in flight left behind (it stops after ``KILL_AFTER`` settled calls with one
reservation in flight per thread, and waits there for the kill; it runs those calls
before the other two start, so that a loaded machine cannot have it refused out of the
budget first, and is killed once they are under way). Afterwards one reaper pass
reclaims them.

What must hold (docs/adr/0012-budget-leases.md):

- at every moment anyone looked, ``spent + reserved + headroom <= cap`` (the leases are
  counted in ``reserved``): no lease let the budget pass its cap;
- after the reaper ran: no lease is left, nothing is reserved, ``spent <= cap``, and
  ``spent`` is exactly the sum of what the reservations were charged, one by one —
  committed ones their usage, expired ones their amount, released ones nothing: no
  unit lost, none counted twice;
- every call a replica reported done is recorded as it reported it (the killed one's
  too); the abandoned ones of the survivors were charged in full.
"""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from interlock.store import SqlStore, open_store

WORKER = Path(__file__).with_name("_lease_worker.py")
TENANT = "torture"
CAP = 3_000
SLICE = 200
REPLICAS = 3
SECONDS = 60.0  # at most: each replica stops once the cap refuses it
KILL_AFTER = 40  # calls the first replica settles before it holds, waiting for the kill


class Replica:
    def __init__(self, url: str, name: str, seed: int, hold_after: int = 0) -> None:
        self.name = name
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(WORKER),
                *(url, name, str(CAP), str(SLICE), str(SECONDS), str(seed), str(hold_after)),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        self.lines: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.messages: list[dict[str, Any]] = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.endswith("\n"):  # a line cut short by the kill proves nothing
                self.lines.put(json.loads(line))
        self.lines.put(None)

    def expect_ready(self) -> None:
        message = self.lines.get(timeout=60)
        assert message == {"ready": True}, self._stderr()

    def go(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def wait_until_holding(self) -> int:
        """Until it says it holds (its reservations in flight); how many it holds."""
        while True:
            message = self.lines.get(timeout=120)
            assert message is not None, f"{self.name} stopped before it held: {self._stderr()}"
            self.messages.append(message)
            if "holding" in message:
                return int(message["holding"])

    def wait_until_settled(self, calls: int) -> None:
        """Until it has reported ``calls`` settled calls (or finished)."""
        while sum("done" not in m and "holding" not in m for m in self.messages) < calls:
            message = self.lines.get(timeout=120)
            assert message is not None, f"{self.name} stopped: {self._stderr()}"
            self.messages.append(message)
            if "done" in message:
                return

    def collect(self) -> list[dict[str, Any]]:
        while (message := self.lines.get(timeout=120)) is not None:
            self.messages.append(message)
        return self.messages

    def _stderr(self) -> str:
        assert self.proc.stderr is not None
        return self.proc.stderr.read() if self.proc.poll() is not None else ""

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)


class Monitor(threading.Thread):
    """Samples the budget's counters, and reaps (as every guard's reaper does)."""

    def __init__(self, store: SqlStore) -> None:
        super().__init__(daemon=True)
        self.store = store
        self.samples: list[tuple[int, int, int]] = []
        self.most_leases = 0
        self.errors: list[BaseException] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        rounds = 0
        while not self.stopping.wait(0.01):
            try:
                for row in self.store.budget_rows(tenant=TENANT, budget_id="pool"):
                    self.samples.append((row.spent, row.reserved, row.headroom))
                with self.store.transaction(write=False) as cur:
                    cur.execute("SELECT COUNT(*) FROM budget_leases")
                    self.most_leases = max(self.most_leases, int(cur.fetchone()[0]))
                rounds += 1
                if rounds % 20 == 0:
                    self.store.reap()
            except BaseException as exc:
                self.errors.append(exc)
                return


def charged(store: SqlStore) -> tuple[int, dict[str, tuple[str, int | None]]]:
    """The sum charged over every reservation, and each one's (status, charge)."""
    with store.transaction(write=False) as cur:
        cur.execute(
            "SELECT id, status, actual, lease_id FROM reservations WHERE tenant = "
            + ("%s" if store.q("?") == "%s" else "?"),
            (TENANT,),
        )
        rows = cur.fetchall()
    total = 0
    each: dict[str, tuple[str, int | None]] = {}
    for reservation_id, status, actual, lease_id in rows:
        assert lease_id is None, f"{reservation_id} still names a lease"
        assert status != "reserved", f"{reservation_id} is still reserved"
        charge = None if actual is None else int(json.loads(actual)["pool"])
        total += charge or 0
        each[str(reservation_id)] = (str(status), charge)
    return total, each


def test_leases_across_three_replicas_and_a_kill_lose_nothing_and_never_pass_the_cap(
    store_url: str,
) -> None:
    store = open_store(store_url)  # migrates first; the real clock, as the replicas'
    try:
        replicas = [
            Replica(store_url, f"r{i}", seed=i, hold_after=KILL_AFTER if i == 0 else 0)
            for i in range(REPLICAS)
        ]
        for replica in replicas:
            replica.expect_ready()
        monitor = Monitor(store)
        monitor.start()
        # The first replica runs its KILL_AFTER calls before the others start: racing
        # them on a loaded machine, it could be refused out of the budget before it got
        # there (and held nothing to lose). It holds its lease and its calls in flight
        # while the other two run the budget to its cap, and is killed in their midst.
        replicas[0].go()
        in_flight = replicas[0].wait_until_holding()  # a lease, calls in flight
        for replica in replicas[1:]:
            replica.go()
        replicas[1].wait_until_settled(5)  # the others are under way: mid-run
        replicas[0].kill()
        messages = {replica.name: replica.collect() for replica in replicas}
        monitor.stopping.set()
        monitor.join(10)
        assert not monitor.errors, monitor.errors
        for name in ("r1", "r2"):
            assert messages[name][-1].get("done"), f"{name} did not finish: {messages[name][-1:]}"
        assert all("done" not in m for m in messages["r0"])
        settled_by_r0 = [m for m in messages["r0"] if "holding" not in m]
        assert len(settled_by_r0) >= KILL_AFTER, len(settled_by_r0)

        # the cap held at every sample, the leases counted as reserved
        assert monitor.samples
        assert monitor.most_leases >= 2, "the replicas did not hold leases at once"
        over = [s for s in monitor.samples if s[0] + s[1] + s[2] > CAP]
        assert not over, over[:5]

        # one reaper pass, far enough ahead that the dead replica's lease has expired
        store.reap(now=store.clock() + 3_600_000_000)
        with store.transaction(write=False) as cur:
            cur.execute("SELECT COUNT(*) FROM budget_leases")
            assert cur.fetchone()[0] == 0
        (row,) = store.budget_rows(tenant=TENANT, budget_id="pool")
        assert (row.reserved, row.headroom, row.excess) == (0, 0, 0)
        assert row.spent <= CAP
        total, each = charged(store)
        assert row.spent == total  # no unit lost, none counted twice

        # the cap was reached: the survivors ran until it refused them
        done = [m for name in ("r1", "r2") for m in messages[name] if m.get("done")]
        assert all(d["refused"] >= 3 for d in done), done

        # every call reported done is recorded as reported
        for replica_messages in messages.values():
            for m in replica_messages:
                if "committed" in m:
                    assert each[m["committed"]] == ("committed", m["used"]), m
                elif "released" in m:
                    assert each[m["released"]] == ("released", None), m
                elif "abandoned" in m:
                    assert each[m["abandoned"]] == ("expired", m["amount"]), m
        # what was in flight at the kill was charged in full, as the abandoned ones
        abandoned = sum("abandoned" in m for ms in messages.values() for m in ms)
        expired = sum(status == "expired" for status, _ in each.values())
        assert in_flight >= 1 and expired == abandoned + in_flight, (in_flight, expired)
    finally:
        store.close()
