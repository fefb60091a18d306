"""Replay under drafts: a loosened one caught, a tightened one, an identical one with
no change; stateful verdicts not replayed; approvals claimed read as approvals."""

from __future__ import annotations

from collections import Counter

from interlock.policy.engine import evaluate
from interlock.policy.loader import load_policy_text
from interlock.replay import CHANGES, ReplayFilter, replay_store
from interlock.replay.demo_log import demo_actions
from interlock.store import SqlStore

from .conftest import EXAMPLE, LOOSENED, RECORDS, TIGHTENED, draft


def _expected_changes(old_text: str, new_text: str) -> Counter[str]:
    """What the change should be, worked out from the calls themselves (not the log)."""
    old, new = load_policy_text(old_text), load_policy_text(new_text)
    found: Counter[str] = Counter()
    for action in demo_actions(RECORDS):
        before, after = evaluate(action, old).verdict, evaluate(action, new).verdict
        if before is not after:
            found[f"{before.value}->{after.value}"] += 1
    return found


def test_the_identical_policy_changes_nothing(log: SqlStore) -> None:
    report = replay_store(log, load_policy_text(EXAMPLE))
    data = report.as_json("any")
    assert data["records"]["replayed"] == RECORDS
    assert data["outcome"]["changed"] == 0
    assert data["outcome"]["rules_changed"] == 0
    assert data["outcome"]["cannot_tell"] == 0
    assert data["outcome"]["unchanged"] == RECORDS
    assert all(count == 0 for count in data["changes"].values())
    assert data["failed"] is False


def test_a_loosened_draft_is_caught_as_deny_to_allow(log: SqlStore) -> None:
    expected = _expected_changes(EXAMPLE, LOOSENED)
    assert set(expected) == {"deny->allow"}  # the edit does one thing
    report = replay_store(log, load_policy_text(LOOSENED))
    data = report.as_json("loosen")
    assert data["changes"]["deny_to_allow"] == expected["deny->allow"] > 0
    assert data["loosened"] == expected["deny->allow"]
    assert data["tightened"] == 0
    assert report.fails("loosen") and data["failed"] is True
    example = data["examples"]["deny_to_allow"][0]
    assert example["tool"] == "fetch_url" and "pastebin.example.net" in example["arguments"]
    assert example["recorded"]["verdict"] == "deny" and example["draft"]["verdict"] == "allow"
    assert data["rules"]["net-known-hosts"]["changes"] == {"deny_to_allow": expected["deny->allow"]}


def test_a_tightened_draft_is_not_a_loosening(log: SqlStore) -> None:
    expected = _expected_changes(EXAMPLE, TIGHTENED)
    assert set(expected) == {"allow->deny"}
    report = replay_store(log, load_policy_text(TIGHTENED))
    data = report.as_json()
    assert data["changes"]["allow_to_deny"] == expected["allow->deny"] > 0
    assert data["loosened"] == 0 and data["tightened"] == expected["allow->deny"]
    assert not report.fails("loosen") and report.fails("any")
    assert data["rules"]["email-allowed"]["old"] > 0
    assert "email-allowed" not in report.policy.rule_ids


def test_approvals_added_and_removed_are_named(log: SqlStore) -> None:
    removed = draft("args.amount: {lte: 100}", "args.amount: {lte: 1000}").replace(
        "args.amount > 100.0", "args.amount > 500.0"
    )
    data = replay_store(log, load_policy_text(removed)).as_json("loosen")
    assert data["changes"]["approval_removed"] > 0 and data["failed"]
    # claimed approvals were recorded as allow; the rules had asked for approval
    assert data["changes"]["deny_to_allow"] == 0
    added = draft(
        "decision: allow\n    reason: refunds up to 100",
        "decision: require_approval\n    reason: refunds up to 100",
    )
    data = replay_store(log, load_policy_text(added)).as_json("loosen")
    assert data["changes"]["approval_added"] > 0
    assert data["loosened"] == 0 and not data["failed"]


