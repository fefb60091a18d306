"""The ``replay`` benchmark's logic: a short run replays every record, finds exactly
the loosenings the calls hold (else it reports a problem), and gives each subject's
rates beside the engine's."""

from __future__ import annotations

from typing import Any

from bench.harness import BenchResult

from bench import replay


def test_a_short_run_replays_every_record_and_finds_the_loosenings() -> None:
    result = replay.run(1_500, quick=True)
    assert result.problems == []
    assert result.info["records"] == 1_500 and result.info["loosened_found"] > 0
    assert {stats.label for stats in result.stats} == {
        "baseline: the plain engine (evaluate)",
        "replay (rows in memory)",
        "replay, every call judged (memo off)",
        "replay from the store (what the command does)",
    }
    assert all(stats.calls == 1_500 for stats in result.stats)
    engine = result.info["baseline: the plain engine (evaluate)"]
    assert engine["cpu_vs_engine"] == 1.0
    assert [target.name for target in result.targets] == [
        "replay from the store, re-decisions/s (CPU time)"
    ]


def test_a_wrong_count_is_a_problem() -> None:
    class Wrong:
        def as_json(self, fail_on: str) -> dict[str, Any]:
            return {"records": {"replayed": 10}, "changes": {"deny_to_allow": 0}, "loosened": 0}

    result = BenchResult("replay")
    replay._check(result, {"replay (rows in memory)": Wrong()}, 1_000)
    assert len(result.problems) == 2
