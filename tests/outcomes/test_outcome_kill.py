"""A real process killed with SIGKILL in the middle of a guarded body: after the
restart the chain holds its decision and its ``tool_invoke`` (durable before the body
ran), and the recovery pass closes it with ``outcome_unknown`` — on SQLite and on
PostgreSQL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from interlock.cli import app
from interlock.store import open_store
from interlock.store.outcomes import recover_outcomes
from interlock.store.story import action_story

WORKER = Path(__file__).with_name("_killed_worker.py")


def _run_and_kill(url: str, mode: str = "protect") -> None:
    """Start the worker, wait for its body to start, kill it with SIGKILL."""
    proc = subprocess.Popen(
        [sys.executable, str(WORKER), url, mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line, f"the worker stopped before its body started: {proc.stderr.read()}"  # type: ignore[union-attr]
        assert json.loads(line) == {"started": "billing"}
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait() == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _check_outcome_unknown_after_restart(
    url: str, tenant: str, mode: str = "protect", start: str = "tool_invoke"
) -> str:
    _run_and_kill(url, mode)
    store = open_store(url)  # the restart
    try:
        invokes = list(store.audit_rows(tenant=tenant, kind=start))
        assert len(invokes) == 1
        decision_id = invokes[0].decision_id
        assert decision_id is not None
        # the start is durable with its decision: right after it, nothing lost or doubled
        rows = list(store.audit_rows(tenant=tenant))
        assert [row.kind for row in rows] == ["decision", start]
        assert rows[0].decision_id == decision_id
        before = action_story(store, decision_id, tenant=tenant)
        assert [s["step"] for s in before["steps"]] == ["decided", "started"]
        assert before["outcome"] == "running"  # nothing says otherwise yet
        # within the bound it may still be running elsewhere: left alone
        assert recover_outcomes(store, older_than=3600.0).appended == 0
        assert recover_outcomes(store, older_than=0.0).appended == 1
        after = action_story(store, decision_id, tenant=tenant)
        assert after["outcome"] == "unknown"
        assert [s["step"] for s in after["steps"]] == ["decided", "started", "outcome unknown"]
        assert recover_outcomes(store, older_than=0.0).appended == 0  # closed once
        assert store.verify_audit().ok
        return decision_id
    finally:
        store.close()


def test_a_body_killed_with_sigkill_shows_outcome_unknown_on_sqlite(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'killed.db'}"
    decision_id = _check_outcome_unknown_after_restart(url, "acme")
    shown = CliRunner().invoke(app, ["audit", "show", decision_id, "--database", url])
    assert shown.exit_code == 0, shown.output
    assert f"decision {decision_id}: unknown" in shown.output
    assert "outcome unknown" in shown.output and "never reported" in shown.output


def test_a_body_killed_with_sigkill_shows_outcome_unknown_on_postgres(postgres_url: str) -> None:
    _check_outcome_unknown_after_restart(postgres_url, "acme")


@pytest.mark.parametrize(
    ("mode", "start"),
    [("budgeted", "tool_invoke"), ("llm", "llm_input"), ("langchain", "tool_invoke")],
)
def test_a_start_joined_to_its_decision_survives_sigkill_on_sqlite(
    tmp_path: Path, mode: str, start: str
) -> None:
    """The start record that rode in its decision's (or reservation's) transaction is
    there after a SIGKILL mid-body, and recovery closes it: on SQLite."""
    if mode == "langchain":
        pytest.importorskip("langchain_core")
    url = f"sqlite:///{tmp_path / 'killed.db'}"
    _check_outcome_unknown_after_restart(url, "acme", mode, start)


@pytest.mark.parametrize(("mode", "start"), [("budgeted", "tool_invoke"), ("llm", "llm_input")])
def test_a_start_joined_to_its_decision_survives_sigkill_on_postgres(
    postgres_url: str, mode: str, start: str
) -> None:
    _check_outcome_unknown_after_restart(postgres_url, "acme", mode, start)
