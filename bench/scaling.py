"""Benchmark ``scaling``: how ``guard.check`` grows with the policy and with the argument.

Two sweeps, each point with a floor timed in the same run, right beside it:

* **policy size** — 10, 100, 1,000 and 5,000 generated rules, all on one tool
  (``call_api``), of four kinds in turn: an allow on an exact ``customer`` (``eq``), a
  deny on an ``endpoint`` regex, an approval on a ``region`` glob and an allow on a
  ``plan`` list (``in``) — the shape of a policy generated per customer or endpoint.
  A 4-call mix hits the last rule of a kind, a deny regex, a glob and no rule at all.
  Floor: a dict lookup and one regex search (as the ``check`` benchmark's floor).
* **argument size** — a ``run_query`` call whose ``sql`` argument is short (~50 B),
  1 KB, 100 KB or 1 MB of harmless SQL, judged by 40 deny regexes on that one
  parameter (none matches, so every one must read the whole text) and one allow.
  Floor: one RE2 search of one of the 40 patterns over the same text (it never
  matches, so it reads the whole text once): what "all 40 in one pass" can approach.

Each point times ``guard.check`` (with a :class:`MemorySink`) and ``evaluate`` (the
engine alone), after checking every call decides as written. The results go to
``bench/results/scaling.json`` and, with matplotlib installed (a dev dependency), to a
log-log chart ``bench/results/scaling.png`` (two panels: p50 against rules and against
argument bytes). ``docs/img/scaling.png`` is the chart of the run BENCHMARKS.md quotes.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from bench.harness import (
    RESULTS_DIR,
    BenchResult,
    Stats,
    Target,
    dict_regex_floor,
    summarise,
    time_calls,
)

__all__ = [
    "ARG_SIZES",
    "POLICY_SIZES",
    "arg_calls",
    "arg_policy",
    "arg_text",
    "chart",
    "policy_calls",
    "run",
    "size_policy",
]

POLICY_SIZES: Final = (10, 100, 1_000, 5_000)
#: label -> bytes of the ``sql`` argument.
ARG_SIZES: Final = (("short", 0), ("1 KB", 1_024), ("100 KB", 102_400), ("1 MB", 1_048_576))
ARG_REGEXES: Final = 40

DEFAULT_CALLS: Final = 40_000
QUICK_CALLS: Final = 4_000
MIN_CALLS: Final = 10
WARMUP_FRACTION: Final = 10  # warm-up calls: a tenth of the timed ones

TARGET_POLICY_RATIO: Final = 2.0  # p50 at 5,000 rules / p50 at 100 rules
TARGET_1MB_MS: Final = 10.0
TARGET_1KB_RATIO: Final = 2.0  # p50 at 1 KB / p50 of a short argument

# ---------------------------------------------------------------------------------
# Policy-size sweep.
# ---------------------------------------------------------------------------------

_KINDS: Final = 4  # rule i is of kind i % 4


def _size_rule(i: int) -> dict[str, Any]:
    kind = i % _KINDS
    base: dict[str, Any] = {"id": f"r{i:05d}", "name": "call_api"}
    if kind == 0:
        return {
            **base,
            "decision": "allow",
            "reason": f"customer {i}",
            "params": {"args.customer": {"eq": f"cust-{i:05d}"}},
        }
    if kind == 1:
        return {
            **base,
            "decision": "deny",
            "reason": f"destructive endpoint {i}",
            "params": {"args.endpoint": {"regex": [f"^/v1/res{i}/(delete|purge)(/|$)"]}},
        }
    if kind == 2:
        return {
            **base,
            "decision": "require_approval",
            "reason": f"region {i}",
            "params": {"args.region": f"zone-{i}-*"},
        }
    return {
        **base,
        "decision": "allow",
        "reason": f"plans {i}",
        "params": {"args.plan": {"in": [f"plan-{i}-a", f"plan-{i}-b"]}},
    }


def size_policy(rules: int) -> dict[str, Any]:
    """``rules`` generated rules on the one tool ``call_api``."""
    if rules < 2 * _KINDS:
        raise ValueError("at least two rules of each kind")
    return {
        "version": 1,
        "default": "deny",
        "description": f"Scaling benchmark: {rules} rules on one tool.",
        "scopes": {"default": "data"},
        "rules": [_size_rule(i) for i in range(rules)],
    }


def _last_of_kind(rules: int, kind: int) -> int:
    return max(i for i in range(rules - _KINDS, rules) if i % _KINDS == kind)


@dataclass(frozen=True, slots=True)
class Expected:
    args: dict[str, Any]
    verdict: str
    rule_ids: tuple[str, ...]


def policy_calls(rules: int) -> list[Expected]:
    """Four calls on ``call_api``: each meant to decide as said, at any size."""
    allow = _last_of_kind(rules, 0)
    deny = _last_of_kind(rules, 1)
    glob = _last_of_kind(rules, 2)
    return [
        Expected(
            {"customer": f"cust-{allow:05d}", "endpoint": "/v1/list"}, "allow", (f"r{allow:05d}",)
        ),
        Expected(
            {"customer": f"cust-{allow:05d}", "endpoint": f"/v1/res{deny}/purge"},
            "deny",
            (f"r{deny:05d}",),
        ),
        Expected(
            {"region": f"zone-{glob}-east", "plan": "free"}, "require_approval", (f"r{glob:05d}",)
        ),
        Expected({"customer": "cust-nobody", "endpoint": "/v1/list", "plan": "free"}, "deny", ()),
    ]


# ---------------------------------------------------------------------------------
# Argument-size sweep.
# ---------------------------------------------------------------------------------

_SHORT_SQL: Final = "SELECT id, name FROM customers WHERE region = 'eu'"
_FILLER: Final = "SELECT id, name, total FROM orders WHERE status = 'open' AND total > 10; "
_WORDS: Final = (
    "drop",
    "truncate",
    "grant",
    "revoke",
    "alter",
    "shutdown",
    "copy",
    "attach",
)


def arg_policy() -> dict[str, Any]:
    """40 deny regexes on ``args.sql`` of ``run_query`` and one allow of the tool."""
    rules: list[dict[str, Any]] = []
    for i in range(ARG_REGEXES):
        word = _WORDS[i % len(_WORDS)]
        rules.append(
            {
                "id": f"sql-{i:02d}",
                "decision": "deny",
                "reason": f"{word} on table t{i}",
                "name": "run_query",
                "params": {"args.sql": {"regex": [rf"(?i)\b{word}\s+(table\s+)?t{i}\b"]}},
            }
        )
    rules.append({"id": "run-query", "decision": "allow", "reason": "queries", "name": "run_query"})
    return {
        "version": 1,
        "default": "deny",
        "description": "Scaling benchmark: 40 regexes on one parameter.",
        "scopes": {"default": "data"},
        "rules": rules,
    }


def arg_text(size: int) -> str:
    """Harmless SQL of ``size`` characters (the short query for 0)."""
    if size == 0:
        return _SHORT_SQL
    return (_FILLER * (size // len(_FILLER) + 1))[:size]


def arg_calls(size: int) -> list[Expected]:
    return [Expected({"sql": arg_text(size)}, "allow", ("run-query",))]


def _policy_floor() -> Callable[[tuple[str, str]], bool]:
    """The ``check`` benchmark's floor: a dict lookup and one stdlib regex search."""
    table = {"call_api": re.compile(r"^/v1/res[0-9]+/(delete|purge)(/|$)")}
    return dict_regex_floor(table)


