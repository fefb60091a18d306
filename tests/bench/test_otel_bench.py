"""``python -m bench otel`` runs its subjects, and its extra-absent run loads nothing of
OpenTelemetry (no timing is asserted)."""

from __future__ import annotations

import pytest

pytest.importorskip("opentelemetry.sdk")

from bench.__main__ import BENCHMARKS
from bench.otel import run


def test_the_otel_bench_measures_every_subject_against_its_baseline() -> None:
    assert "otel" in BENCHMARKS
    result = run(200)
    assert result.problems == []
    labels = [s.label for s in result.stats]
    assert labels[0] == "check, plain (baseline)"
    assert {"check, telemetry, API only (no SDK)", "protect, plain (baseline)"} <= set(labels)
    assert all(s.calls == 200 for s in result.stats)
    absent = result.info["absent (fresh interpreter, opentelemetry hidden)"]
    assert absent["opentelemetry_modules_loaded"] == []
    assert result.info["check, plain (baseline)"]["p50_ratio"] == 1.0
