"""What outcome records cost a guarded call: ``python -m bench.outcomes BEFORE AFTER``.

``protect`` over a SQLite store (durability ``process``), the same sync body called
``--calls`` times, in a fresh interpreter per round, rounds alternating between two
source trees (``BEFORE``: one without outcome records, e.g. main's ``src``; ``AFTER``:
this one's) so both see the same load. Reported per call: wall time (median of the
rounds) and CPU time (it does not drift with the machine's load), and the ratios.

    flock /tmp/interlock-bench.lock python -m bench.outcomes /work/main/src src
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

_ROUND = r"""
import json, sys, tempfile, time, os
from interlock import Context, Guard, load_policy_text
from interlock.store import open_store
POLICY = '''
version: 1
default: deny
rules:
  - id: ok
    decision: allow
    reason: fine
    name: search
'''
calls = int(sys.argv[1])
with tempfile.TemporaryDirectory() as tmp:
    store = open_store(f"sqlite:///{tmp}/b.db")
    guard = Guard(load_policy_text(POLICY), store=store,
                  context=Context(tenant="acme", agent="a"), reap_interval=None)

    @guard.protect(name="search")
    def search(query: str) -> str:
        return "result for " + query

    for i in range(calls // 10):
        search("warm")
    cpu, wall = time.process_time_ns(), time.perf_counter_ns()
    for i in range(calls):
        search("q")
    wall, cpu = time.perf_counter_ns() - wall, time.process_time_ns() - cpu
    guard.close()
    rows = sum(1 for _ in store.audit_rows())
print(json.dumps({"wall_us": wall / calls / 1000, "cpu_us": cpu / calls / 1000, "rows": rows}))
"""


def round_(src: str, calls: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": os.path.abspath(src)}
    done = subprocess.run(
        [sys.executable, "-c", _ROUND, str(calls)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    results: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    for _ in range(args.rounds):
        results["before"].append(round_(args.before, args.calls))
        results["after"].append(round_(args.after, args.calls))
    summary = {}
    for name, rounds in results.items():
        summary[name] = {
            "wall_us": statistics.median(r["wall_us"] for r in rounds),
            "cpu_us": statistics.median(r["cpu_us"] for r in rounds),
            "rows_per_call": rounds[0]["rows"] / (args.calls * 1.1),
        }
    summary["ratio"] = {
        "wall": summary["after"]["wall_us"] / summary["before"]["wall_us"],
        "cpu": summary["after"]["cpu_us"] / summary["before"]["cpu_us"],
    }
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
