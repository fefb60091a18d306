"""Benchmark ``replay``: re-decisions per second of ``interlock audit replay`` over a
recorded log of the demo's agents, beside the plain engine in the same run.

The log: ``--calls`` decisions (default 100,000; ``--quick`` 10,000) of the demo's
three agents under the example policy, written to a SQLite file as a guard writes
them (:func:`interlock.replay.demo_log.write_demo_log`). The draft: the example with
one more known host, so the replay has loosenings to find (their count is checked
against the calls themselves: a mismatch is a correctness problem).

Subjects, interleaved over :data:`ROUNDS` rounds (the best round of each is kept):

* **baseline: the plain engine** — ``evaluate(action, draft)`` on every recorded call,
  the actions built beforehand: what the same checks cost a guard's pure step.
* **replay (rows in memory)** — :func:`interlock.replay.replay_rows` on the rows read
  beforehand: parse each record, rebuild the call, judge it (identical calls once:
  the engine is pure), compare, tally.
* **replay, every call judged** — the same with ``memo=False``: each record parsed,
  rebuilt and judged, however often the call repeats.
* **replay from the store** — :func:`interlock.replay.replay_store`: the above plus
  reading the log from SQLite in pages (what the command does).

Throughput is given by wall time and by the process's CPU time (the machine is
shared: CPU time does not drift with its load); the target (≥ 50,000 re-decisions/s)
is read on the CPU-time rate of the replay from the store.
"""

from __future__ import annotations

import gc
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from bench.harness import BenchResult, Stats, Target
from interlock.demo import example_policy_text
from interlock.policy.engine import evaluate
from interlock.policy.loader import load_policy_text
from interlock.replay import replay_rows, replay_store
from interlock.replay.demo_log import demo_actions, write_demo_log
from interlock.replay.recorded import read_recorded
from interlock.store import open_store

__all__ = ["run"]

DEFAULT_RECORDS: Final = 100_000
QUICK_RECORDS: Final = 10_000
ROUNDS: Final = 3
TARGET_PER_S: Final = 50_000.0

_KNOWN_HOSTS: Final = 'domain: ["docs.example.com", "*.example.org", "api.github.com"]'


def _draft() -> str:
    text = example_policy_text()
    assert _KNOWN_HOSTS in text
    return text.replace(_KNOWN_HOSTS, _KNOWN_HOSTS[:-1] + ', "pastebin.example.net"]', 1)


def _timed(fn: Callable[[], Any]) -> tuple[int, int, Any]:
    """(wall ns, CPU ns, result) of one call, the collector off."""
    gc.collect()
    gc.disable()
    try:
        wall, cpu = time.perf_counter_ns(), time.process_time_ns()
        result = fn()
        return time.perf_counter_ns() - wall, time.process_time_ns() - cpu, result
    finally:
        gc.enable()


def _stats(label: str, calls: int, wall_ns: int) -> Stats:
    mean = wall_ns // calls
    return Stats(label, calls, mean, mean, mean, mean, float(mean), mean, mean, wall_ns)


def run(calls: int | None, quick: bool) -> BenchResult:
    records = calls or (QUICK_RECORDS if quick else DEFAULT_RECORDS)
    result = BenchResult("replay")
    draft = load_policy_text(_draft(), file="draft.yaml")
    with tempfile.TemporaryDirectory(prefix="interlock-bench-replay-") as scratch:
        url = f"sqlite:///{Path(scratch) / 'log.db'}"
        store = open_store(url)
        try:
            wall, cpu, _ = _timed(lambda: write_demo_log(store, records))
            result.info["log_write_s"] = round(wall / 1e9, 2)
            rows = list(store.audit_rows(kind="decision", page=5000))
            actions = [read_recorded(row).action() for row in rows]
            subjects: dict[str, Callable[[], Any]] = {
                "baseline: the plain engine (evaluate)": lambda: [
                    evaluate(action, draft) for action in actions
                ],
                "replay (rows in memory)": lambda: replay_rows(rows, draft),
                "replay, every call judged (memo off)": lambda: replay_rows(
                    rows, draft, memo=False
                ),
                "replay from the store (what the command does)": lambda: replay_store(store, draft),
            }
            best: dict[str, tuple[int, int]] = {}
            reports: dict[str, Any] = {}
            for _ in range(ROUNDS):
                for label, subject in subjects.items():
                    wall, cpu, outcome = _timed(subject)
                    old = best.get(label)
                    best[label] = (min(old[0], wall), min(old[1], cpu)) if old else (wall, cpu)
                    reports[label] = outcome
        finally:
            store.close()
    _check(result, reports, records)
    base_cpu = best["baseline: the plain engine (evaluate)"][1]
    for label, (wall, cpu) in best.items():
        result.stats.append(_stats(label, records, wall))
        result.info[label] = {
            "per_s_wall": round(records / (wall / 1e9)),
            "per_s_cpu": round(records / (cpu / 1e9)),
            "cpu_us_per_record": round(cpu / records / 1000, 2),
            "cpu_vs_engine": round(cpu / base_cpu, 2),
        }
    store_rate = result.info["replay from the store (what the command does)"]["per_s_cpu"]
    result.targets.append(
        Target(
            "replay from the store, re-decisions/s (CPU time)", store_rate, ">=", TARGET_PER_S, "/s"
        )
    )
    distinct = len(
        {(a.context.tenant, a.context.agent, a.name, repr(a.arguments)) for a in actions}
    )
    result.info["records"] = records
    result.info["distinct_calls"] = distinct
    result.notes.append(
        f"{records:,} recorded decisions, {distinct:,} distinct calls (the demo's agents "
        "repeat themselves, as agents do: replay judges a repeated call once). 'memo "
        "off' is the rate on a log where no call repeats."
    )
    return result


def _check(result: BenchResult, reports: dict[str, Any], records: int) -> None:
    """Every replay found exactly the loosenings the calls themselves hold."""
    expected = sum(
        1
        for action in demo_actions(records)
        if action.name == "fetch_url" and "pastebin.example.net" in action.arguments["url"]
    )
    for label, report in reports.items():
        if label.startswith("baseline"):
            continue
        data = report.as_json("loosen")
        if data["records"]["replayed"] != records:
            result.problems.append(f"{label}: replayed {data['records']['replayed']} of {records}")
        if data["changes"]["deny_to_allow"] != expected or data["loosened"] != expected:
            result.problems.append(
                f"{label}: {data['changes']['deny_to_allow']} deny→allow, expected {expected}"
            )
    result.info["loosened_found"] = expected