def _arg_floor() -> Callable[[tuple[str, str]], bool]:
    """A dict lookup and one RE2 search of **one** of the 40 rules' patterns: what a
    single regex rule costs on the text, i.e. one pass over it. (The stdlib ``re`` is
    no floor here: it takes ~10× longer than RE2 on these patterns over 1 MB.)"""
    import re2

    first = arg_policy()["rules"][0]["params"]["args.sql"]["regex"][0]
    table = {"run_query": re2.compile(first)}
    return dict_regex_floor(table)


# ---------------------------------------------------------------------------------
# Timing.
# ---------------------------------------------------------------------------------


@dataclass(slots=True)
class Point:
    sweep: str  # "rules" | "bytes"
    x: int
    label: str
    calls: int
    check: Stats
    evaluate: Stats
    floor: Stats

    def to_json(self) -> dict[str, Any]:
        return {
            "sweep": self.sweep,
            "x": self.x,
            "label": self.label,
            "calls": self.calls,
            "check_p50_us": self.check.p50_ns / 1000,
            "check_mean_us": self.check.mean_ns / 1000,
            "evaluate_p50_us": self.evaluate.p50_ns / 1000,
            "floor_p50_us": self.floor.p50_ns / 1000,
            "check_over_floor_p50": round(self.check.p50_ns / self.floor.p50_ns, 2),
        }


def _verify(
    policy: Any, tool: str, calls: Sequence[Expected], where: str
) -> tuple[list[Any], list[str]]:
    """The actions of ``calls`` on ``tool``, and a problem for each that does not decide
    as written."""
    from interlock import Action, Guard

    guard = Guard(policy)
    actions, problems = [], []
    for expected in calls:
        action = Action(kind="tool", name=tool, arguments=expected.args)
        decision = guard.check(action)
        got = (decision.verdict.value, tuple(decision.rule_ids))
        if got != (expected.verdict, expected.rule_ids):
            problems.append(
                f"{where}: a call meant to be {expected.verdict} {list(expected.rule_ids)} "
                f"is {got[0]} {list(got[1])} ({decision.reason})"
            )
        actions.append(action)
    return actions, problems


