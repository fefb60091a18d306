"""A second effect family, a sibling of ``http.py`` as docs/effects.md ("Another family")
says one is written: the downstream system is a database (a SQLite file of its own),
the effect a row written in one transaction under the idempotency key as its primary
key, and reconciliation a read-only lookup of that key. The pipeline, the reconciler
and the budget work off the protocol alone — nothing here is HTTP.

(Issue 16: "A second family is a sibling module." Only the HTTP family ships; no test
drove ``run_effect`` through another adapter before this one.)

Faults are the adapter's own: the connection is lost right after the commit (the
effect happened, the answer did not come back) or before the statement ran; both
surface as an exception out of ``execute``, which the protocol counts INDETERMINATE."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from interlock import Action, Guard
from interlock.effects import (
    EffectStatus,
    Outcome,
    reconcile_effect,
    reconcile_pending,
    run_effect,
)
from interlock.effects.protocol import (
    EffectAdapter,
    Execution,
    PreparedEffect,
    ProviderResult,
    ReconcileContext,
    Reconciled,
    Resolution,
)

from .support import refund, spent


class LedgerEffect:
    """Refunds written as rows of a ledger database (the downstream system)."""

    id = "ledger"
    version = "1"
    action_types = ("refund",)

    def __init__(self, path: Path, audience: str = "shop") -> None:
        self.path = path
        self.audience = audience
        self.fault: str | None = None  # "after_commit" | "before_statement", once
        with sqlite3.connect(path) as db:
            db.execute(
                "CREATE TABLE IF NOT EXISTS entries "
                "(key TEXT PRIMARY KEY, order_id TEXT, amount INTEGER, grant_token TEXT)"
            )

    def rows(self) -> list[tuple[Any, ...]]:
        with sqlite3.connect(self.path) as db:
            return db.execute("SELECT key, order_id, amount FROM entries ORDER BY key").fetchall()

    def prepare(self, action: Action) -> PreparedEffect:
        row = {
            "order_id": str(action.arguments["order"]),
            "amount": int(action.arguments["amount"]),
        }
        key = action.context.idempotency_key
        canonical = json.dumps(
            {"row": row, "key": key, "audience": self.audience}, sort_keys=True
        ).encode()
        return PreparedEffect(
            request={"table": "entries", **row},
            binding="sha256:" + hashlib.sha256(canonical).hexdigest(),
            audience=self.audience,
            expected={"rows": 1},
        )

    def execute(self, execution: Execution) -> ProviderResult:
        fault, self.fault = self.fault, None
        if fault == "before_statement":
            raise ConnectionError("the database connection was lost before the statement")
        request = execution.prepared.request
        db = sqlite3.connect(self.path)
        try:
            with db:
                db.execute(
                    "INSERT INTO entries (key, order_id, amount, grant_token) VALUES (?, ?, ?, ?)",
                    (
                        execution.idempotency_key,
                        request["order_id"],
                        request["amount"],
                        execution.grant,
                    ),
                )
        except sqlite3.IntegrityError:
            return ProviderResult(Outcome.FAILED, reason="the key was already written")
        finally:
            db.close()
        if fault == "after_commit":
            raise ConnectionError("the connection was lost after the commit")
        return ProviderResult(Outcome.COMMITTED, data={"key": execution.idempotency_key})

    def observe_effect(
        self, result: ProviderResult, prepared: PreparedEffect
    ) -> dict[str, Any] | None:
        return {"outcome": str(result.outcome), "table": prepared.request["table"]}

    def reconcile(self, context: ReconcileContext) -> Reconciled:
        try:
            with sqlite3.connect(f"file:{self.path}?mode=ro", uri=True) as db:
                found = db.execute(
                    "SELECT key FROM entries WHERE key = ?", (context.idempotency_key,)
                ).fetchone()
        except sqlite3.Error as exc:
            return Reconciled(Resolution.UNKNOWABLE, reason=str(exc))
        if found is None:
            return Reconciled(Resolution.NEVER_EXECUTED, reason="no row under the key")
        return Reconciled(
            Resolution.DONE, ProviderResult(Outcome.COMMITTED, data={"key": found[0]})
        )


@pytest.fixture
def ledger(tmp_path: Path) -> LedgerEffect:
    return LedgerEffect(tmp_path / "ledger.db")


def _store(guard: Guard):  # type: ignore[no-untyped-def]
    assert guard.store is not None
    return guard.store


def test_the_ledger_is_an_effect_adapter(ledger: LedgerEffect) -> None:
    assert isinstance(ledger, EffectAdapter)


def test_an_allowed_row_is_written_once_and_charged_once(
    guard: Guard, ledger: LedgerEffect
) -> None:
    result = run_effect(guard, ledger, refund(order=7, amount=3), idempotency_key="l-1")
    assert result.outcome is Outcome.COMMITTED and result.status is EffectStatus.COMMITTED
    assert ledger.rows() == [("l-1", "7", 3)]
    charged, held = spent(_store(guard))
    assert charged > 0 and held == 0
    again = run_effect(guard, ledger, refund(order=7, amount=3), idempotency_key="l-1")
    assert again.replayed and again.effect_id == result.effect_id
    assert ledger.rows() == [("l-1", "7", 3)]
    assert spent(_store(guard)) == (charged, 0)


def test_lost_after_commit_is_indeterminate_then_reconciled_committed_once(
    guard: Guard, ledger: LedgerEffect
) -> None:
    ledger.fault = "after_commit"
    result = run_effect(guard, ledger, refund(), idempotency_key="l-after")
    assert result.outcome is Outcome.INDETERMINATE
    assert ledger.rows() == [("l-after", "42", 5)]  # it happened; the caller cannot know
    charged, held = spent(_store(guard))
    assert charged == 0 and held > 0  # held until reconciled
    report = reconcile_pending(_store(guard), [ledger], audit=guard.audit)
    assert [record.status for record in report.settled] == [EffectStatus.COMMITTED]
    assert spent(_store(guard)) == (held, 0)  # charged once
    again = run_effect(guard, ledger, refund(), idempotency_key="l-after")
    assert again.replayed and again.outcome is Outcome.COMMITTED
    assert ledger.rows() == [("l-after", "42", 5)]
    assert spent(_store(guard)) == (held, 0)


def test_lost_before_the_statement_is_never_executed_and_a_retry_writes_once(
    guard: Guard, ledger: LedgerEffect
) -> None:
    ledger.fault = "before_statement"
    result = run_effect(guard, ledger, refund(), idempotency_key="l-before")
    assert result.outcome is Outcome.INDETERMINATE  # the caller cannot tell the cases apart
    assert ledger.rows() == []
    settled = reconcile_effect(_store(guard), [ledger], result.effect_id, audit=guard.audit)
    assert settled.status is EffectStatus.NEVER_EXECUTED
    assert spent(_store(guard)) == (0, 0)  # released
    retry = run_effect(guard, ledger, refund(), idempotency_key="l-before")
    assert retry.outcome is Outcome.COMMITTED and retry.attempt == 2 and not retry.replayed
    assert ledger.rows() == [("l-before", "42", 5)]
    charged, held = spent(_store(guard))
    assert charged > 0 and held == 0


def test_an_unreadable_ledger_keeps_the_attempt_held(
    guard: Guard, ledger: LedgerEffect, tmp_path: Path
) -> None:
    ledger.fault = "after_commit"
    result = run_effect(guard, ledger, refund(), idempotency_key="l-gone")
    assert result.outcome is Outcome.INDETERMINATE
    blind = LedgerEffect.__new__(LedgerEffect)  # the same adapter, its database away
    blind.path, blind.audience, blind.fault = tmp_path / "missing" / "ledger.db", "shop", None
    settled = reconcile_effect(_store(guard), [blind], result.effect_id, audit=guard.audit)
    assert settled.status is EffectStatus.INDETERMINATE and settled.status.open
    assert spent(_store(guard))[1] > 0  # still held: never a guess
    done = reconcile_effect(_store(guard), [ledger], result.effect_id, audit=guard.audit)
    assert done.status is EffectStatus.COMMITTED
    assert spent(_store(guard))[1] == 0
