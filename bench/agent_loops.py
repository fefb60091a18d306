"""What every adapter benchmark does around its framework's agent loop.

An adapter benchmark times whole runs of a real agent loop — the framework's own loop,
a scripted model, one tool — with and without the guard, and reports figures *per tool
call* (a run's time divided by its ``turns``). The framework part (building the agent,
running it once) is each benchmark's own; the rest is here:

- :func:`interleave`: the subjects taken round-robin, one run each per round, starting
  at a different subject each round, so that drift in the machine's load hits every
  subject alike; the first ``warmup`` rounds are not kept;
- :func:`loop_stats`: the statistics of each subject per tool call (the table's calls/s
  counts tool calls, not runs), and their medians;
- :func:`check_settled`: the token budget the stored subject ran on, spent exactly as
  the scripted model reported and nothing left reserved (else a problem in the result);
- :func:`note_overheads`: each guarded subject's median against its unguarded one;
- :func:`lookup_policy`: the policy they share (a model budget, the ``lookup`` tool
  allowed but for secret keys).

Example::

    samples, walls = interleave([("unguarded", run_plain), ("guarded", run_guarded)],
                                rounds=8, warmup=2, turns=20)
    medians = loop_stats(result, samples, walls, turns=20)
    note_overheads(result, medians, [("guarded", "unguarded")])
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable, Sequence

from bench.harness import BenchResult, Stats, summarise
from interlock import Guard

__all__ = [
    "check_settled",
    "interleave",
    "lookup_policy",
    "loop_stats",
    "note_overheads",
    "per_call",
]


def interleave(
    subjects: Sequence[tuple[str, Callable[[], int]]], *, rounds: int, warmup: int, turns: int
) -> tuple[dict[str, list[int]], dict[str, int]]:
    """Run each subject once a round, round-robin from a different one each round.

    A subject is a label and a callable that does one timed run and returns its time
    per tool call (ns). Returns the kept samples and the summed wall time of each."""
    samples: dict[str, list[int]] = {label: [] for label, _ in subjects}
    walls: dict[str, int] = dict.fromkeys(samples, 0)
    for round_ in range(warmup + rounds):
        gc.collect()
        for k in range(len(subjects)):
            label, one_run = subjects[(round_ + k) % len(subjects)]
            per_tool_call = one_run()
            if round_ >= warmup:
                samples[label].append(per_tool_call)
                walls[label] += per_tool_call * turns
    return samples, walls


def per_call(label: str, samples: Sequence[int], wall: int, *, turns: int) -> Stats:
    """The statistics of runs timed per tool call, counting ``turns`` calls a run."""
    stats = summarise(label, samples, wall)
    return Stats(
        label,
        stats.calls * turns,
        stats.p50_ns,
        stats.p90_ns,
        stats.p99_ns,
        stats.p999_ns,
        stats.mean_ns,
        stats.min_ns,
        stats.max_ns,
        wall,
    )


def loop_stats(
    result: BenchResult, samples: dict[str, list[int]], walls: dict[str, int], *, turns: int
) -> dict[str, int]:
    """Add each subject's per-tool-call statistics to ``result``; their medians (ns)."""
    medians: dict[str, int] = {}
    for label, kept in samples.items():
        stats = per_call(label, kept, walls[label], turns=turns)
        medians[label] = stats.p50_ns
        result.stats.append(stats)
    return medians


def check_settled(result: BenchResult, guard: Guard, budget_id: str, expected: int) -> None:
    """A problem in ``result`` unless ``guard``'s budget spent ``expected`` and holds
    nothing reserved: every model call committed once, from the usage it reported."""
    assert guard.store is not None
    (row,) = guard.store.budget_rows(budget_id=budget_id)
    if (row.spent, row.reserved) != (expected, 0):
        result.problems.append(
            f"token budget spent {row.spent} reserved {row.reserved}, expected {expected} and 0"
        )


def note_overheads(
    result: BenchResult,
    medians: dict[str, int],
    pairs: Iterable[tuple[str, str]],
    *,
    show_base: bool = False,
) -> None:
    """For each (subject, its unguarded baseline): the time added per tool call and the
    ratio, as ``info`` entries and a note."""
    for label, base_label in pairs:
        base = medians[base_label]
        over = medians[label] - base
        result.info[f"overhead_us {label}"] = round(over / 1000, 2)
        result.info[f"ratio {label}"] = round(medians[label] / base, 3)
        unguarded = f", unguarded {base / 1000:.0f} µs per tool call" if show_base else ""
        result.notes.append(
            f"{label}: {over / 1000:+.1f} µs per tool call over unguarded "
            f"({medians[label] / base:.3f}×{unguarded})"
        )


def lookup_policy(estimate: int = 200) -> str:
    """The adapter benchmarks' policy: a token budget on model calls (``estimate``
    reserved for a call that names no ``max_tokens``), the ``lookup`` tool allowed
    but for a secret key."""
    return _LOOKUP_POLICY.replace("{estimate}", str(estimate))


_LOOKUP_POLICY = """
version: 1
default: deny
budgets:
  - id: model-tokens
    limit: 1000000000
    unit: tokens
    scope: agent
    kind: llm
    default_estimate: {estimate}
rules:
  - id: models
    decision: allow
    reason: the model may think
    kind: llm
  - id: lookups
    decision: allow
    reason: lookups are fine
    name: lookup
  - id: no-secrets
    decision: deny
    reason: no secrets
    name: lookup
    params:
      args.key: {glob: "secret*"}
"""
