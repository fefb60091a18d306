"""A bad policy is refused at load, with file, line, rule id and field — never half-loaded."""

from __future__ import annotations

import fnmatch
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from interlock import PolicyError, load_policy, load_policy_text
from interlock.policy import matchers, policy_json_schema
from interlock.policy.schema import PolicyModel

GOOD_RULE = """\
  - id: ok
    decision: allow
    reason: fine
"""


def _error(text: str) -> PolicyError:
    with pytest.raises(PolicyError) as info:
        load_policy_text(text, file="policy.yaml")
    return info.value


@pytest.mark.parametrize(
    ("text", "line", "rule_id", "field", "message"),
    [
        ("version: 2\n", 1, None, "version", "Input should be 1"),
        ("rules: []\n", 1, None, "version", "missing required field 'version'"),
        ("version: 1\ndefault: maybe\n", 2, None, "default", "Input should be"),
        ("version: 1\nbogus: 1\n", 2, None, "bogus", "unknown field 'bogus'"),
        (
            "version: 1\nrules:\n" + GOOD_RULE + "  - id: second\n    decision: deny\n",
            6,
            "second",
            "reason",
            "missing required field 'reason'",
        ),
        (
            "version: 1\nrules:\n  - id: r\n    decision: nope\n    reason: x\n",
            4,
            "r",
            "decision",
            "Input should be",
        ),
        (
            "version: 1\nrules:\n  - id: r\n    decision: deny\n    reason: x\n    colour: red\n",
            6,
            "r",
            "colour",
            "unknown field 'colour'",
        ),
        (
            "version: 1\nrules:\n  - id: r\n    decision: deny\n    reason: x\n"
            "    params:\n      comand: ls\n",
            7,
            "r",
            "params.comand",
            "unknown parameter 'comand'",
        ),
        (
            "version: 1\nrules:\n  - id: r\n    decision: deny\n    reason: x\n"
            "    params:\n      args.amount: {gt: lots}\n",
            7,
            "r",
            "params.args.amount.gt",
            "valid number",
        ),
        (
            "version: 1\nrules:\n  - id: r\n    decision: deny\n    reason: x\n"
            "    when: 'args.amount >'\n",
            6,
            "r",
            "when",
            "invalid CEL expression",
        ),
        (
            "version: 1\nrules:\n  - id: r\n    decision: deny\n    reason: x\n"
            "    when: 'argz.amount > 1'\n",
            6,
            "r",
            "when",
            "unknown variable(s) argz",
        ),
        (
            "version: 1\nrules:\n  - id: r\n    decision: deny\n    reason: x\n"
            "    params:\n      command: {regex: '(unclosed'}\n",
            7,
            "r",
            "params.command.regex",
            "invalid regex",
        ),
        (
            "version: 1\nrules:\n  - id: r\n    decision: deny\n    reason: x\n"
            "    params:\n      args.sql: {regex: '^delete(?!.*where)'}\n",
            7,
            "r",
            "params.args.sql.regex",
            "RE2 syntax, which runs in linear time: no backreferences or lookarounds",
        ),
        (
            "version: 1\nrules:\n  - id: r\n    decision: deny\n    reason: x\n"
            "    params:\n      args.x: {not_regex: ['ok', '(a)\\1']}\n",
            7,
            "r",
            "params.args.x.not_regex.1",
            "no backreferences or lookarounds",
        ),
        (
            "version: 1\nrules:\n  - id: r\n    decision: deny\n    reason: x\n    shell: {}\n",
            6,
            "r",
            "shell",
            "a shell condition needs programs, commands or writes",
        ),
        (
            "version: 1\nrules:\n" + GOOD_RULE + GOOD_RULE,
            6,
            "ok",
            "id",
            "duplicate rule id",
        ),
        ("version: 1\nversion: 1\n", 2, None, "version", "duplicate key 'version'"),
        ("version: 1\nrules: [\n", 3, None, None, "not valid YAML"),
        (
            "version: 1\nrules:\n  - id: 'bad id!'\n    decision: deny\n    reason: x\n",
            3,
            "bad id!",
            "id",
            "String should match pattern",
        ),
        (
            "version: 1\nrules:\n  - id: r\n    decision: deny\n    reason: x\n    kind: tools\n",
            6,
            "r",
            "kind",
            "unknown kind 'tools'",
        ),
        (
            "version: 1\nrules:\n  - id: r\n    decision: deny\n    reason: x\n"
            "    params:\n      command: {}\n",
            7,
            "r",
            "params.command",
            "at least one test",
        ),
        ("", 1, None, None, "the policy is empty"),
    ],
)
def test_a_bad_policy_names_file_line_rule_and_field(
    text: str, line: int, rule_id: str | None, field: str | None, message: str
) -> None:
    error = _error(text)
    assert error.file == "policy.yaml"
    assert error.line == line, str(error)
    assert error.rule_id == rule_id, str(error)
    assert error.field == field, str(error)
    assert message in str(error)
    assert str(error).startswith(f"policy.yaml:{line}")


