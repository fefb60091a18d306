"""Session-aware policy syntax: `session:`, `labels:`, tool labels, rule `session:`
conditions and the CEL session functions — what loads, and the errors (file, line,
field) of what does not."""

from __future__ import annotations

import textwrap

import pytest

from interlock.errors import PolicyError
from interlock.policy import load_policy_text
from interlock.policy.schema import policy_json_schema

FULL = """\
version: 1
default: allow
session:
  max_steps: 50
  expire_after: 2h
labels:
  - id: secrets-read
    attach: [secret]
    kind: tool
    name: read_file
    params:
      path: {glob: ["**/.ssh/**", "**/.env", "**/*.pem"]}
  - id: reviewed
    clear: [untrusted]
    name: mark_reviewed
  - id: untrusted-mcp
    attach: [untrusted]
    kind: mcp
    params:
      server: {glob: ["tracker", "web-*"]}
tools:
  fetch_url:
    labels: [untrusted]
rules:
  - id: no-exfil-after-secret
    decision: deny
    reason: data read from a secret may not leave
    scope: network
    session:
      labels: [secret]
      after:
        name: read_file
        within: 10
        within_time: 10m
        at_least: 1
      flows_from:
        labels: [secret]
        args: [body, url]
      provenance:
        args: [to, url, command]
        from: [untrusted]
  - id: cel
    decision: deny
    reason: cel
    when: >
      "secret" in session.labels && session.ran("read_*") && session.count("x") < 3
      && (flows_from("read_file") || flows_from_label("secret")
      || size(provenance("to")) > 0)
"""


def test_the_full_syntax_loads() -> None:
    policy = load_policy_text(FULL)
    spec = policy.sessions
    assert spec is not None
    assert spec.max_steps == 50 and spec.expire_after == 7200.0
    assert [r.id for r in spec.label_rules] == ["secrets-read", "reviewed", "untrusted-mcp"]
    assert spec.label_rules[0].attach == {"secret"} and spec.label_rules[1].clear == {"untrusted"}
    assert spec.tool_labels == {"fetch_url": {"untrusted"}}
    rule = policy.rules[1]
    session = next(r for r in policy.rules if r.id == "no-exfil-after-secret").session
    assert session is not None and session.after is not None
    assert session.after.within == 10 and session.after.within_time == 600.0
    assert session.flows_from is not None and session.flows_from.args == ("body", "url")
    assert session.provenance is not None and session.provenance.sources == {"untrusted"}
    assert rule.when is not None and {c[1] for c in rule.when.session} == {
        "labels",
        "ran",
        "count",
        "flows_from",
        "flows_from_label",
        "provenance",
    }


def test_a_policy_without_session_features_keeps_no_sessions() -> None:
    policy = load_policy_text(
        "version: 1\nrules:\n  - {id: a, decision: allow, reason: r, name: x}\n"
        "session: {max_steps: 10}\n"
    )
    assert policy.sessions is None


def test_tool_labels_alone_make_the_policy_keep_sessions() -> None:
    policy = load_policy_text("version: 1\ntools:\n  fetch_url: {labels: [untrusted]}\n")
    assert policy.sessions is not None


def test_the_json_schema_shows_the_session_syntax() -> None:
    schema = policy_json_schema()
    assert {"session", "labels"} <= set(schema["properties"])
    defs = schema["$defs"]
    assert {"SessionCondition", "SessionAfter", "SessionFlow", "SessionProvenance"} <= set(defs)
    assert "labels" in defs["ToolModel"]["properties"]
    assert "from" in defs["SessionProvenance"]["properties"]


def _errors(text: str) -> list[tuple[int | None, str | None, str | None, str]]:
    with pytest.raises(PolicyError) as caught:
        load_policy_text(textwrap.dedent(text), file="p.yaml")
    issues = caught.value.issues
    assert all(issue.file == "p.yaml" for issue in issues)
    return [(i.line, i.rule_id, i.field, i.message) for i in issues]


RULE_HEAD = """\
version: 1
rules:
  - id: r1
    decision: deny
    reason: r
"""

