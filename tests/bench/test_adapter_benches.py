"""Every adapter benchmark still runs its agent loop to the end, once.

A benchmark nobody runs rots: the LangChain one had stopped finishing (its policy
named no token estimate after budgets began refusing calls of unknown cost) and
nothing noticed. Each runs here with one timed run a subject: every subject's loop
must finish (the benchmark raises when one does not), the stored subject's token
budget must be settled exactly (else a problem in the result), and every subject must
have its figures and its overhead against the unguarded loop.
"""

from __future__ import annotations

import importlib

import pytest
from bench.agent_loops import interleave, loop_stats, note_overheads
from bench.harness import BenchResult

BENCHES = [
    ("adapters", "langchain"),
    ("adapter_autogen", "autogen_agentchat"),
    ("adapter_google_adk", "google.adk"),
    ("adapter_llama_index", "llama_index.core"),
    ("adapter_pydantic_ai", "pydantic_ai"),
    ("adapter_smolagents", "smolagents"),
]


@pytest.mark.parametrize(("module", "framework"), BENCHES)
def test_the_adapter_benchmark_runs_its_loop_and_settles_its_budget(
    module: str, framework: str
) -> None:
    importlib.import_module(framework)  # part of the dev environment: never skipped
    bench = importlib.import_module(f"bench.{module}")
    result = bench.run(1, True)
    assert result.problems == []
    labels = [stats.label for stats in result.stats]
    assert any(label.startswith("unguarded") for label in labels)
    overheads = [key for key in result.info if key.startswith("overhead_us ")]
    assert len(overheads) >= 2
    assert all(stats.calls > 0 and stats.p50_ns > 0 for stats in result.stats)


def test_interleave_takes_each_subject_once_a_round_from_a_new_start() -> None:
    order: list[str] = []

    def subject(label: str, ns: int) -> tuple[str, object]:
        def one() -> int:
            order.append(label)
            return ns

        return label, one

    samples, walls = interleave(
        [subject("a", 10), subject("b", 20), subject("c", 30)],  # type: ignore[list-item]
        rounds=2,
        warmup=1,
        turns=5,
    )
    assert order == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]
    assert samples == {"a": [10, 10], "b": [20, 20], "c": [30, 30]}  # warmup not kept
    assert walls == {"a": 100, "b": 200, "c": 300}
    result = BenchResult("x")
    medians = loop_stats(result, samples, walls, turns=5)
    assert medians == {"a": 10, "b": 20, "c": 30}
    assert [s.calls for s in result.stats] == [10, 10, 10]  # tool calls, not runs
    note_overheads(result, medians, [("b", "a")])
    assert result.info == {"overhead_us b": 0.01, "ratio b": 2.0}
