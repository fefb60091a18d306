"""What a protected call's start record costs before its body:
``python -m bench.outcome_starts BEFORE AFTER``.

Issue 13: the start record (``tool_invoke`` / ``llm_input``) of an allowed call is
durable before the body runs. Written in a transaction of its own it is a second
durable write after the decision's; joined to the decision's commit (the reservation's
transaction when a budget covers the call) it is none. Subjects, each on a SQLite store
(durability ``process``, the default), timed call by call up to the moment the body
starts (the *entry*) and whole:

* ``llm_call`` — ``with guard.llm_call(model, estimate=...)`` under a token budget:
  decision, reservation, ``llm_input``; the exit commits the usage;
* ``protect budgeted`` — a protected tool a budget covers;
* ``protect`` — a protected tool nothing budgets (the control: joined already before);
* ``adapter`` — ``run_settled`` after the adapter's check (``decide_starting`` where the
  tree has it), a tool nothing budgets, as every framework adapter runs a tool.

Each round is a fresh interpreter running every subject over one source tree; rounds
alternate between the two trees (``BEFORE``: e.g. main's ``src``; ``AFTER``: this
one's), so both see the same load. Reported per subject and tree: the entry's p50 and
the whole call's p50 (medians over rounds), CPU per whole call, and the store's write
transactions per call (``SqliteStore._writes``), with the ratios AFTER / BEFORE.

    flock /tmp/interlock-bench.lock python -m bench.outcome_starts /work/main/src src
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

_ROUND = r"""
import gc, json, sys, tempfile, time
from interlock import Action, Context, Guard, load_policy_text
from interlock.ledger.usage import Usage
from interlock.store import open_store
try:
    from interlock.adapters.base import decide_starting
except ImportError:  # the tree before: the adapter's check, then run_settled
    decide_starting = None
from interlock.adapters.base import run_settled

