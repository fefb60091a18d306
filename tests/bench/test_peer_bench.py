"""The ``peer`` benchmark's correctness checks: the policy in the peer's shape and its
Interlock translation decide every call of the mix alike, and any disagreement —
between Interlock and the calls' intended decisions, the peer's semantics, or the
peer itself — is reported as a problem (``python -m bench peer`` exits 2 on one).

The peer's own process is exercised only when its environment (``bench/.peer-venv``,
created by the benchmark) is installed; everything else runs without it."""

from __future__ import annotations

import os
from typing import Any

import pytest
from bench.peer import benchmark
from bench.peer.policy import (
    CALLS,
    PeerRule,
    interlock_yaml,
    peer_context,
    peer_document,
    reference_decision,
    rules,
)

PEER_PYTHON = benchmark.peer_python()
if PEER_PYTHON is None and os.environ.get("INTERLOCK_REQUIRE_PEER"):
    # CI builds the peer's environment first (.ci/run): there, its absence is a failure
    raise RuntimeError(
        "INTERLOCK_REQUIRE_PEER is set but the peer environment is not installed "
        "(python -m bench.peer.benchmark --setup)"
    )
needs_peer = pytest.mark.skipif(
    PEER_PYTHON is None, reason="the peer environment is not installed (python -m bench peer)"
)


def _without(rule_name: str) -> list[PeerRule]:
    spec = [r for r in rules() if r.name != rule_name]
    assert len(spec) == len(rules()) - 1
    return spec


def test_the_policy_has_100_rules_and_every_deny_outranks_every_allow() -> None:
    spec = rules()
    assert len(spec) == 100
    assert len({r.name for r in spec}) == 100
    assert min(r.priority for r in spec if r.action == "deny") > max(
        r.priority for r in spec if r.action == "allow"
    )
    document = peer_document(spec)
    assert document["defaults"] == {"action": "deny"}
    assert [r["name"] for r in document["rules"]] == [r.name for r in spec]


def test_interlock_decides_the_mix_as_written_and_as_the_peer_semantics_do() -> None:
    setup = benchmark.build()
    assert setup.problems == []
    assert {c.expect for c in CALLS} == {"allow", "deny"}
    assert any(c.expect_rules == () for c in CALLS)  # the default decides one call
    assert any(len(c.expect_rules) > 1 for c in CALLS)  # and two rules tie on one
    for call, row in zip(CALLS, setup.rows, strict=True):
        assert (row["interlock"], row["rule_ids"]) == (call.expect, call.expect_rules)
        assert reference_decision(setup.spec, peer_context(call)) == (
            call.expect,
            call.expect_rules,
        )


def test_a_mistranslated_rule_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    # Interlock gets the policy without the amount rule; the peer's side keeps it.
    monkeypatch.setattr(
        benchmark, "interlock_yaml", lambda spec: interlock_yaml(_without("deny-amount-large"))
    )
    problems = benchmark.build().problems
    assert any("translation disagrees on refund_order" in p for p in problems)
    assert any("refund_order" in p and "meant to be deny" in p for p in problems)


def _answer(*, allowed: bool, rule: str | None, action: str) -> dict[str, Any]:
    matching = [] if rule is None else [{"name": rule, "action": action}]
    return {
        "allowed": allowed,
        "action": action,
        "matched_rule": rule,
        "reason": "test",
        "matching": matching,
    }


def _agreeing_answers() -> list[dict[str, Any]]:
    out = []
    for call in CALLS:
        answer = _answer(
            allowed=call.expect == "allow",
            rule=call.expect_rules[0] if call.expect_rules else None,
            action=call.expect,
        )
        answer["matching"] = [{"name": r, "action": call.expect} for r in call.expect_rules]
        out.append(answer)
    return out


def test_compare_accepts_answers_that_agree() -> None:
    assert benchmark.compare(benchmark.build(), _agreeing_answers()) == []


def test_compare_reports_a_different_verdict_and_a_different_rule_set() -> None:
    answers = _agreeing_answers()
    answers[0] = _answer(allowed=False, rule=None, action="deny")  # read_file: allow
    answers[4]["matching"] = answers[4]["matching"][:1]  # one of the two path rules
    problems = benchmark.compare(benchmark.build(), answers)
    assert len(problems) == 2
    assert problems[0].startswith("VERDICT MISMATCH on read_file")
    assert problems[1].startswith("rule mismatch on read_file")


@needs_peer
def test_the_peer_itself_agrees_with_interlock_on_the_mix() -> None:
    assert PEER_PYTHON is not None
    setup = benchmark.build()
    with benchmark.PeerProcess(PEER_PYTHON) as peer:
        loaded = peer.request(op="load", document=setup.document)
        assert loaded["rules"] == 100
        answers = peer.request(op="decide", contexts=setup.contexts)["decisions"]
    assert benchmark.compare(setup, answers) == []
    for answer, call in zip(answers, CALLS, strict=True):
        # The peer reports its first match; it is one of Interlock's rule ids.
        assert answer["matched_rule"] in (call.expect_rules or (None,))


@needs_peer
def test_the_peer_with_a_rule_missing_disagrees() -> None:
    assert PEER_PYTHON is not None
    setup = benchmark.build()
    with benchmark.PeerProcess(PEER_PYTHON) as peer:
        peer.request(op="load", document=peer_document(_without("deny-amount-large")))
        answers = peer.request(op="decide", contexts=setup.contexts)["decisions"]
        timed = peer.request(op="time", contexts=setup.contexts, calls=12, warmup=6)
        with pytest.raises(RuntimeError, match="the peer failed on 'nope'"):
            peer.request(op="nope")
    problems = benchmark.compare(setup, answers)
    assert len(problems) == 1
    assert problems[0].startswith("VERDICT MISMATCH on refund_order")
    assert "the peer allow (allow-refund-order" in problems[0]
    assert len(timed["samples"]) == 12
    assert all(s > 0 for s in timed["samples"])


@needs_peer
def test_python_m_bench_peer_exits_2_when_the_engines_disagree(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from bench import __main__ as runner
    from bench import harness

    monkeypatch.setattr(harness, "RESULTS_DIR", tmp_path)
    assert runner.main(["peer", "--calls", "120"]) == 0
    monkeypatch.setattr(
        benchmark, "interlock_yaml", lambda spec: interlock_yaml(_without("deny-path-ssh"))
    )
    assert runner.main(["peer", "--calls", "120"]) == 2
    out = capsys.readouterr().out
    assert "CORRECTNESS PROBLEM" in out
    assert "rule mismatch on read_file" in out
