"""``interlock audit replay``: the report, and the exit code CI gates a policy change
on (0 / 1 the --fail-on condition met / 2 a usage or policy error)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from interlock.cli import app
from interlock.replay.demo_log import demo_actions, write_demo_log
from interlock.store import open_store

from .conftest import EXAMPLE, LOOSENED, RECORDS, TIGHTENED

runner = CliRunner()
Write = Callable[..., Path]


def replay(url: str, policy: Path | str, *args: str) -> Result:
    return runner.invoke(app, ["audit", "replay", "--policy", str(policy), "--store", url, *args])


@pytest.mark.parametrize(
    ("draft", "fail_on", "code"),
    [
        (LOOSENED, "loosen", 1),
        (LOOSENED, "any", 1),
        (LOOSENED, "never", 0),
        (TIGHTENED, "loosen", 0),
        (TIGHTENED, "any", 1),
        (EXAMPLE, "any", 0),
        (EXAMPLE, "loosen", 0),
    ],
    ids=[
        "loosened-loosen",
        "loosened-any",
        "loosened-never",
        "tightened-loosen",
        "tightened-any",
        "identical-any",
        "identical-loosen",
    ],
)
def test_the_exit_code_says_whether_the_fail_on_condition_is_met(
    log_url: str, write_policy: Write, draft: str, fail_on: str, code: int
) -> None:
    result = replay(log_url, write_policy(draft), "--fail-on", fail_on)
    assert result.exit_code == code, result.output
    assert f"Replayed {RECORDS} recorded decisions" in result.output
    assert ("FAIL (--fail-on" in result.output) is (code == 1)


def test_the_text_report_names_the_loosening_and_an_example(
    log_url: str, write_policy: Write
) -> None:
    result = replay(log_url, write_policy(LOOSENED), "--examples", "1")
    assert result.exit_code == 0, result.output
    assert "LOOSENED deny → allow" in result.output
    assert "Examples: deny → allow" in result.output
    assert "pastebin.example.net" in result.output
    assert "net-known-hosts" in result.output
    assert "Stateful, not replayed: recorded budget:model-tokens" in result.output


def test_json_output_is_the_documented_document(log_url: str, write_policy: Write) -> None:
    result = replay(log_url, write_policy(LOOSENED), "--format", "json", "--fail-on", "loosen")
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["schema"] == "interlock.replay/1" and data["failed"] is True
    assert data["records"]["replayed"] == RECORDS and data["changes"]["deny_to_allow"] > 0


def test_filters_on_the_command_line(log_url: str, write_policy: Write) -> None:
    expected = sum(
        1
        for action in demo_actions(RECORDS)
        if action.context.tenant == "acme" and action.name.startswith("refund_")
    )
    result = replay(
        log_url,
        write_policy(EXAMPLE),
        "--tenant",
        "acme",
        "--tool",
        "refund_*",
        "--since",
        "2026-01-01",
        "--until",
        "2027-01-01",
        "--format",
        "json",
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["records"]["replayed"] == expected > 0


def test_a_draft_that_does_not_load_is_exit_2_with_file_line_and_field(
    log_url: str, write_policy: Write
) -> None:
    path = write_policy("version: 1\nrules:\n  - id: x\n    decision: alow\n    reason: r\n")
    result = replay(log_url, path)
    assert result.exit_code == 2
    assert f"{path}:4: rule 'x': field 'decision'" in result.output


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--format", "yaml"], "--format must be text or json"),
        (["--fail-on", "tighten"], "--fail-on must be one of"),
        (["--since", "2026-02-01", "--until", "2026-01-01"], "is not before --until"),
        (["--since", "last tuesday"], "is not an ISO-8601 date"),
    ],
)
def test_usage_errors_are_exit_2(
    log_url: str, write_policy: Write, args: list[str], says: str
) -> None:
    result = replay(log_url, write_policy(EXAMPLE), *args)
    assert result.exit_code == 2 and says in result.output


def test_a_store_that_does_not_exist_is_exit_2(tmp_path: Path, write_policy: Write) -> None:
    result = replay(f"sqlite:///{tmp_path / 'nothing.db'}", write_policy(EXAMPLE))
    assert result.exit_code == 2 and "no database" in result.output


def test_a_hundred_thousand_recorded_decisions_end_to_end(
    tmp_path: Path, write_policy: Write
) -> None:
    """The issue's scale: a log of 100,000 decisions of the demo's agents; the
    loosened draft is caught by the exit code, every call accounted for."""
    count = 100_000
    url = f"sqlite:///{tmp_path / 'big.db'}"
    store = open_store(url)
    try:
        write_demo_log(store, count)
    finally:
        store.close()
    pastebin_fetches = sum(
        1
        for action in demo_actions(count)
        if action.name == "fetch_url" and "pastebin.example.net" in action.arguments["url"]
    )
    result = replay(url, write_policy(LOOSENED), "--format", "json", "--fail-on", "loosen")
    assert result.exit_code == 1, result.output
    data = json.loads(result.stdout)
    assert data["records"]["replayed"] == count
    assert data["changes"]["deny_to_allow"] == data["loosened"] == pastebin_fetches
    outcome = data["outcome"]
    assert outcome["unchanged"] + outcome["rules_changed"] + outcome["changed"] == count