POLICY = '''
version: 1
default: deny
pricing:
  currency: USD
  models:
    "m": {input: 2, output: 10}
budgets:
  - id: tokens
    limit: 1000000000000
    unit: tokens
    scope: agent
    kind: llm
  - id: spend
    limit: 1000000000
    unit: USD
    scope: agent
    kind: tool
    name: "paid_*"
rules:
  - id: models
    decision: allow
    reason: fine
    kind: llm
    name: m
  - id: tools
    decision: allow
    reason: fine
    kind: tool
    name: ["search", "paid_search"]
'''
calls = int(sys.argv[1])
out = {}
now = time.perf_counter_ns
with tempfile.TemporaryDirectory() as tmp:
    store = open_store(f"sqlite:///{tmp}/b.db")
    guard = Guard(load_policy_text(POLICY), store=store,
                  context=Context(tenant="acme", agent="a"), reap_interval=None)
    mark = [0]

    def entered():
        mark[0] = now()

    @guard.protect(name="search")
    def search(query: str) -> str:
        entered()
        return "r"

    @guard.protect(name="paid_search")
    def paid_search(query: str, est_cost: float) -> str:
        entered()
        return "r"

    def llm():
        with guard.llm_call("m", estimate=Usage(100, 50)) as call:
            entered()
            call.record(Usage(40, 2))

    action = Action.tool("search", {"query": "q"})

    def adapter():
        if decide_starting is None:
            decision, started = guard.check(action), False
            run_settled(guard, decision, entered, ("search", "{}"))
        else:
            decision, started = decide_starting(guard, "search", lambda: guard.check(action))
            run_settled(guard, decision, entered, ("search", "{}"), started=started)

    subjects = {
        "llm_call": llm,
        "protect budgeted": lambda: paid_search("q", 0.001),
        "protect": lambda: search("q"),
        "adapter": adapter,
    }
    only = sys.argv[2].split(",") if len(sys.argv) > 2 and sys.argv[2] else list(subjects)
    subjects = {name: subjects[name] for name in only}
    entry = {name: [] for name in subjects}
    whole = {name: [] for name in subjects}
    cpu = {name: 0 for name in subjects}
    writes = {name: 0 for name in subjects}
    for fn in subjects.values():
        for _ in range(calls // 10):
            fn()
    guard.audit.flush()
    gc.collect()
    gc.disable()
    for i in range(calls):
        for name, fn in subjects.items():
            w = store._writes
            c = time.process_time_ns()
            t = now()
            fn()
            end = now()
            cpu[name] += time.process_time_ns() - c
            writes[name] += store._writes - w
            entry[name].append(mark[0] - t)
            whole[name].append(end - t)
    gc.enable()
    guard.close()
    ok = store.verify_audit().ok if len(sys.argv) <= 3 else True  # (not under callgrind)
    for name in subjects:
        out[name] = {
            "entry_us": statistics.median(entry[name]) / 1000,
            "whole_us": statistics.median(whole[name]) / 1000,
            "cpu_us": cpu[name] / calls / 1000,
            "writes": writes[name] / calls,
        }
    out["_verified"] = ok
print(json.dumps(out))
"""
_ROUND = "import statistics\n" + _ROUND


def round_(src: str, calls: int, only: str = "") -> dict[str, dict[str, float]]:
    env = {**os.environ, "PYTHONPATH": os.path.abspath(src)}
    done = subprocess.run(
        [sys.executable, "-c", _ROUND, str(calls), only],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"a round over {src} failed:\n{done.stderr}")
    result: dict[str, dict[str, float]] = json.loads(done.stdout.strip().splitlines()[-1])
    if not result.pop("_verified"):
        raise SystemExit(f"the audit chain of a round over {src} did not verify")
    return result


def callgrind(src: str, only: str, calls: tuple[int, int] = (50, 250)) -> float:
    """Instructions per call of one subject over ``src``: two runs under callgrind
    (``calls`` timed calls each, a tenth as many warm-up calls), differenced, so that
    start-up and import cancel out."""
    import re
    import tempfile

    env = {**os.environ, "PYTHONPATH": os.path.abspath(src)}
    counts = []
    for n in calls:
        with tempfile.TemporaryDirectory() as tmp:
            done = subprocess.run(
                [
                    "valgrind",
                    "--tool=callgrind",
                    f"--callgrind-out-file={tmp}/out",
                    sys.executable,
                    "-c",
                    _ROUND,
                    str(n),
                    only,
                    "callgrind",
                ],
                env=env,
                capture_output=True,
                text=True,
                check=False,
            )
            found = re.search(r"Collected : (\d+)", done.stderr)
            if done.returncode != 0 or found is None:
                raise SystemExit(f"callgrind over {src} failed:\n{done.stderr[-2000:]}")
            counts.append(int(found.group(1)))
    return (counts[1] - counts[0]) / ((calls[1] - calls[0]) * 1.1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--calls", type=int, default=1500)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--only",
        default="",
        help="comma-separated subjects: llm_call, protect budgeted, protect, adapter",
    )
    parser.add_argument(
        "--callgrind",
        action="store_true",
        help="instructions per call of each subject named by --only, instead of timing",
    )
    args = parser.parse_args()
    if args.callgrind:
        for name in (args.only or "llm_call,protect budgeted,protect,adapter").split(","):
            before = callgrind(args.before, name)
            after = callgrind(args.after, name)
            print(
                f"{name:<20} instructions a call: {before / 1000:8.1f}k -> {after / 1000:8.1f}k"
                f" ({after / before:.3f}x)",
                flush=True,
            )
        return
    rounds: dict[str, list[dict[str, dict[str, float]]]] = {"before": [], "after": []}
    for _ in range(args.rounds):
        rounds["before"].append(round_(args.before, args.calls, args.only))
        rounds["after"].append(round_(args.after, args.calls, args.only))
    summary: dict[str, dict[str, dict[str, float]]] = {}
    for name in rounds["before"][0]:
        row: dict[str, dict[str, float]] = {}
        for tree, got in rounds.items():
            row[tree] = {
                key: round(statistics.median(r[name][key] for r in got), 2)
                for key in ("entry_us", "whole_us", "cpu_us", "writes")
            }
            row[tree]["entry_us_runs"] = [round(r[name]["entry_us"], 1) for r in got]  # type: ignore[assignment]
        row["ratio"] = {
            key: round(row["after"][key] / row["before"][key], 3)
            for key in ("entry_us", "whole_us", "cpu_us")
        }
        summary[name] = row
    print(json.dumps(summary, indent=2))
    print(
        f"{'subject':<20} {'entry p50 before/after µs':>27} {'ratio':>6}"
        f" {'whole p50 before/after':>24} {'ratio':>6} {'CPU ratio':>9} {'writes':>11}"
    )
    for name, row in summary.items():
        b, a, r = row["before"], row["after"], row["ratio"]
        print(
            f"{name:<20} {b['entry_us']:>13.1f} / {a['entry_us']:<11.1f} {r['entry_us']:>6.3f}"
            f" {b['whole_us']:>11.1f} / {a['whole_us']:<10.1f} {r['whole_us']:>6.3f}"
            f" {r['cpu_us']:>9.3f} {b['writes']:>5.2f}/{a['writes']:<5.2f}"
        )


if __name__ == "__main__":
    main()
