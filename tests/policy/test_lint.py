"""`interlock policy lint`: the unsafe patterns it warns about, and the arguments a rule
reads that no tool has."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from interlock import PolicyError, load_policy_text
from interlock.cli import app
from interlock.policy.advice import policy_advice
from interlock.policy.toolschema import argument_issues

HEAD = "version: 1\nrules:\n  - {id: models, decision: allow, reason: ok, kind: llm}\n"


def advice(rule: str) -> list[str]:
    return policy_advice(load_policy_text(HEAD + rule, file="p.yaml"))


@pytest.mark.parametrize(
    ("rule", "says"),
    [
        (
            "  - {id: a, decision: allow, reason: x, params: {command: ['ls *', 'cat *']}}\n",
            "an allow on the raw text of 'command'",
        ),
        (
            "  - {id: a, decision: allow, reason: x, params: {command: {eq: ls}}}\n",
            "an allow on the raw text of 'command'",
        ),
        (
            "  - {id: a, decision: deny, reason: x, params: {command: {regex: 'rm -rf'}}}\n",
            "a pattern on the raw text of 'command'",
        ),
        (
            "  - {id: a, decision: deny, reason: x, params: {args.cmd: 'rm *'}}\n",
            "a pattern on the raw text of 'args.cmd'",
        ),
        (
            "  - {id: a, decision: allow, reason: x, params: {url: '*docs.example.com*'}}\n",
            "a pattern on the text of 'url'",
        ),
        (
            "  - {id: a, decision: deny, reason: x, params: {url: {regex: evil}}}\n",
            "a pattern on the text of 'url'",
        ),
        (
            "  - {id: a, decision: allow, reason: x, params: {domain: '*example.com'}}\n",
            "also matches other sites",
        ),
        (
            "  - {id: a, decision: allow, reason: x, params: {domain: '*.co.uk'}}\n",
            "every site under the public suffix 'co.uk'",
        ),
        (
            "  - {id: a, decision: deny, reason: x, when: \"params.command.contains('rm')\"}\n",
            "`when` reads the text of command with contains()",
        ),
        (
            "  - {id: a, decision: allow, reason: x, when: \"args.url.startsWith('https://d')\"}\n",
            "`when` reads the text of url with startsWith()",
        ),
    ],
)
def test_unsafe_patterns_are_warned_with_their_line(rule: str, says: str) -> None:
    (warning,) = advice(rule)
    assert warning.startswith("p.yaml:4: rule 'a': ")
    assert says in warning


@pytest.mark.parametrize(
    "rule",
    [
        "  - {id: a, decision: allow, reason: x, scope: shell, shell: {programs: [ls]}}\n",
        "  - {id: a, decision: deny, reason: x, shell: {commands: [{program: rm}]}}\n",
        "  - {id: a, decision: allow, reason: x, params: {domain: ['docs.example.com']}}\n",
        "  - {id: a, decision: allow, reason: x, params: {domain: '*.example.org'}}\n",
        "  - {id: a, decision: allow, reason: x, params: {site: example.org}}\n",
        "  - {id: a, decision: deny, reason: x, params: {command: {exists: false}}}\n",
        "  - {id: a, decision: allow, reason: x, when: \"args.to.endsWith('@example.com')\"}\n",
    ],
)
def test_the_safe_forms_are_not_warned(rule: str) -> None:
    assert advice(rule) == []


TOOLS = """
tools:
  refund_order:
    parameters:
      type: object
      properties:
        order_id: {type: integer}
        amount: {type: number}
        lines: {type: array, items: {type: object, properties: {sku: {type: string}}}}
  send_email:
    parameters: {type: object, properties: {to: {type: string}}}
  anything:
    parameters: {type: object, additionalProperties: true}
