"""The effects benchmark runs, and every run_effect it times committed."""

from __future__ import annotations

from bench.__main__ import BENCHMARKS


def test_the_effects_benchmark_runs_clean() -> None:
    result = BENCHMARKS["effects"].run(5, True)
    assert result.problems == []
    assert [s.label for s in result.stats] == [
        "httpx POST (floor)",
        "run_effect (SQLite, grant, receipt)",
    ]
    assert all(s.calls == 5 for s in result.stats)
