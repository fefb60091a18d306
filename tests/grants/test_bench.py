"""bench/grants.py runs and reports both subjects beside their same-run baselines."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def test_the_grants_benchmark_measures_each_subject_beside_its_baseline() -> None:
    from bench import grants

    result = grants.run(20, quick=True)
    labels = [stats.label for stats in result.stats]
    assert labels == ["grant sign+read", "bare Ed25519", "issue+claim (SQLite)", "check"]
    assert all(stats.calls > 0 and stats.p50_ns > 0 for stats in result.stats)
    assert not result.problems
    assert result.info["token"]["bare_cpu_ns"] > 0
