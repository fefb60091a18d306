"""The ``scaling`` benchmark's logic: the generated policies decide every timed call as
written at every size (a benchmark of a call that decides wrongly measures nothing),
the argument sweep's texts have their sizes and its regexes are live, a wrong
expectation is reported, and a run writes its figures and the chart."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import scaling
from interlock.policy import compile_policy


@pytest.mark.parametrize("rules", scaling.POLICY_SIZES)
def test_every_policy_size_decides_the_mix_as_written(rules: int) -> None:
    data = scaling.size_policy(rules)
    assert len(data["rules"]) == rules
    assert {r["name"] for r in data["rules"]} == {"call_api"}
    calls = scaling.policy_calls(rules)
    actions, problems = scaling._verify(compile_policy(data), "call_api", calls, "t")
    assert problems == []
    assert len(actions) == 4
    assert {c.verdict for c in calls} == {"allow", "deny", "require_approval"}


def test_a_call_that_decides_otherwise_is_a_problem() -> None:
    policy = compile_policy(scaling.size_policy(100))
    wrong = scaling.Expected({"customer": "cust-00096"}, "deny", ())
    _, problems = scaling._verify(policy, "call_api", [wrong], "100 rules")
    assert len(problems) == 1
    assert problems[0].startswith("100 rules: a call meant to be deny [] is allow ['r00096']")


@pytest.mark.parametrize(("label", "size"), scaling.ARG_SIZES)
def test_the_argument_sweep_texts_are_harmless_and_sized(label: str, size: int) -> None:
    text = scaling.arg_text(size)
    assert len(text) == (size or len(text))
    policy = compile_policy(scaling.arg_policy())
    _, problems = scaling._verify(policy, "run_query", scaling.arg_calls(size), label)
    assert problems == []


def test_the_argument_regexes_are_live_at_the_end_of_a_long_text() -> None:
    policy = compile_policy(scaling.arg_policy())
    assert len([r for r in scaling.arg_policy()["rules"] if r["decision"] == "deny"]) == 40
    text = scaling.arg_text(102_400) + " TRUNCATE TABLE t17"  # rule 17: _WORDS[17 % 8]
    expected = scaling.Expected({"sql": text}, "deny", ("sql-17",))
    _, problems = scaling._verify(policy, "run_query", [expected], "tail")
    assert problems == []


def test_a_short_run_writes_its_points_and_a_png(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(scaling, "RESULTS_DIR", tmp_path)
    monkeypatch.setattr(scaling, "POLICY_SIZES", (10, 100, 5_000))
    result = scaling.run(calls=40)
    assert result.problems == []
    sweeps = [(p["sweep"], p["label"]) for p in result.info["points"]]
    assert sweeps == [
        ("rules", "10 rules"),
        ("rules", "100 rules"),
        ("rules", "5,000 rules"),
        ("bytes", "short"),
        ("bytes", "1 KB"),
        ("bytes", "100 KB"),
        ("bytes", "1 MB"),
    ]
    assert [p["calls"] for p in result.info["points"]][-1] == scaling.MIN_CALLS
    assert len(result.targets) == 3
    assert len(result.stats) == 3 * len(sweeps)
    assert (tmp_path / "scaling.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