def _time_point(
    sweep: str,
    x: int,
    label: str,
    policy: Any,
    actions: list[Any],
    floor_inputs: list[Any],
    floor: Callable[[Any], object],
    calls: int,
) -> Point:
    from interlock import Guard
    from interlock.core.events import MemorySink
    from interlock.policy import evaluate

    warmup = max(1, calls // WARMUP_FRACTION)
    sink = MemorySink()
    guard = Guard(policy, sink=sink)
    samples, wall = time_calls(guard.check, actions, calls, warmup)
    check = summarise(f"guard.check {label}", samples, wall)
    sink.events.clear()
    samples, wall = time_calls(functools.partial(evaluate, policy=policy), actions, calls, warmup)
    engine = summarise(f"evaluate {label}", samples, wall)
    samples, wall = time_calls(floor, floor_inputs, calls, warmup)
    floor_stats = summarise(f"floor {label}", samples, wall)
    return Point(sweep, x, label, calls, check, engine, floor_stats)


def _calls_for_bytes(calls: int, size: int) -> int:
    """Fewer calls for bigger arguments: about the same bytes judged per point."""
    return max(MIN_CALLS, min(calls, calls * 1_024 // max(1_024, size)))


def run(calls: int | None = None, quick: bool = False) -> BenchResult:
    from interlock.policy import compile_policy

    calls = calls or (QUICK_CALLS if quick else DEFAULT_CALLS)
    result = BenchResult(name="scaling")
    points: list[Point] = []

    policy_floor = _policy_floor()
    for rules in POLICY_SIZES:
        policy = compile_policy(size_policy(rules))
        expected = policy_calls(rules)
        actions, problems = _verify(policy, "call_api", expected, f"{rules} rules")
        result.problems.extend(problems)
        floor_inputs = [("call_api", str(e.args.get("endpoint", ""))) for e in expected]
        points.append(
            _time_point(
                "rules",
                rules,
                f"{rules:,} rules",
                policy,
                actions,
                floor_inputs,
                policy_floor,
                calls,
            )
        )

    arg_floor = _arg_floor()
    policy = compile_policy(arg_policy())
    for label, size in ARG_SIZES:
        expected = arg_calls(size)
        actions, problems = _verify(policy, "run_query", expected, f"{label} argument")
        result.problems.extend(problems)
        floor_inputs = [("run_query", str(e.args["sql"])) for e in expected]
        points.append(
            _time_point(
                "bytes",
                len(arg_text(size)),
                label,
                policy,
                actions,
                floor_inputs,
                arg_floor,
                _calls_for_bytes(calls, size),
            )
        )

    for point in points:
        result.stats += [point.check, point.evaluate, point.floor]
    by = {(p.sweep, p.label): p for p in points}
    p100, p5000 = by[("rules", "100 rules")], by[("rules", "5,000 rules")]
    short, kb, mb = by[("bytes", "short")], by[("bytes", "1 KB")], by[("bytes", "1 MB")]
    result.targets = [
        Target(
            "check p50 5,000 rules / 100 rules",
            p5000.check.p50_ns / p100.check.p50_ns,
            "<=",
            TARGET_POLICY_RATIO,
            "×",
        ),
        Target("check p50, 1 MB argument", mb.check.p50_ns / 1e6, "<=", TARGET_1MB_MS, "ms"),
        Target(
            "check p50 1 KB / short argument",
            kb.check.p50_ns / short.check.p50_ns,
            "<=",
            TARGET_1KB_RATIO,
            "×",
        ),
    ]
    result.info = {
        "points": [p.to_json() for p in points],
        "arg_regexes": ARG_REGEXES,
        "policy_rule_kinds": ["eq (allow)", "regex (deny)", "glob (approval)", "in (allow)"],
    }
    result.notes = [
        f"{p.sweep:5} {p.label:>12}: check p50 {p.check.p50_ns / 1000:10.1f} µs, evaluate "
        f"{p.evaluate.p50_ns / 1000:10.1f} µs, floor {p.floor.p50_ns / 1000:9.2f} µs "
        f"({p.calls:,} calls)"
        for p in points
    ]
    image = chart(points, RESULTS_DIR / "scaling.png")
    result.notes.append(f"chart: {image}" if image else "chart: matplotlib not installed")
    return result


def chart(points: Sequence[Point], path: Any) -> Any:
    """Two log-log panels, p50 against rules and against argument bytes; None without
    matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
    panels = (
        (left, "rules", "rules on the tool", "check latency vs policy size"),
        (right, "bytes", "argument size (bytes)", "check latency vs argument size (40 regexes)"),
    )
    for axes, sweep, xlabel, title in panels:
        mine = sorted((p for p in points if p.sweep == sweep), key=lambda p: p.x)
        xs = [p.x for p in mine]
        for series, style, name in (
            ("check", "o-", "guard.check p50"),
            ("evaluate", "s--", "evaluate p50"),
            ("floor", "^:", "floor p50 (same run)"),
        ):
            ys = [getattr(p, series).p50_ns / 1000 for p in mine]
            axes.plot(xs, ys, style, label=name)
        axes.set_xscale("log")
        axes.set_yscale("log")
        axes.set_xlabel(xlabel)
        axes.set_ylabel("p50 latency (µs)")
        axes.set_title(title)
        axes.grid(True, which="both", alpha=0.3)
        axes.legend()
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
