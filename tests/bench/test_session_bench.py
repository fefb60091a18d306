"""The ``session`` benchmark runs every subject and checks itself: the session rules
give the stateless verdicts on the timed calls (none carries session data), refuse a
call that carries a secret step's data, and the memory and fingerprint figures exist."""

from __future__ import annotations

import pytest
from bench.__main__ import BENCHMARKS
from bench.harness import BenchResult

from bench import session


def test_the_session_benchmark_runs_every_subject_and_finds_no_problem() -> None:
    result = session.run(100, True)
    assert result.problems == []
    labels = [s.label for s in result.stats]
    # a stateless baseline for each kind of argument values, and the session rules on
    # 20- and 200-step sessions with each (the target is judged on the mix)
    for arguments in ("repeated", "new", "mix"):
        assert f"baseline: stateless check (per-call rules), {arguments} arguments" in labels
        for steps in (20, 200):
            assert f"session rules, {steps}-step sessions, {arguments} arguments" in labels
    assert any(label.startswith("labels only") for label in labels)
    assert any(label.startswith("durable: stateless") for label in labels)
    assert any(label.startswith("durable: session rules") for label in labels)
    assert len(labels) == 12
    assert all(s.calls > 0 and s.p50_ns > 0 for s in result.stats)
    assert {t.op for t in result.targets} == {"<="} and len(result.targets) == 3
    assert result.info["history_kb_per_session prose (200 steps, 2 KB results)"] > 0
    assert result.info["of_data_us_per_kb token-rich 1KB"] > 0
    pause = result.info["full_gc_ms (5 sessions of 200 steps, 2 KB prose): held / none"]
    held, none = (float(part.split()[0]) for part in pause.split(" / "))
    assert held > 0 and none > 0 and "fingerprints" in pause
    assert "session" in BENCHMARKS


def test_the_liveness_check_reports_rules_that_refuse_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With the flow rules cut off, the leak is not refused: the benchmark says so."""
    labelled_only = session._HEAD + session._SESSION_PART + "rules:\n" + session._RULES
    monkeypatch.setattr(session, "FLOWS", labelled_only)
    result = BenchResult("session")
    session._check_the_rules_are_live(result)
    assert result.problems == ["a call carrying a secret step's data was not refused"]


def _census_problems(calls: int) -> list[str]:
    """The problems the census finds in one round of the 200-step subject (and its
    baseline), ``calls`` checks each."""
    subjects = [
        session._subject("baseline, repeated arguments", session.PER_CALL, 0, calls),
        session._subject(
            "session rules, 200-step sessions, repeated arguments",
            session.FLOWS,
            session.FULL_STEPS,
            calls,
        ),
    ]
    session._best(1, subjects)
    result = BenchResult("session")
    session._check_the_census(result, subjects[1:], {"repeated": subjects[0][3]})
    return result.problems


def test_the_census_finds_no_problem_in_the_200_step_subject() -> None:
    assert _census_problems(40) == []


def test_the_census_reports_timed_sessions_demoted(monkeypatch: pytest.MonkeyPatch) -> None:
    """A history too small for one batch (each session demoted by the next one's
    pre-fill): the timed checks find their sessions demoted, and cannot tell."""
    monkeypatch.setattr(session, "MAX_FINGERPRINTS", 50_000)
    monkeypatch.setattr(session, "_batch", lambda steps, sessions: sessions)
    problems = _census_problems(40)
    assert any("timed sessions were demoted or dropped steps" in p for p in problems)
    assert any("checks undetermined" in p for p in problems)


def test_the_census_reports_sessions_past_their_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sessions pre-filled to the history's ``max_steps``: each timed check drops a
    data-bringing step, which the census reports (the subject would time the past's
    upkeep, not a session's check). Flows are still told there: the past keeps the
    dropped data (before schema 16 every such check was undetermined)."""
    monkeypatch.setattr(session, "BENCH_MAX_STEPS", session.FULL_STEPS)
    problems = _census_problems(40)
    assert any("timed sessions were demoted or dropped steps" in p for p in problems)
    assert not any("checks undetermined" in p for p in problems)