def test_budget_refusals_are_stateful_not_replayed(log: SqlStore) -> None:
    data = replay_store(log, load_policy_text(EXAMPLE)).as_json()
    recorded = data["stateful"]["recorded"]
    assert set(recorded) == {"budget:model-tokens"} and recorded["budget:model-tokens"] > 0
    # every model call the draft allows is covered by its token budget: not replayed
    models = sum(1 for action in demo_actions(RECORDS) if action.kind == "llm")
    assert data["stateful"]["draft"] == {"model-tokens": models}
    assert "not replayed" in data["stateful"]["note"]


def test_rules_the_draft_never_fires_are_listed(log: SqlStore) -> None:
    unused = EXAMPLE + (
        "\n  - id: never-used\n    decision: deny\n    reason: no such tool\n"
        "    name: launch_rocket\n"
    )
    report = replay_store(log, load_policy_text(unused))
    assert report.never_fired == ["never-used"]


def test_filters_pick_the_records(log: SqlStore) -> None:
    policy = load_policy_text(EXAMPLE)
    actions = list(demo_actions(RECORDS))
    cases = [
        (ReplayFilter(tenant="globex"), [a for a in actions if a.context.tenant == "globex"]),
        (ReplayFilter(agent="ops-bot"), [a for a in actions if a.context.agent == "ops-bot"]),
        (ReplayFilter(tool="refund_*"), [a for a in actions if a.name.startswith("refund_")]),
    ]
    start = 1_767_571_200_000_000
    cases.append(
        (
            ReplayFilter(since_us=start + 6_000_000 * 100, until_us=start + 6_000_000 * 250),
            actions[100:250],
        )
    )
    for filters, expected in cases:
        data = replay_store(log, policy, filters).as_json()
        assert data["records"]["replayed"] == len(expected) > 0, filters
        assert data["filters"] == filters.as_dict()


def test_the_json_document_has_its_documented_shape(log: SqlStore) -> None:
    data = replay_store(log, load_policy_text(LOOSENED), examples=2).as_json("loosen")
    assert data["schema"] == "interlock.replay/1"
    assert set(data) == {
        "schema",
        "policy",
        "filters",
        "records",
        "outcome",
        "changes",
        "loosening",
        "loosened",
        "tightened",
        "stateful",
        "rules",
        "never_fired",
        "examples",
        "fail_on",
        "failed",
    }
    assert tuple(data["changes"]) == CHANGES
    assert set(data["records"]) == {"read", "replayed", "skipped", "truncated"}
    assert set(data["outcome"]) == {"unchanged", "rules_changed", "changed", "cannot_tell"}
    assert all(len(found) <= 2 for found in data["examples"].values())
    example = data["examples"]["deny_to_allow"][0]
    assert set(example) == {
        "decision_id",
        "seq",
        "time",
        "tenant",
        "agent",
        "kind",
        "tool",
        "arguments",
        "recorded",
        "draft",
    }
    assert set(example["draft"]) == {"verdict", "rule_ids", "reason"}


def test_max_records_cuts_short_and_says_so(log: SqlStore) -> None:
    data = replay_store(log, load_policy_text(EXAMPLE), max_records=100).as_json()
    assert data["records"]["replayed"] == 100 and data["records"]["truncated"] is True


def test_memo_gives_the_same_report_as_judging_each_call(log: SqlStore) -> None:
    from interlock.replay import replay_rows

    rows = list(log.audit_rows(kind="decision"))
    policy = load_policy_text(LOOSENED)
    once, each = replay_rows(rows, policy), replay_rows(rows, policy, memo=False)
    assert once.as_json() == each.as_json()


def test_undetermined_records_compare_as_undetermined(log: SqlStore) -> None:
    # "a lot" is not a number: refund-large's `when` cannot be judged (undetermined);
    # a draft without the refund rules decides those calls by its default
    no_refund_rules = draft('when: "has(args.amount) && args.amount > 100.0"', "kind: [llm]")
    no_refund_rules = no_refund_rules.replace("args.amount: {lte: 100}", "args.x: 1")
    expected = _expected_changes(EXAMPLE, no_refund_rules)
    assert expected["undetermined->deny"] > 0
    data = replay_store(log, load_policy_text(no_refund_rules)).as_json("loosen")
    assert data["changes"]["undetermined_changed"] == expected["undetermined->deny"]
    example = data["examples"]["undetermined_changed"][0]
    assert example["recorded"]["verdict"] == "undetermined" and "a lot" in example["arguments"]
