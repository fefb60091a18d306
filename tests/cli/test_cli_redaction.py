"""What the `interlock` command prints or writes is redacted with the policy's own
``redaction.patterns`` as well as the built-in secret shapes: the decision on stdout
(text and JSON), and the events `check --events` appends."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from interlock.cli import app

runner = CliRunner()

INTERNAL = "INTERNAL-" + "123456"
KEY = "sk_" + "live_" + "Zq8Xv2Lm9Pw4Rt7Ks1Nb6Hy3"
POLICY = """\
version: 1
default: deny
redaction:
  patterns: ['INTERNAL-[0-9]{6}']
rules:
  - id: numbers-only
    decision: allow
    reason: a numeric amount is fine
    name: pay
    params:
      args.amount: {lte: 100}
"""


def test_check_events_and_output_carry_the_policys_redaction(tmp_path: Path) -> None:
    policy = tmp_path / "interlock.yaml"
    policy.write_text(POLICY)
    events = tmp_path / "events.jsonl"
    result = runner.invoke(
        app,
        [
            "check",
            "-p",
            str(policy),
            "--name",
            "pay",
            "-a",
            f"amount={INTERNAL} {KEY}",
            "-a",
            f"memo=ref {INTERNAL}",
            "--events",
            str(events),
        ],
    )
    assert result.exit_code == 5, result.output  # a text amount cannot be compared
    assert INTERNAL not in result.output
    assert KEY[8:] not in result.output
    written = events.read_text()
    assert INTERNAL not in written
    assert KEY[8:] not in written
    (record,) = [json.loads(line) for line in written.splitlines()]
    assert record["action"]["arguments"]["memo"] == "ref [REDACTED:policy]"

    as_json = runner.invoke(
        app,
        ["check", "-p", str(policy), "-n", "pay", "-a", f"amount={INTERNAL}", "--output-json"],
    )
    assert INTERNAL not in as_json.output