# (what is wrong, the rule body after the head, the line, the field, a word of the message)
RULE_ERRORS = [
    (
        "unknown session field",
        "    session:\n      lables: [secret]\n",
        7,
        "session.lables",
        "unknown",
    ),
    ("empty session", "    session: {}\n", 6, "session", "needs"),
    ("label not a list", "    session:\n      labels: secret\n", 7, "session.labels", "list"),
    ("empty label list", "    session:\n      labels: []\n", 7, "session.labels", "at least"),
    ("bad label text", "    session:\n      labels: ['a b']\n", 7, "session.labels.0", "pattern"),
    (
        "within not positive",
        "    session:\n      after: {name: x, within: 0}\n",
        7,
        "session.after.within",
        "greater",
    ),
    (
        "at_least text",
        "    session:\n      after: {name: x, at_least: '2'}\n",
        7,
        "session.after.at_least",
        "integer",
    ),
    (
        "unknown kind",
        "    session:\n      after: {kind: tol}\n",
        7,
        "session.after.kind",
        "unknown kind",
    ),
    (
        "provenance without from",
        "    session:\n      provenance: {args: [to]}\n",
        7,
        "session.provenance.from",
        "missing",
    ),
    (
        "provenance without args",
        "    session:\n      provenance: {from: [untrusted]}\n",
        7,
        "session.provenance.args",
        "missing",
    ),
    (
        "flow with an unknown field",
        "    session:\n      flows_from: {name: x, arg: [a]}\n",
        7,
        "session.flows_from.arg",
        "unknown",
    ),
    (
        "bad duration",
        "    session:\n      after: {name: x, within_time: soon}\n",
        7,
        "session.after.within_time",
        "duration",
    ),
]


@pytest.mark.parametrize(
    ("body", "line", "field", "word"),
    [case[1:] for case in RULE_ERRORS],
    ids=[case[0] for case in RULE_ERRORS],
)
def test_a_bad_session_condition_names_file_line_rule_and_field(
    body: str, line: int, field: str, word: str
) -> None:
    errors = _errors(RULE_HEAD + body)
    assert len(errors) == 1, errors
    got_line, rule_id, got_field, message = errors[0]
    assert (got_line, rule_id, got_field) == (line, "r1", field)
    assert word.lower() in message.lower()


CEL_ERRORS = [
    ("session bare", "session == 1", "`session` is read as"),
    ("session unknown field", "session.lables == []", "`session` is read as"),
    ("ran without argument", "session.ran()", "exactly one string literal"),
    ("ran two arguments", 'session.ran("a", "b")', "exactly one string literal"),
    ("ran a number", "session.ran(1)", "exactly one string literal"),
    ("count a variable", "session.count(args.x) > 1", "exactly one string literal"),
    ("labels called", 'session.labels("x")', "`session` is read as"),
    ("flows_from bare", "flows_from", "is a function"),
    ("flows_from no argument", "flows_from()", "exactly one string literal"),
    ("provenance two", 'provenance("a", "b") == []', "exactly one string literal"),
    ("flows_from_label empty", 'flows_from_label("")', "non-empty"),
    ("flows_from bytes", 'flows_from(b"x")', "not bytes"),
]


@pytest.mark.parametrize(
    ("when", "word"), [c[1:] for c in CEL_ERRORS], ids=[c[0] for c in CEL_ERRORS]
)
def test_a_misused_session_function_is_a_load_error_on_the_when_line(when: str, word: str) -> None:
    errors = _errors(RULE_HEAD + f"    when: '{when}'\n")
    assert len(errors) == 1, errors
    line, rule_id, field, message = errors[0]
    assert (line, rule_id, field) == (6, "r1", "when")
    assert word in message


LABEL_ERRORS = [
    ("neither attach nor clear", "  - {id: l1, name: x}\n", "needs attach or clear"),
    ("unknown field", "  - {id: l1, attach: [a], nmae: x}\n", "unknown field"),
    ("bad param", "  - {id: l1, attach: [a], params: {pth: x}}\n", "unknown parameter"),
    ("bad cel", "  - {id: l1, attach: [a], when: 'session.ran()'}\n", "exactly one"),
]


