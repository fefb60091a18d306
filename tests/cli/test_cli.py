"""The `interlock` command: check (exit code by verdict), policy lint/test/schema, demo, audit."""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from interlock.cli import app

runner = CliRunner()
EXAMPLES = Path(str(resources.files("interlock").joinpath("examples")))
POLICY = str(EXAMPLES / "interlock.yaml")


def run(*args: str, stdin: str | None = None) -> tuple[int, str]:
    result = runner.invoke(app, list(args), input=stdin)
    return result.exit_code, result.output


@pytest.mark.parametrize(
    ("args", "code", "text"),
    [
        (["--name", "shell", "--arg", "command=ls -la"], 0, "allow"),
        (["--name", "shell", "--arg", "command=rm -rf /"], 3, "deny"),
        (
            ["--name", "refund_order", "-a", "amount=500", "-a", "currency=EUR"],
            4,
            "require_approval",
        ),
        (
            ["--name", "refund_order", "-a", 'amount="lots"', "-a", "currency=EUR"],
            5,
            "undetermined",
        ),
        (["--name", "send_email", "-a", "to=x@y.net"], 0, "shadow: would require_approval"),
    ],
)
def test_check_exit_code_follows_the_verdict(args: list[str], code: int, text: str) -> None:
    exit_code, output = run("check", "-p", POLICY, *args)
    assert exit_code == code, output
    assert text in output


def test_check_reads_an_action_as_json_from_stdin() -> None:
    action = {
        "name": "refund_order",
        "arguments": {"amount": 250, "currency": "EUR"},
        "context": {"tenant": "acme", "agent": "bot"},
    }
    code, output = run(
        "check", "-p", POLICY, "--json", "-", "--output-json", stdin=json.dumps(action)
    )
    assert code == 4
    body = json.loads(output)
    assert body["decision"] == "require_approval"
    assert body["rule_ids"] == ["refund-large"]
    assert body["approval"]["url"].startswith("http://127.0.0.1:8740/approvals/")


def test_check_redacts_secrets_in_its_output() -> None:
    code, output = run(
        "check",
        "-p",
        POLICY,
        "--name",
        "x",
        "--arg",
        "url=https://u:hunter2@evil.example.net/",
        "--output-json",
    )
    assert code == 3
    assert "hunter2" not in output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--json", "{not json"], "not valid JSON"),
        (["--json", "[1]"], "must be a JSON object"),
        (["--json", '{"kind": "robot", "name": "x"}'], "invalid action: kind"),
        (["--arg", "command=ls"], "at least --name"),
        (["--name", "x", "--arg", "novalue"], "key=value"),
    ],
)
def test_check_usage_errors_exit_2(args: list[str], message: str) -> None:
    code, output = run("check", "-p", POLICY, *args)
    assert code == 2
    assert message in output