"""


@pytest.mark.parametrize(
    ("rule", "line", "field", "says"),
    [
        (
            "  - {id: r, decision: allow, reason: x, name: refund_*, params: {args.ammount: 5}}",
            4,
            "params.args.ammount",
            "did you mean args.amount?",
        ),
        (
            "  - {id: r, decision: deny, reason: x, name: refund_order, "
            "when: 'has(args.amount) && args.curency == \"EUR\"'}",
            4,
            "when",
            "no tool it applies to has an argument 'curency'",
        ),
        (
            "  - {id: r, decision: deny, reason: x, name: send_email, params: {args.amount: 5}}",
            4,
            "params.args.amount",
            "(tools: send_email)",
        ),
        (
            "  - {id: r, decision: deny, reason: x, name: refund_order, "
            "params: {args.lines.0.skew: x}}",
            4,
            "params.args.lines.0.skew",
            "args.lines.0.skew",
        ),
    ],
)
def test_an_argument_no_tool_has_is_a_load_error(
    rule: str, line: int, field: str, says: str
) -> None:
    with pytest.raises(PolicyError) as caught:
        load_policy_text(HEAD + rule + "\n" + TOOLS, file="p.yaml")
    (issue,) = caught.value.issues
    assert (issue.file, issue.line, issue.rule_id, issue.field) == ("p.yaml", line, "r", field)
    assert says in issue.message


@pytest.mark.parametrize(
    "rule",
    [
        "  - {id: r, decision: allow, reason: x, name: refund_*, params: {args.amount: 5}}",
        "  - {id: r, decision: allow, reason: x, name: refund_order, "
        "params: {args.lines.0.sku: x}}",
        "  - {id: r, decision: allow, reason: x, name: anything, params: {args.whatever: 1}}",
        "  - {id: r, decision: allow, reason: x, name: unknown_tool, params: {args.x: 1}}",
        "  - {id: r, decision: allow, reason: x, kind: llm, when: 'args.max_tokens < 10'}",
        "  - {id: r, decision: allow, reason: x, name: send_email, "
        "when: \"args.to.endsWith('@example.com')\"}",
        '  - {id: r, decision: allow, reason: x, when: "[1].all(args, args > 0)"}',
    ],
)
def test_arguments_the_tools_have_load(rule: str) -> None:
    load_policy_text(HEAD + rule + "\n" + TOOLS)


def test_lint_checks_the_tools_of_an_agent_object(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "lint_agent_tools.py").write_text(
        "from langchain_core.tools import tool\n\n"
        "@tool\n"
        "def refund_order(order_id: int, amount: float) -> str:\n"
        '    """Refund an order."""\n'
        '    return "ok"\n\n'
        "TOOLS = [refund_order]\n"
    )
    policy = tmp_path / "interlock.yaml"
    policy.write_text(
        HEAD
        + "  - {id: r, decision: allow, reason: x, name: refund_*, params: {args.ammount: 5}}\n"
    )
    monkeypatch.chdir(tmp_path)  # the project's modules import as with `python -m`
    result = CliRunner().invoke(
        app, ["policy", "lint", str(policy), "--tools", "lint_agent_tools:TOOLS"]
    )
    assert result.exit_code == 1, result.output
    assert f"{policy}:4: rule 'r': field 'params.args.ammount'" in result.output
    assert "did you mean args.amount?" in result.output
    fixed = policy.read_text().replace("ammount", "amount")
    policy.write_text(fixed)
    result = CliRunner().invoke(
        app, ["policy", "lint", str(policy), "--tools", "lint_agent_tools:TOOLS"]
    )
    assert result.exit_code == 0, result.output


def test_lint_names_a_tools_object_it_cannot_import() -> None:
    result = CliRunner().invoke(app, ["policy", "lint", "--tools", "no_such_module_xyz:agent"])
    assert result.exit_code == 2
    assert "--tools no_such_module_xyz:agent" in result.output


def test_argument_issues_take_schemas_directly() -> None:
    policy = load_policy_text(
        HEAD + "  - {id: r, decision: allow, reason: x, params: {args.a: 1}}\n"
    )
    assert argument_issues(policy, {"t": {"type": "object", "properties": {"b": {}}}})
    assert not argument_issues(policy, {"t": {"type": "object", "properties": {"a": {}}}})
