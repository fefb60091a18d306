"""``bench/outcome_starts.py`` (``python -m bench.outcome_starts BEFORE AFTER``): one round
of it on this tree runs, its audit chain verifies, and what it counts is what
BENCHMARKS says of a start joined to its decision's commit: one durable write
transaction for the decision with its start (a plain ``protect``, an adapter's
``run_settled``), one more for a budget's commit after the body; a start written apart
would add one to each."""

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
    # write transactions per call, averaged (the writer thread's group commits of the
    # results land in some calls' windows: an average, not an exact count)
    assert measured["protect"]["writes"] < 1.5
    assert measured["adapter"]["writes"] < 1.5
    assert 1.5 <= measured["protect budgeted"]["writes"] < 2.5
    assert measured["llm_call"]["writes"] >= 1.5  # the decision with its start; the commit
