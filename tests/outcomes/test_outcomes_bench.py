"""``bench/outcomes.py`` (``python -m bench.outcomes BEFORE AFTER``) had no test. One
round of it on this tree runs, and what it counts is what BENCHMARKS says outcome
records cost: three audit rows per protected call (the decision, its ``tool_invoke``
and the group-committed ``tool_result``), against one before outcomes existed."""

from __future__ import annotations

from pathlib import Path

from bench import outcomes

SRC = Path(__file__).resolve().parents[2] / "src"


def test_one_round_on_this_tree_writes_three_rows_a_call() -> None:
    calls = 20
    measured = outcomes.round_(str(SRC), calls)
    assert measured["wall_us"] > 0 and measured["cpu_us"] > 0
    warm = calls // 10
    assert measured["rows"] == 3 * (calls + warm)