def test_every_problem_is_reported_not_just_the_first() -> None:
    error = _error(
        "version: 1\nrules:\n"
        "  - id: a\n    decision: deny\n    reason: x\n    when: 'nope >'\n"
        "  - id: b\n    decision: deny\n    reason: x\n    params: {path: {regex: '['}}\n"
    )
    assert [issue.rule_id for issue in error.issues] == ["a", "b"]
    assert "2 problems" in str(error)


def test_a_policy_error_is_a_value_error_and_nothing_is_loaded(tmp_path: Path) -> None:
    path = tmp_path / "interlock.yaml"
    path.write_text("version: 1\nrules:\n" + GOOD_RULE + "  - id: bad\n    decision: deny\n")
    with pytest.raises(ValueError, match=r"interlock.yaml:6: rule 'bad': field 'reason'"):
        load_policy(path)


def test_a_missing_file_is_a_policy_error(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="policy file not found"):
        load_policy(tmp_path / "absent.yaml")


def test_defaults_are_deny_and_enforce() -> None:
    policy = load_policy_text("version: 1\n")
    assert policy.default.value == "deny"
    assert policy.shadow_mode is False
    assert policy.rules == ()


def test_the_shipped_example_policy_loads() -> None:
    from interlock.demo import example_policy_text

    policy = load_policy_text(example_policy_text(), file="example")
    assert len(policy.rules) >= 8


def test_the_json_schema_validates_the_example_and_names_every_field() -> None:
    schema = policy_json_schema()
    assert schema["title"].startswith("Interlock policy")
    assert set(schema["properties"]) == set(PolicyModel.model_fields)
    rule = schema["$defs"]["RuleModel"]["properties"]
    for field in (
        "id",
        "decision",
        "reason",
        "mode",
        "kind",
        "name",
        "scope",
        "agent",
        "tenant",
        "params",
        "when",
    ):
        assert field in rule
    condition = schema["$defs"]["Condition"]["anyOf"][0]
    assert "in" in condition["properties"]  # the alias, not in_
    shorthands = [alt.get("type") for alt in schema["$defs"]["Condition"]["anyOf"][1:]]
    assert "string" in shorthands and "array" in shorthands
    json.dumps(schema)  # serialisable


def test_the_json_schema_accepts_the_example_with_jsonschema() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    import yaml

    from interlock.demo import example_policy_text

    jsonschema.validate(yaml.safe_load(example_policy_text()), policy_json_schema())


@given(st.text(max_size=20) | st.text(alphabet="ab*?[]!-.\\^$", max_size=12))
@settings(max_examples=500, deadline=None)
def test_a_glob_is_translated_to_fnmatch_s_own_regex(glob: str) -> None:
    # The glob sets compile fnmatch's text, with a short cut for a glob without
    # wildcards (ADR 0014): the text must be the same whichever way it is made.
    assert matchers._translate(glob) == fnmatch.translate(glob)