@pytest.mark.parametrize(
    ("body", "word"), [c[1:] for c in LABEL_ERRORS], ids=[c[0] for c in LABEL_ERRORS]
)
def test_a_bad_label_rule_names_its_id_and_line(body: str, word: str) -> None:
    errors = _errors("version: 1\nlabels:\n" + body)
    assert len(errors) == 1, errors
    line, rule_id, _field, message = errors[0]
    assert (line, rule_id) == (3, "l1")
    assert word in message


def test_duplicate_label_rule_ids_are_refused() -> None:
    errors = _errors(
        "version: 1\nlabels:\n  - {id: l1, attach: [a], name: x}\n"
        "  - {id: l1, attach: [b], name: y}\n"
    )
    assert errors == [(4, "l1", "id", "duplicate label rule id (first used by label rule #1)")]


def test_bad_tool_labels_and_settings_name_their_field() -> None:
    errors = _errors("version: 1\ntools:\n  fetch_url: {labels: []}\n")
    assert errors[0][0] == 3 and errors[0][2] == "tools.fetch_url.labels"
    errors = _errors("version: 1\nsession: {max_steps: 0}\n")
    assert errors[0][2] == "session.max_steps"
    errors = _errors("version: 1\nsession: {expire_after: never}\n")
    assert errors[0][2] == "session.expire_after"


# -- the plain validator and the models agree --------------------------------------------


def _both(text: str) -> tuple[object, object]:
    import yaml
    from pydantic import ValidationError

    from interlock.policy.schema import PolicyModel
    from interlock.policy.validate import validate_policy
    from interlock.policy.validated import from_model

    data = yaml.safe_load(text)
    try:
        model: object = from_model(PolicyModel.model_validate(data))
    except ValidationError:
        model = None
    return validate_policy(data), model


AGREEING = [
    FULL,
    "version: 1\ntools:\n  fetch_url: {labels: [untrusted]}\n",
    "version: 1\ntools:\n  f: {labels: [a], parameters: {type: object}, description: d}\n",
    "version: 1\nsession: {max_steps: 5, expire_after: 30}\n",
    "version: 1\nlabels:\n  - {id: c, clear: [x], kind: [tool, mcp], agent: 'a*'}\n",
    RULE_HEAD + "    session:\n      after: {kind: tool, labels: [a], within_time: 1.5}\n",
    RULE_HEAD + "    session:\n      provenance: {args: [a, b], from: [x, y]}\n",
]
REFUSED = [
    RULE_HEAD + "    session: {}\n",
    RULE_HEAD + "    session: {labels: []}\n",
    RULE_HEAD + "    session: {labels: [' x']}\n",
    RULE_HEAD + "    session: {after: {within: true}}\n",
    RULE_HEAD + "    session: {after: {at_least: 0}}\n",
    RULE_HEAD + "    session: {after: {within_time: true}}\n",
    RULE_HEAD + "    session: {flows_from: {args: []}}\n",
    RULE_HEAD + "    session: {flows_from: {args: ['']}}\n",
    RULE_HEAD + "    session: {provenance: {args: [a]}}\n",
    "version: 1\nlabels:\n  - {id: c}\n",
    "version: 1\nlabels:\n  - {id: c, attach: [x], extra: 1}\n",
    "version: 1\nsession: {max_steps: 0}\n",
    "version: 1\nsession: null\n",
    "version: 1\ntools:\n  f: {labels: []}\n",
]


@pytest.mark.parametrize("text", AGREEING)
def test_the_plain_validator_builds_the_models_records(text: str) -> None:
    plain, model = _both(text)
    assert model is not None and plain == model


@pytest.mark.parametrize("text", REFUSED)
def test_the_plain_validator_refuses_what_the_models_refuse(text: str) -> None:
    plain, model = _both(text)
    assert model is None and plain is None
