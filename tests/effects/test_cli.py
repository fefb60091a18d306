"""`interlock effects list | show | reconcile` over a store holding an open attempt."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from interlock import Guard
from interlock.cli import app
from interlock.effects import EffectStatus, Outcome, run_effect
from interlock.effects.http import HttpEffect
from interlock.effects.records import get_effect

from .chaos import CutProxy
from .provider import Provider, Served
from .support import refund, spent

runner = CliRunner()


def _database(guard: Guard) -> str:
    assert guard.store is not None
    return (
        guard.store.url
        if guard.store.dialect == "postgres"
        else f"sqlite:///{guard.store.file_path()}"
    )


@pytest.fixture
def open_attempt(
    guard: Guard, provider: tuple[Provider, Served], proxy: CutProxy, refunds: HttpEffect
) -> str:
    proxy.next("drop_after")
    result = run_effect(guard, refunds, refund(), idempotency_key="cli-1")
    assert result.outcome is Outcome.INDETERMINATE
    return result.effect_id


@pytest.fixture
def adapter_module(tmp_path: Path, proxy: CutProxy, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "shop_effects.py").write_text(
        "from interlock.effects.http import HttpEffect\n"
        f"def adapters():\n    return [HttpEffect({proxy.url!r}, audience='shop')]\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "shop_effects", raising=False)  # an earlier test's
    return "shop_effects:adapters"


def test_list_and_show_the_open_attempt(guard: Guard, open_attempt: str) -> None:
    database = _database(guard)
    listed = runner.invoke(app, ["effects", "list", "-d", database, "--status", "open", "--json"])
    assert listed.exit_code == 0, listed.output
    rows = [json.loads(line) for line in listed.output.splitlines()]
    assert [(r["id"], r["status"]) for r in rows] == [(open_attempt, "indeterminate")]
    shown = runner.invoke(app, ["effects", "show", open_attempt, "-d", database])
    assert shown.exit_code == 0 and "/orders/42/refunds" in shown.output
    missing = runner.invoke(app, ["effects", "show", "eff_nope", "-d", database])
    assert missing.exit_code == 1 and "no effect" in missing.output


def test_reconcile_settles_it_once(
    guard: Guard, open_attempt: str, adapter_module: str, provider: tuple[Provider, Served]
) -> None:
    database = _database(guard)
    assert guard.store is not None
    held = spent(guard.store)[1]
    done = runner.invoke(app, ["effects", "reconcile", "-d", database, "--adapter", adapter_module])
    assert done.exit_code == 0, done.output
    assert f"{open_attempt} committed" in done.output
    record = get_effect(guard.store, open_attempt)
    assert record is not None and record.status is EffectStatus.COMMITTED
    assert spent(guard.store) == (held, 0) and len(provider[0].effects) == 1
    again = runner.invoke(
        app, ["effects", "reconcile", open_attempt, "-d", database, "--adapter", adapter_module]
    )
    assert again.exit_code == 0 and spent(guard.store) == (held, 0)


@pytest.mark.parametrize(
    ("adapter", "message"),
    [
        ("no_colon", "MODULE:ATTRIBUTE"),
        ("no_such_module_xyz:a", "No module"),
        ("json:dumps", "calling it failed"),
        ("json:__name__", "not an adapter"),
    ],
)
def test_reconcile_refuses_what_is_not_an_adapter(guard: Guard, adapter: str, message: str) -> None:
    result = runner.invoke(
        app, ["effects", "reconcile", "-d", _database(guard), "--adapter", adapter]
    )
    assert result.exit_code == 2 and message in result.output


def test_reconcile_without_adapters_is_a_usage_error(guard: Guard) -> None:
    result = runner.invoke(app, ["effects", "reconcile", "-d", _database(guard)])
    assert result.exit_code == 2 and "--adapter" in result.output


def test_reconcile_exits_1_while_an_attempt_stays_unknown(
    guard: Guard,
    open_attempt: str,
    proxy: CutProxy,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (tmp_path / "blind_effects.py").write_text(
        "from interlock.effects.http import HttpEffect\n"
        f"blind = HttpEffect({proxy.url!r}, audience='shop', lookup='/nowhere/{{key}}')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "blind_effects", raising=False)
    database = _database(guard)
    result = runner.invoke(
        app, ["effects", "reconcile", "-d", database, "--adapter", "blind_effects:blind"]
    )
    assert result.exit_code == 1 and f"{open_attempt} indeterminate" in result.output
    assert guard.store is not None and spent(guard.store)[1] > 0  # still held


def test_audit_tail_names_the_effect_records(guard: Guard, open_attempt: str) -> None:
    assert guard.audit is not None
    guard.audit.flush()
    result = runner.invoke(
        app, ["audit", "tail", "-d", _database(guard), "-n", "50"], env={"COLUMNS": "300"}
    )
    assert result.exit_code == 0, result.output
    assert f"effect {open_attempt} (attempt)" in result.output
    assert f"effect {open_attempt} (outcome)" in result.output
    assert "indeterminate" in result.output