def test_check_with_an_invalid_policy_exits_2_with_the_location(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nrules:\n  - id: r\n    decision: deny\n")
    code, output = run("check", "-p", str(bad), "--name", "x")
    assert code == 2
    assert "bad.yaml:3: rule 'r': field 'reason'" in output


def test_check_appends_the_event_and_audit_tail_shows_it(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    run("check", "-p", POLICY, "--name", "shell", "-a", "command=rm -rf /", "--events", str(events))
    run("check", "-p", POLICY, "--name", "send_email", "-a", "to=a@b.net", "--events", str(events))
    records = [json.loads(line) for line in events.read_text().splitlines()]
    assert [r["decision"] for r in records] == ["deny", "allow"]
    assert records[1]["shadow"]["decision"] == "require_approval"
    code, output = run("audit", "tail", "--events", str(events))
    assert code == 0
    assert "shell-no-destruction" in output and "shadow: would require_approval" in output
    code, output = run("audit", "tail", "--events", str(events), "--json", "-n", "1")
    assert json.loads(output)["action"]["name"] == "send_email"


def test_policy_lint_reports_every_problem_with_its_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "version: 1\nrules:\n  - id: a\n    decision: deny\n    reason: x\n    when: 'x >'\n"
        "  - id: b\n    decision: allow\n    reason: y\n    params: {comand: ls}\n"
    )
    code, output = run("policy", "lint", POLICY, str(bad))
    assert code == 1
    assert "interlock.yaml: 12 rules (1 in shadow mode), default deny" in output
    assert "bad.yaml:6: rule 'a': field 'when'" in output
    assert "bad.yaml:10: rule 'b': field 'params.comand'" in output


TOOLS_ONLY = (
    "version: 1\ndefault: deny\nrules:\n  - {id: s, decision: allow, reason: ok, name: shell}\n"
)


def test_policy_lint_warns_when_no_rule_allows_model_calls(tmp_path: Path) -> None:
    tools_only = tmp_path / "tools.yaml"
    tools_only.write_text(TOOLS_ONLY)
    code, output = run("policy", "lint", str(tools_only))
    assert code == 0  # a warning, not an error
    assert f"! {tools_only}: no rule allows model calls (kind: llm)" in output
    # a budget on model calls with nothing to allow them: named with its line
    budgeted = tmp_path / "budgeted.yaml"
    budgeted.write_text(
        TOOLS_ONLY + "budgets:\n  - {id: tokens, limit: 1000, unit: tokens, kind: llm}\n"
    )
    code, output = run("policy", "lint", str(budgeted))
    assert code == 0
    assert f"{budgeted}:6: budget 'tokens' counts model calls" in output
    # the shipped example allows model calls: no warning
    code, output = run("policy", "lint", POLICY)
    assert code == 0 and "!" not in output


def test_policy_lint_does_not_warn_about_models_when_the_default_allows(tmp_path: Path) -> None:
    lenient = tmp_path / "lenient.yaml"
    lenient.write_text(TOOLS_ONLY.replace("default: deny", "default: allow"))
    code, output = run("policy", "lint", str(lenient))
    assert code == 0 and "!" not in output


def test_policy_test_runs_the_shipped_cases() -> None:
    code, output = run("policy", "test", str(EXAMPLES / "interlock.cases.yaml"))
    assert code == 0, output
    cases = yaml.safe_load((EXAMPLES / "interlock.cases.yaml").read_text())["cases"]
    assert f"PASS: {len(cases)}/{len(cases)}" in output


def test_policy_test_fails_on_a_wrong_expectation(tmp_path: Path) -> None:
    cases = tmp_path / "cases.yaml"
    cases.write_text(
        "cases:\n  - name: rm is fine (wrong)\n"
        "    action: {name: shell, arguments: {command: 'rm -rf /'}}\n"
        "    expect: {decision: allow}\n"
    )
    code, output = run("policy", "test", "-p", POLICY, str(cases))
    assert code == 1
    assert "FAIL" in output and "cases.yaml:2 rm is fine (wrong)" in output
    assert "expected allow, got decision deny" in output


def test_policy_test_rejects_a_malformed_case_file(tmp_path: Path) -> None:
    cases = tmp_path / "cases.yaml"
    cases.write_text(
        "cases:\n  - name: x\n    action: {name: shell}\n    expect: {decision: maybe}\n"
    )
    code, output = run("policy", "test", "-p", POLICY, str(cases))
    assert code == 2
    assert "cases.yaml:4" in output


def test_policy_schema_prints_json_schema() -> None:
    code, output = run("policy", "schema")
    assert code == 0
    assert json.loads(output)["title"].startswith("Interlock policy")


def test_demo_shows_every_verdict_kind_and_runs_bodies_only_on_allow(tmp_path: Path) -> None:
    events = tmp_path / "demo.jsonl"
    database = f"sqlite:///{tmp_path / 'demo.db'}"
    code, output = run("demo", "--events", str(events), "--database", database)
    assert code == 0, output
    for verdict in ("allow", "deny", "require_approval", "undetermined", "shadow: would"):
        assert verdict in output
    records = [json.loads(line) for line in events.read_text().splitlines()]
    decisions = [r for r in records if r["kind"] == "decision"]
    assert {r["decision"] for r in decisions} == {
        "allow",
        "deny",
        "require_approval",
        "undetermined",
    }
    # every allowed tool call's body is recorded going in and coming out, joined by id
    allowed = {
        r["decision_id"]
        for r in decisions
        if r["decision"] == "allow" and r["action"]["kind"] == "tool"
    }
    invoked = {r["decision_id"] for r in records if r["kind"] == "tool_invoke"}
    results = {r["decision_id"]: r for r in records if r["kind"] == "tool_result"}
    assert allowed == invoked == set(results) and len(allowed) == 6
    assert all(r["ok"] for r in results.values())
    models = {r["decision_id"] for r in records if r["kind"] == "llm_output"}
    assert len(models) == 14
    assert "s3cr3t" not in events.read_text()
    # 14 tool calls and 14 model calls judged, 14 model reservations settled, 1 approval,
    # and the 20 calls that ran (6 tools, 14 models) each started and ended (40 outcomes)
    assert "audit: 83 records" in output and "chain intact" in output
    # the hidden delete and the dressed-up URL are read for what they do
    denied = {
        r["action"]["arguments"].get("command") or r["action"]["arguments"].get("url"): r
        for r in decisions
        if r["decision"] == "deny"
    }
    assert denied["ls /workspace && sudo /bin/rm -Rf /workspace/build"]["rule_ids"] == [
        "shell-no-destruction"
    ]
    assert denied["https://pastebin.example.net\\@docs.example.com/raw/1"]["rule_ids"] == [
        "interlock:ambiguous-url"
    ]
    assert "model-tokens (agent:support-bot) has" in output


def test_demo_on_the_store_audits_every_decision_and_claims_the_approval_once(
    tmp_path: Path,
) -> None:
    from interlock.store import ApprovalStatus, open_store

    database = f"sqlite:///{tmp_path / 'demo.db'}"
    code, output = run("demo", "--database", database)
    assert code == 0, output
    with open_store(database) as store:
        report = store.verify_audit()
        assert report.ok and report.checked == {"acme": 83}
        kinds = [row.kind for row in store.audit_rows()]
        assert kinds.count("tool_invoke") == kinds.count("tool_result") == 6
        assert kinds.count("llm_input") == kinds.count("llm_output") == 14
        assert kinds.count("approval") == 1 and kinds.count("decision") == 28
        assert kinds.count("budget") == 14  # every model call's reservation committed
        actions = [json.loads(row.body)["action"] for row in store.audit_rows(kind="decision")]
        refunds = [
            a for a in actions if a["name"] == "refund_order" and a["arguments"]["order_id"] == 43
        ]
        assert len(refunds) == 2  # interrupted for approval, then resumed and allowed once
        (tokens,) = store.budget_rows(budget_id="model-tokens")
        assert tokens.reserved == 0 and tokens.spent == (
            sum(120 + 40 * i + 30 for i in range(13)) + (120 + 40 * 13 + 15)
        )  # exactly what the scripted model reported, not the estimates
        (approval,) = store.list_approvals()
        assert approval.status is ApprovalStatus.CLAIMED
        assert approval.decided_by == "demo-supervisor"
        assert "s3cr3t" not in " ".join(row.body for row in store.audit_rows())


def test_demo_without_a_store_writes_no_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code, output = run("demo", "--no-store")
    assert code == 0, output
    assert "audit:" not in output
    assert not (tmp_path / ".interlock").exists()


def test_the_console_script_is_installed() -> None:
    exe = shutil.which("interlock", path=str(Path(sys.executable).parent))
    assert exe is not None
    result = subprocess.run(
        [exe, "check", "-p", POLICY, "--name", "shell", "-a", "command=rm -rf /"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 3
    assert "deny" in result.stdout


def test_version_prints_the_package_version() -> None:
    from interlock import __version__

    code, output = run("--version")
    assert (code, output.strip()) == (0, f"interlock {__version__}")


def test_init_writes_a_starter_policy_whose_cases_pass(tmp_path: Path) -> None:
    code, output = run("init", str(tmp_path / "project"))
    assert code == 0, output
    policy = tmp_path / "project" / "interlock.yaml"
    cases = tmp_path / "project" / "interlock.cases.yaml"
    assert policy.read_text() == (EXAMPLES / "interlock.yaml").read_text()
    code, output = run("policy", "test", str(cases))
    assert code == 0 and "FAIL" not in output, output
    code, output = run(
        "check", "-p", str(policy), "--name", "shell", "--arg", "command=ls; rm -rf /"
    )
    assert code == 3, output


def test_init_never_overwrites_without_force(tmp_path: Path) -> None:
    (tmp_path / "interlock.yaml").write_text("mine")
    code, output = run("init", str(tmp_path))
    assert code == 2 and "already exists; use --force" in output
    assert (tmp_path / "interlock.yaml").read_text() == "mine"
    assert not (tmp_path / "interlock.cases.yaml").exists()
    code, output = run("init", str(tmp_path), "--force")
    assert code == 0 and (tmp_path / "interlock.yaml").read_text() != "mine"


def test_check_applies_the_policys_budgets_to_the_one_call_quietly(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    policy = tmp_path / "budgeted.yaml"
    policy.write_text(
        "version: 1\nrules:\n  - {id: models, decision: allow, reason: ok, kind: llm}\n"
        "budgets:\n  - {id: tokens, limit: 1000, unit: tokens, kind: llm}\n"
    )
    check = ("check", "--policy", str(policy), "--kind", "llm", "--name", "m")
    with caplog.at_level(logging.WARNING, logger="interlock"):
        code, output = run(*check, "--arg", "max_tokens=100")
    assert code == 0 and caplog.records == []  # no word of budgets kept in memory
    code, output = run(*check)
    assert code == 3 and "names no max_tokens" in output
