"""A settlement's audit record commits in its commit's transaction (SQLite, a
reservation this store made and still in flight): one commit fewer per settled call.
Both land or neither does; a settlement is recorded once, whichever way it went; a
commit that cannot join (durability ``none``, settled elsewhere, PostgreSQL) is
recorded as before."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from interlock import Action, Context, Guard
from interlock.guard import Guard as GuardClass
from interlock.policy import load_policy_text
from interlock.store import SqlStore, open_store

AGENT = Context(tenant="acme", agent="bot")

POLICY = """
version: 1
default: deny
audit:
  durability: {durability}
budgets:
  - id: spend
    limit: 1000
    unit: USD
    name: pay
  - id: calls
    limit: 1000
    unit: USD
    name: pay2
  - id: also
    limit: 1000
    unit: USD
    name: pay2
rules:
  - id: tools
    decision: allow
    reason: these tools are fine
    name: [pay, pay2]
"""


def guard_on(store: SqlStore, durability: str = "process") -> Guard:
    policy = load_policy_text(POLICY.format(durability=durability))
    return Guard(policy, store=store, context=AGENT, reap_interval=None)


def pay(name: str = "pay", cost: int = 10) -> Action:
    return Action.tool(name, {"est_cost": cost}, context=AGENT)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqlStore]:
    with open_store(f"sqlite:///{tmp_path / 'settle.db'}") as opened:
        yield opened


def settlements(store: SqlStore) -> list[dict[str, Any]]:
    bodies = [json.loads(row.body) for row in store.audit_rows(tenant="acme")]
    return [body for body in bodies if body.get("kind") == "budget"]


def spent(store: SqlStore, budget: str = "spend") -> tuple[int, int]:
    (row,) = store.budget_rows(budget_id=budget)
    return row.spent, row.reserved


def test_a_commit_and_its_record_land_in_one_transaction_and_say_the_same(
    store: SqlStore,
) -> None:
    with guard_on(store) as guard:
        decision = guard.check(pay(cost=10))
        record = guard._settlement_record(store)
        assert record is not None  # this commit can join
        settled = guard.commit(decision)
        assert settled is not None and record.landed is False  # a fresh one is made per commit
        guard.commit(decision)  # twice: changes nothing, records nothing
    (only,) = settlements(store)
    assert only["reservation_id"] == settled.id
    assert (only["status"], only["actual"], only["owner"]) == (
        "committed",
        {"spend": 10_000_000},
        "bot",
    )
    assert spent(store) == (10_000_000, 0)
    assert store.verify_audit().breaks == ()


def test_joined_and_separate_records_are_the_same_record(
    store: SqlStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    with guard_on(store) as guard:
        guard.commit(guard.check(pay(cost=5)))
        monkeypatch.setattr(GuardClass, "_settlement_record", lambda self, ledger: None)
        guard.commit(guard.check(pay(cost=5)))
    joined, separate = settlements(store)
    drop = ("reservation_id",)
    assert {k: v for k, v in joined.items() if k not in drop} == {
        k: v for k, v in separate.items() if k not in drop
    }


@pytest.mark.parametrize("name", ["pay", "pay2"], ids=["the usual statement", "two budgets"])
def test_a_record_that_cannot_be_appended_undoes_the_commit(
    store: SqlStore, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """All or nothing: the append fails inside the commit's transaction, so the
    reservation is still in flight and unspent; committing again settles it, once."""
    with guard_on(store) as guard:
        decision = guard.check(pay(name))
        budget = "spend" if name == "pay" else "calls"
        before = spent(store, budget)

        def broken(*_: Any) -> Any:
            raise RuntimeError("disk full")

        with monkeypatch.context() as patched:
            patched.setattr(type(store), "_append_chain", broken)
            with pytest.raises(RuntimeError, match="disk full"):
                guard.commit(decision)
        assert spent(store, budget) == before  # nothing of the commit stayed
        assert settlements(store) == []
        guard.commit(decision)
        assert spent(store, budget)[1] == 0
    assert len(settlements(store)) == 1


def test_durability_none_records_as_before(store: SqlStore) -> None:
    with guard_on(store, durability="none") as guard:
        assert guard._settlement_record(store) is None
        guard.commit(guard.check(pay()))
        guard.close()
    assert [s["status"] for s in settlements(store)] == ["committed"]


def test_a_reservation_settled_by_another_store_is_recorded_once(
    store: SqlStore, tmp_path: Path
) -> None:
    """The store that made it tries the join; the conditional commit finds it settled
    by another process's store, rolls back, and the general path reads a replay:
    nothing more is charged or recorded."""
    with (
        guard_on(store) as here,
        open_store(f"sqlite:///{tmp_path / 'settle.db'}") as other_store,
        guard_on(other_store) as there,
    ):
        decision = here.check(pay(cost=10))
        there.commit(decision)
        here.commit(decision)
    assert [s["actual"] for s in settlements(store)] == [{"spend": 10_000_000}]
    assert spent(store) == (10_000_000, 0)


@pytest.mark.parametrize("joined", [True, False], ids=["joined", "through the writer"])
def test_a_budgeted_decisions_record_names_the_reservation_its_settlement_names(
    store: SqlStore, monkeypatch: pytest.MonkeyPatch, joined: bool
) -> None:
    """An auditor follows a budgeted call from its decision to its settlement by the
    reservation id both records carry; a decision that holds none names none."""
    if not joined:
        monkeypatch.setattr(GuardClass, "_settlement_record", lambda self, ledger: None)
    with guard_on(store) as guard:
        decision = guard.check(pay(cost=3))
        guard.commit(decision)
        guard.check(Action.tool("look", {}, context=AGENT))  # denied: holds nothing
    bodies = [json.loads(row.body) for row in store.audit_rows(tenant="acme")]
    allowed, refused = [b for b in bodies if b["kind"] == "decision"]
    (settled,) = settlements(store)
    assert decision.reservation is not None
    assert allowed["reservation_id"] == settled["reservation_id"] == decision.reservation.id
    assert "reservation_id" not in refused
