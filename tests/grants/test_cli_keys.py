"""``interlock keys rotate`` and ``interlock keys signing``: the grant signing keys."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from interlock import Action, Context, Guard
from interlock.cli import app
from interlock.store.grant_keys import ENV_KEY_FILE, read_key_ring
from interlock.verify.tokens import keys_from_jwks, read_grant

runner = CliRunner()
ALLOW_ALL: dict[str, Any] = {"version": 1, "default": "allow"}
CALL = Action.tool("refund", {"order": 1}, context=Context(tenant="acme"))


@pytest.fixture(autouse=True)
def _no_ring_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_KEY_FILE)
    monkeypatch.delenv("INTERLOCK_DATABASE_URL", raising=False)


def test_rotate_makes_a_ring_then_a_new_active_key(tmp_path: Path) -> None:
    ring = tmp_path / "secrets" / "grant-keys"
    made = runner.invoke(app, ["keys", "rotate", "--key-file", str(ring), "--json"])
    assert made.exit_code == 0, made.output
    first = json.loads(made.stdout)
    assert [row["state"] for row in first] == ["active"]
    rotated = runner.invoke(app, ["keys", "rotate", "--key-file", str(ring), "--json"])
    rows = json.loads(rotated.stdout)
    assert [row["state"] for row in rows] == ["active", "retired"]
    assert rows[1]["kid"] == first[0]["kid"] and rows[1]["verifies_until"]
    assert read_key_ring(ring).active.kid == rows[0]["kid"]
    listed = runner.invoke(app, ["keys", "signing", "--key-file", str(ring), "--json"])
    assert [json.loads(line)["kid"] for line in listed.stdout.splitlines()] == [
        row["kid"] for row in rows
    ]
    assert "seed" not in listed.stdout


def test_rotating_a_sqlite_stores_ring_keeps_its_grants_claimable(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'interlock.db'}"
    with Guard(ALLOW_ALL, store=url, reap_interval=None) as guard:
        before = guard.issue_grant(guard.check(CALL), audience="shop")
        result = runner.invoke(app, ["keys", "rotate", "-d", url])
        assert result.exit_code == 0, result.output
        assert "is active" in result.stdout
        after = guard.issue_grant(guard.check(CALL), audience="shop")
        assert after.kid != before.kid
        jwks = runner.invoke(app, ["keys", "signing", "-d", url, "--jwks"])
        published = keys_from_jwks(json.loads(jwks.stdout))
        assert read_grant(before.token, published) == before.claims
        assert read_grant(after.token, published) == after.claims
        assert guard.claim_grant(before).grant_id == before.claims.grant_id


def test_a_store_without_a_ring_file_is_a_clear_usage_error(postgres_url: str) -> None:
    result = runner.invoke(app, ["keys", "rotate", "-d", postgres_url])
    assert result.exit_code == 2
    assert "--key-file" in result.output


def test_listing_a_missing_ring_says_how_one_is_made(tmp_path: Path) -> None:
    missing = tmp_path / "nothing-here"
    result = runner.invoke(app, ["keys", "signing", "--key-file", str(missing)])
    assert result.exit_code == 2
    assert "interlock keys rotate --key-file" in result.output
    assert not missing.exists()  # listing never makes one
