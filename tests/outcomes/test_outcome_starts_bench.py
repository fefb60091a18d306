"""``bench/outcome_starts.py`` (``python -m bench.outcome_starts BEFORE AFTER``): one round
of it on this tree runs, its audit chain verifies, and what it counts is what
BENCHMARKS reports: per subject the time to the body and the whole call, CPU, and the
store's write transactions a call (at least the decision's, which holds its start)."""

from __future__ import annotations

from pathlib import Path

from bench import outcome_starts

SRC = Path(__file__).resolve().parents[2] / "src"


def test_one_round_on_this_tree_measures_every_subject() -> None:
    measured = outcome_starts.round_(str(SRC), 30)
    assert set(measured) == {"llm_call", "protect budgeted", "protect", "adapter"}
    for name, figures in measured.items():
        assert 0 < figures["entry_us"] <= figures["whole_us"], name
        assert figures["cpu_us"] > 0, name
    # at least one durable write a call (the decision with its start); how many more
    # depends on when the writer thread's group commits of results land, so the exact
    # count is the bench's figure, not this test's
    for name, figures in measured.items():
        assert figures["writes"] >= 1, name
