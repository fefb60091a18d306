"""Records read back: what the rules had decided behind each recorded verdict, and
records that are not one decision to judge (counted, never judged, never a crash)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from interlock.core.decision import Verdict
from interlock.policy.loader import load_policy_text
from interlock.replay import Replayer
from interlock.replay.recorded import Recorded, Skipped, read_recorded
from interlock.store.records import AuditRow

POLICY = load_policy_text(
    "version: 1\ndefault: deny\nrules:\n"
    "  - id: lookups\n    decision: allow\n    reason: r\n    name: lookup\n"
)


def row(body: Any, *, kind: str = "decision", seq: int = 1) -> AuditRow:
    text = body if isinstance(body, str) else json.dumps(body, sort_keys=True)
    return AuditRow("acme", seq, 1_000_000 * seq, kind, "dec_1", "bot", None, text, "", "")


def decision(
    verdict: str = "allow", rule_ids: tuple[str, ...] = ("lookups",), **extra: Any
) -> dict[str, Any]:
    return {
        "kind": "decision",
        "action": {"kind": "tool", "name": "lookup", "arguments": {"q": "x"}},
        "agent": "bot",
        "decision": verdict,
        "rule_ids": list(rule_ids),
        **extra,
    }


@pytest.mark.parametrize(
    ("record", "pure", "stateful"),
    [
        (decision(), Verdict.ALLOW, None),
        (decision("deny", ("budget:tokens",)), Verdict.ALLOW, "budget:tokens"),
        (decision("deny", ("rate:per-minute",)), Verdict.ALLOW, "rate:per-minute"),
        (decision("require_approval", ("budget:spend",)), Verdict.ALLOW, "budget:spend"),
        (decision("allow", approval={"id": "apr_1", "url": None}), Verdict.REQUIRE_APPROVAL, None),
        (decision("deny", approval={"id": "apr_1", "url": None}), Verdict.REQUIRE_APPROVAL, None),
        (
            decision("require_approval", approval={"id": "apr_1", "url": None}),
            Verdict.REQUIRE_APPROVAL,
            None,
        ),
        (decision("allow", (), fail_open=True), Verdict.UNDETERMINED, None),
        (decision("undetermined", ()), Verdict.UNDETERMINED, None),
        # look-alikes: a rule whose id merely contains the prefixes is a rule
        (decision("deny", ("no-budget:here",)), Verdict.DENY, None),
        (decision("deny", approval=None), Verdict.DENY, None),
    ],
)
def test_what_the_rules_had_decided(
    record: dict[str, Any], pure: Verdict, stateful: str | None
) -> None:
    recorded = read_recorded(row(record))
    assert (recorded.pure, recorded.stateful) == (pure, stateful)
    assert recorded.verdict.value == record["decision"]


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ("not json", "unreadable"),
        ("[1, 2]", "unreadable"),
        ({"decision": "allow"}, "unreadable"),  # no action
        ({**decision(), "action": {"kind": "tool", "name": 7}}, "unreadable"),
        ({**decision(), "action": "lookup"}, "unreadable"),
        ({**decision(), "decision": "maybe"}, "unreadable"),
        ({**decision(), "supersedes": "allow"}, "superseded"),
        ({"kind": "decision", "error": "unencodable record: x"}, "unreadable"),
    ],
)
def test_records_that_are_not_a_decision_to_judge_are_counted(body: Any, why: str) -> None:
    with pytest.raises(Skipped) as caught:
        read_recorded(row(body))
    assert caught.value.why == why
    replayer = Replayer(POLICY)
    replayer.feed([row(body), row(decision(), seq=2)])
    assert replayer.tally.skipped == {why: 1}
    assert replayer.tally.replayed == 1 and replayer.tally.read == 2


@pytest.mark.parametrize(
    ("arguments", "rebuilt"),
    [
        ({"q": "x"}, {"q": "x"}),
        ('{"q": "x"}', {"q": "x"}),
        ("plain text", {"input": "plain text"}),
        (["a", "b"], {"input": ["a", "b"]}),
        (None, {}),
    ],
)
def test_arguments_are_rebuilt_as_a_guard_normalises_them(arguments: Any, rebuilt: Any) -> None:
    record = decision()
    record["action"] = {"kind": "tool", "name": "lookup", "arguments": arguments}
    recorded: Recorded = read_recorded(row(record))
    action = recorded.action()
    assert dict(action.arguments) == rebuilt
    assert action.context.tenant == "acme" and action.context.agent == "bot"


def test_other_record_kinds_are_not_read_at_all() -> None:
    replayer = Replayer(POLICY)
    replayer.feed([row({"kind": "approval_decided"}, kind="approval_decided"), row(decision())])
    assert replayer.tally.read == 1 and not replayer.tally.skipped


def test_a_hostile_argument_is_judged_undetermined_not_a_crash() -> None:
    deep: Any = "x"
    for _ in range(200):
        deep = {"d": deep}
    record = decision()
    record["action"]["arguments"] = {"q": deep}
    replayer = Replayer(POLICY)
    replayer.feed([row(record)])
    assert replayer.tally.replayed == 1
    assert replayer.tally.changes["undetermined_changed"] == 1  # allow → undetermined


def test_the_modules_docstring_examples_hold() -> None:
    import doctest

    from interlock.replay import compare, lossy

    for module in (compare, lossy):
        result = doctest.testmod(module)
        assert result.attempted > 0 and result.failed == 0, module.__name__
