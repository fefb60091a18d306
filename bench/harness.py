"""Shared timing machinery for the benchmarks: per-call timing, statistics, targets,
machine facts and the summary table.

Every figure is a wall-clock latency of one call, taken with ``time.perf_counter_ns``
on either side of the call, with the garbage collector off for the timed loop. The
cost of the timer itself is measured (:func:`timer_overhead`) and reported next to the
figures; it is *not* subtracted from them.

Nothing here asserts on time: a missed target is reported, never raised.
"""

from __future__ import annotations

import gc
import json
import math
import os
import platform
import sys
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

__all__ = [
    "RESULTS_DIR",
    "BenchResult",
    "Stats",
    "Target",
    "format_table",
    "machine_info",
    "summarise",
    "time_calls",
    "timer_overhead",
    "write_result",
]

RESULTS_DIR = Path(__file__).resolve().parent / "results"


@dataclass(frozen=True, slots=True)
class Stats:
    """Latency statistics of one timed loop, in nanoseconds."""

    label: str
    calls: int
    p50_ns: int
    p90_ns: int
    p99_ns: int
    p999_ns: int
    mean_ns: float
    min_ns: int
    max_ns: int
    wall_ns: int  # the whole timed loop, timer calls included

    @property
    def throughput(self) -> float:
        """Calls per second over the timed loop (timer overhead included)."""
        return self.calls / (self.wall_ns / 1e9) if self.wall_ns else math.inf

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = asdict(self)
        out["throughput_per_s"] = round(self.throughput, 1)
        return out


@dataclass(frozen=True, slots=True)
class Target:
    """A figure and the bound it should meet. ``met`` is informational only."""

    name: str
    value: float
    op: Literal["<=", ">="]
    limit: float
    unit: str

    @property
    def met(self) -> bool:
        return self.value <= self.limit if self.op == "<=" else self.value >= self.limit

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "value": round(self.value, 3),
            "op": self.op,
            "limit": self.limit,
            "unit": self.unit,
            "met": self.met,
        }


@dataclass(slots=True)
class BenchResult:
    """What one benchmark hands back to the runner."""

    name: str
    stats: list[Stats] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # correctness problems: shown loudly

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "stats": [s.to_json() for s in self.stats],
            "targets": [t.to_json() for t in self.targets],
            "info": self.info,
            "notes": self.notes,
            "problems": self.problems,
        }


def _rank(ordered: Sequence[int], q: float) -> int:
    """Nearest-rank percentile of already sorted samples."""
    index = max(0, min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1))
    return ordered[index]


def summarise(label: str, samples: Sequence[int], wall_ns: int) -> Stats:
    ordered = sorted(samples)
    return Stats(
        label=label,
        calls=len(ordered),
        p50_ns=_rank(ordered, 0.50),
        p90_ns=_rank(ordered, 0.90),
        p99_ns=_rank(ordered, 0.99),
        p999_ns=_rank(ordered, 0.999),
        mean_ns=sum(ordered) / len(ordered),
        min_ns=ordered[0],
        max_ns=ordered[-1],
        wall_ns=wall_ns,
    )


def time_calls(
    fn: Callable[[Any], object], inputs: Sequence[Any], calls: int, warmup: int
) -> tuple[list[int], int]:
    """Call ``fn`` on ``inputs`` cycled, ``warmup`` times untimed and then ``calls``
    times timed one by one. Returns the per-call samples (ns) and the loop's wall time.
    The garbage collector is off during the timed loop (and collected before it)."""
    count = len(inputs)
    for i in range(warmup):
        fn(inputs[i % count])
    samples = [0] * calls
    clock = time.perf_counter_ns
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        began = clock()
        for i in range(calls):
            item = inputs[i % count]
            t0 = clock()
            fn(item)
            samples[i] = clock() - t0
        wall = clock() - began
    finally:
        if was_enabled:
            gc.enable()
    return samples, wall


async def atime_calls(
    fn: Callable[[Any], Awaitable[object]], inputs: Sequence[Any], calls: int, warmup: int
) -> tuple[list[int], int]:
    """:func:`time_calls` for a coroutine function: each call awaited in turn."""
    count = len(inputs)
    for i in range(warmup):
        await fn(inputs[i % count])
    samples = [0] * calls
    clock = time.perf_counter_ns
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        began = clock()
        for i in range(calls):
            item = inputs[i % count]
            t0 = clock()
            await fn(item)
            samples[i] = clock() - t0
        wall = clock() - began
    finally:
        if was_enabled:
            gc.enable()
    return samples, wall


def timer_overhead(calls: int) -> tuple[list[int], int]:
    """The same loop as :func:`time_calls` with nothing between the two clock reads:
    what the measurement itself adds to every sample."""
    samples = [0] * calls
    clock = time.perf_counter_ns
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        began = clock()
        for i in range(calls):
            t0 = clock()
            samples[i] = clock() - t0
        wall = clock() - began
    finally:
        if was_enabled:
            gc.enable()
    return samples, wall


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        return None
    return None


def _load() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def machine_info() -> dict[str, Any]:
    """The facts a reader needs to weigh the figures."""
    return {
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "loadavg": _load(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def _us(ns: float) -> str:
    return f"{ns / 1000:.2f}"


def format_table(results: Sequence[BenchResult]) -> str:
    """The summary: one row per timed subject, then the targets."""
    header = ("benchmark", "subject", "calls", "p50 µs", "p90 µs", "p99 µs", "mean µs", "calls/s")
    rows: list[tuple[str, ...]] = []
    for result in results:
        for s in result.stats:
            rows.append(
                (
                    result.name,
                    s.label,
                    f"{s.calls:,}",
                    _us(s.p50_ns),
                    _us(s.p90_ns),
                    _us(s.p99_ns),
                    _us(s.mean_ns),
                    f"{s.throughput:,.0f}",
                )
            )
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)
    ]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            c.ljust(w) if i < 2 else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        )

    out = [line(header), line(["-" * w for w in widths])]
    out.extend(line(r) for r in rows)
    targets = [(r.name, t) for r in results for t in r.targets]
    if targets:
        out.append("")
        out.append("targets:")
        for name, t in targets:
            mark = "met   " if t.met else "MISSED"
            out.append(
                f"  [{mark}] {name}: {t.name} = {t.value:.2f} {t.unit} (target {t.op} {t.limit:g})"
            )
    return "\n".join(out)


def write_result(result: BenchResult, machine: dict[str, Any]) -> Path:
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{result.name}.json"
    payload = {"machine": machine, **result.to_json()}
    path.write_text(json.dumps(payload, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    return path


def dict_regex_floor(table: Mapping[str, Any]) -> Callable[[tuple[str, str]], bool]:
    """The floor the decision benchmarks measure against: one dict lookup (tool name →
    compiled pattern, ``re`` or RE2) and one search of the call's main text. The
    cheapest in-process decision anyone could write; ``item`` is (tool, text)."""

    def floor(item: tuple[str, str]) -> bool:
        pattern = table.get(item[0])
        return pattern is not None and pattern.search(item[1]) is not None

    return floor
