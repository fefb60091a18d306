"""``interlock sessions list|show|expire`` over a store holding session history."""

from __future__ import annotations

import json
import time
from pathlib import Path

from typer.testing import CliRunner

from interlock.cli_app import app
from interlock.session.history import NewStep
from interlock.store import open_store

runner = CliRunner()


def _filled(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'interlock.db'}"
    store = open_store(url)
    history = store.session_history()
    history.append(
        "acme",
        "s-1",
        NewStep("tool", "read_file", "allow", "d-1", labels=frozenset({"secret"})),
    )
    history.settle("acme", "s-1", "d-1", executed=True, fingerprints=frozenset({1, 2, 3}))
    history.append("globex", "s-2", NewStep("tool", "shell", "deny", "d-2"))
    store.close()
    return url


def test_list_and_show(tmp_path: Path) -> None:
    url = _filled(tmp_path)
    listed = runner.invoke(app, ["sessions", "list", "-d", url, "--json"])
    assert listed.exit_code == 0, listed.output
    rows = [json.loads(line) for line in listed.output.splitlines()]
    assert {(r["tenant"], r["session_id"], r["steps"]) for r in rows} == {
        ("acme", "s-1", 1),
        ("globex", "s-2", 1),
    }
    only = runner.invoke(app, ["sessions", "list", "-d", url, "--tenant", "acme"])
    assert only.exit_code == 0 and "s-1" in only.output and "s-2" not in only.output
    shown = runner.invoke(app, ["sessions", "show", "s-1", "--tenant", "acme", "-d", url, "--json"])
    data = json.loads(shown.output)
    assert data["labels"] == ["secret"]
    assert data["steps"][0]["fingerprints"] == 3 and data["steps"][0]["executed"] is True
    # tenant-scoped: the session is not the other tenant's
    missing = runner.invoke(app, ["sessions", "show", "s-1", "--tenant", "globex", "-d", url])
    assert missing.exit_code == 1 and "no session" in missing.output


def test_expire(tmp_path: Path) -> None:
    url = _filled(tmp_path)
    kept = runner.invoke(app, ["sessions", "expire", "--idle", "1h", "-d", url])
    assert kept.exit_code == 0 and "0 session(s)" in kept.output
    bad = runner.invoke(app, ["sessions", "expire", "--idle", "soon", "-d", url])
    assert bad.exit_code == 2 and "--idle" in bad.output
    time.sleep(0.05)
    gone = runner.invoke(app, ["sessions", "expire", "--idle", "10ms", "-d", url])
    assert gone.exit_code == 0 and "2 session(s)" in gone.output
    listed = runner.invoke(app, ["sessions", "list", "-d", url])
    assert "no sessions" in listed.output
