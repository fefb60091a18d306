"""A rule's ``severity``: validated with file, line, rule and field like every other
value (by both validators, which agree), compiled onto the rule, and summed up for an
approval as the highest severity of the rules that asked for it."""

from __future__ import annotations

from typing import Any

import pytest

from interlock import PolicyError, load_policy_text
from interlock.policy.schema import PolicyModel, policy_json_schema
from interlock.policy.validate import validate_policy
from interlock.policy.validated import from_model

RULE = "  - id: {id}\n    decision: require_approval\n    reason: x\n    name: {name}\n"


def policy(*severities: Any) -> str:
    text = "version: 1\nrules:\n"
    for n, severity in enumerate(severities):
        text += RULE.format(id=f"r{n}", name=f"t{n}")
        if severity is not None:
            text += f"    severity: {severity}\n"
    return text


@pytest.mark.parametrize("severity", ["low", "medium", "high", "critical"])
def test_each_severity_loads_onto_its_rule(severity: str) -> None:
    compiled = load_policy_text(policy(severity, None))
    assert [rule.severity for rule in compiled.rules] == [severity, None]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("High", "Input should be 'low', 'medium', 'high' or 'critical'"),
        ("severe", "Input should be 'low', 'medium', 'high' or 'critical'"),
        ("'high '", "Input should be 'low', 'medium', 'high' or 'critical'"),
        ("''", "Input should be 'low', 'medium', 'high' or 'critical'"),
        ("3", "Input should be 'low', 'medium', 'high' or 'critical'"),
        ("true", "Input should be 'low', 'medium', 'high' or 'critical'"),
        ("[high]", "Input should be 'low', 'medium', 'high' or 'critical'"),
        ("{level: high}", "Input should be 'low', 'medium', 'high' or 'critical'"),
    ],
)
def test_a_bad_severity_names_file_line_rule_and_field(value: str, message: str) -> None:
    text = policy(None, value)  # the second rule's severity: line 11
    with pytest.raises(PolicyError) as failed:
        load_policy_text(text, file="policy.yaml")
    error = failed.value
    assert (error.file, error.line, error.rule_id, error.field) == (
        "policy.yaml",
        11,
        "r1",
        "severity",
    ), str(error)
    assert message in str(error)
    assert str(error).startswith("policy.yaml:11")


@pytest.mark.parametrize("severity", [None, "low", "critical", "HIGH", 2, ["high"], ""])
def test_both_validators_agree_on_severity(severity: Any) -> None:
    rule: dict[str, Any] = {"id": "r", "decision": "deny", "reason": "x"}
    if severity is not None:
        rule["severity"] = severity
    data = {"version": 1, "rules": [rule]}
    plain = validate_policy(data)
    try:
        reference = from_model(PolicyModel.model_validate(data))
    except ValueError:
        reference = None
    if plain is not None:
        assert reference == plain
    valid = severity is None or severity in ("low", "critical")
    assert (reference is not None) == valid
    assert (plain is not None) == valid  # a valid one needs no models; a bad one goes to them


def test_the_json_schema_publishes_the_severities() -> None:
    schema = policy_json_schema()
    rule = schema["$defs"]["RuleModel"]["properties"]["severity"]
    assert {"enum": ["low", "medium", "high", "critical"], "type": "string"} in rule["anyOf"]


@pytest.mark.parametrize(
    ("severities", "asked_by", "expected"),
    [
        (("low", "critical", "high"), ("r0", "r2"), "high"),
        (("low", "critical", "high"), ("r0", "r1", "r2"), "critical"),
        (("medium", None), ("r0", "r1"), "medium"),
        ((None, None), ("r0", "r1"), None),
        (("high",), ("budget-id", "unknown"), None),
        (("high",), (), None),
    ],
)
def test_an_approval_gets_the_highest_severity_of_its_rules(
    severities: tuple[Any, ...], asked_by: tuple[str, ...], expected: str | None
) -> None:
    compiled = load_policy_text(policy(*severities))
    assert compiled.severity_of(asked_by) == expected


def test_tool_descriptions_are_kept_by_name() -> None:
    compiled = load_policy_text(
        "version: 1\ntools:\n"
        "  refund_order:\n    description: Refunds an order.\n"
        "    parameters: {type: object, properties: {}}\n"
        "  blank:\n    description: '  '\n    parameters: {type: object, properties: {}}\n"
        "  bare:\n    parameters: {type: object, properties: {}}\n"
    )
    assert dict(compiled.tool_descriptions) == {"refund_order": "Refunds an order."}


def test_the_docs_error_example_is_what_the_loader_says() -> None:
    import re
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "approvals-ui.md").read_text()
    policy_text = re.search(r"```yaml\n(.*?)```", doc, re.DOTALL)
    shown = re.search(r"```text\n(interlock\.yaml:\d+: rule .*?)\n```", doc, re.DOTALL)
    assert policy_text is not None and shown is not None
    bad = policy_text.group(1).replace("severity: high ", "severity: severe")
    assert bad != policy_text.group(1)
    with pytest.raises(PolicyError) as failed:
        load_policy_text(bad, file="interlock.yaml")
    assert str(failed.value) == shown.group(1)
