"""A budgeted decision's audit record commits in its reservation's transaction (ADR
0012 §5, :mod:`interlock.deciders.joined`): one commit fewer per budgeted call on
SQLite. Both land or neither does; the guard never records the decision twice, nor
loses it; a decision the guard changes after its record landed is recorded again,
saying what it supersedes; everything else is recorded by the audit writer as before."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from interlock import Action, Context, Guard, Verdict
from interlock.core.decision import Decision
from interlock.deciders.base import CancelToken
from interlock.deciders.joined import DecisionRecord, JoinClosed, JoinedRecord
from interlock.policy import load_policy_text
from interlock.store import BudgetLine, SqlStore, open_store

AGENT = Context(tenant="acme", agent="bot")

POLICY = """
version: 1
default: deny
audit:
  durability: {durability}
budgets:
  - id: spend
    limit: {limit}
    unit: USD
    name: pay
    max_overage: 0
rules:
  - id: tools
    decision: allow
    reason: these tools are fine
    name: [pay, look]
"""


def policy(durability: str = "process", limit: int = 100) -> Any:
    return load_policy_text(POLICY.format(durability=durability, limit=limit))


def pay(cost: int = 10) -> Action:
    return Action.tool("pay", {"to": "shop", "est_cost": cost}, context=AGENT)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqlStore]:
    with open_store(f"sqlite:///{tmp_path / 'joined.db'}") as opened:
        yield opened


def records(store: SqlStore) -> list[dict[str, Any]]:
    return [json.loads(row.body) for row in store.audit_rows(tenant="acme")]


def reservations(store: SqlStore) -> list[tuple[Any, ...]]:
    path = store.file_path()
    assert path is not None
    import sqlite3

    conn = sqlite3.connect(path)
    try:
        return list(conn.execute("SELECT id, status FROM reservations").fetchall())
    finally:
        conn.close()


def test_a_budgeted_allow_is_recorded_with_its_reservation_not_by_the_writer(
    store: SqlStore,
) -> None:
    heads: list[Any] = []
    store.add_audit_listener(lambda new: heads.append(dict(new)))
    with Guard(policy(), store=store, reap_interval=None) as guard:
        assert guard.audit is not None
        decision = guard.check(pay())
        assert decision.verdict is Verdict.ALLOW and decision.reservation is not None
        assert guard.audit.records == 0  # the writer appended nothing: one commit, not two
    (record,) = records(store)
    assert record["decision"] == "allow" and record["decision_id"] == decision.decision_id
    assert reservations(store) == [(decision.reservation.id, "reserved")]
    assert store.verify_audit().ok
    assert heads and heads[-1]["acme"].seq == 1  # the checkpointer hears of it too


def test_what_the_writer_records_and_the_joined_records_share_one_chain(
    store: SqlStore,
) -> None:
    with Guard(policy(limit=25), store=store, reap_interval=None) as guard:
        assert guard.audit is not None
        said = [
            guard.check(pay(10)),  # joined
            guard.check(Action.tool("look", {}, context=AGENT)),  # nothing budgets it
            guard.check(pay(10)),  # joined
            guard.check(pay(10)),  # refused: the budget cannot hold it
            guard.check(Action.tool("rm", {}, context=AGENT)),  # denied by the policy
        ]
        assert guard.audit.records == 3
    verdicts = [d.verdict.value for d in said]
    assert verdicts == ["allow", "allow", "allow", "deny", "deny"]
    assert [r["decision_id"] for r in records(store)] == [d.decision_id for d in said]
    assert store.verify_audit().ok


@pytest.mark.parametrize("durability", ["none"])
def test_without_waiting_for_records_nothing_joins(store: SqlStore, durability: str) -> None:
    with Guard(policy(durability), store=store, reap_interval=None) as guard:
        assert guard.audit is not None
        guard.check(pay())
        assert guard.audit.flush()
        assert guard.audit.records == 1


def test_power_durability_joins_on_a_fully_synced_commit(store: SqlStore) -> None:
    with Guard(policy("power"), store=store, reap_interval=None) as guard:
        assert guard.audit is not None
        decision = guard.check(pay())
        assert guard.audit.records == 0
    assert [r["decision_id"] for r in records(store)] == [decision.decision_id]


def test_a_decision_cancelled_after_its_record_landed_is_recorded_again_superseding_it(
    tmp_path: Path,
) -> None:
    """The store's clock cancels the check while its reservation is being made: the
    allow and its reservation commit, then the guard gives the reservation back and
    records what it returns, naming the allow it supersedes."""
    cancel = CancelToken()
    ticks = iter(range(1_000_000, 10**9, 1_000))
    armed: list[bool] = []

    def clock() -> int:
        if armed:  # the check is under way: it is cancelled now
            cancel.cancel()
        return next(ticks)

    with (
        open_store(f"sqlite:///{tmp_path / 'c.db'}", clock=clock) as store,
        Guard(policy(), store=store, reap_interval=None) as guard,
    ):
        armed.append(True)
        decision = guard.check(pay(), cancel=cancel)
        assert decision.verdict is Verdict.UNDETERMINED
        first, second = records(store)
        assert first["decision"] == "allow"
        assert second["decision"] == "undetermined"
        assert second["supersedes"] == "allow"
        assert second["supersedes_decision_id"] == first["decision_id"]
        ((_, status),) = reservations(store)
        assert status == "released"  # given back: the call did not run
        (row,) = store.budget_rows(budget_id="spend")
        assert (row.spent, row.reserved) == (0, 0)
        assert store.verify_audit().ok


def test_a_closed_record_rolls_its_reservation_back(store: SqlStore) -> None:
    """A check that stopped waiting (async: it timed out while its reservation was
    being made) closes its record first; the reservation then cannot commit, so no
    record and no reservation of a call that will not run are left behind."""
    with Guard(policy(), store=store, reap_interval=None) as guard:
        assert guard.audit is not None
        joined = JoinedRecord(guard.audit, pay(), 0, guard.redactor)
        allow = Decision(Verdict.ALLOW, "ok", ("pay",))
        assert joined.close() is None
        line = BudgetLine("spend", "acme", 0, "USD", 100, 10)
        with pytest.raises(JoinClosed):
            store.reserve(
                tenant="acme",
                idempotency_key="k1",
                lines=[line],
                ttl_us=10**9,
                record=DecisionRecord(joined, allow, lambda decision, _: decision),
            )
    assert reservations(store) == []
    assert records(store) == []
    assert store.budget_rows() == []


def test_an_async_check_joins_too(store: SqlStore) -> None:
    async def main() -> Decision:
        with Guard(policy(), store=store, reap_interval=None) as guard:
            assert guard.audit is not None
            decision = await guard.acheck(pay())
            assert guard.audit.records == 0
            return decision

    decision = asyncio.run(main())
    assert decision.reservation is not None
    assert [r["decision_id"] for r in records(store)] == [decision.decision_id]


def test_a_replayed_reservation_is_recorded_by_the_writer(store: SqlStore) -> None:
    keyed = Context(tenant="acme", agent="bot", idempotency_key="order-7")
    call = Action.tool("pay", {"to": "shop", "est_cost": 10}, context=keyed)
    with Guard(policy(), store=store, reap_interval=None) as guard:
        assert guard.audit is not None
        first, again = guard.check(call), guard.check(call)
        assert first.reservation is not None and again.reservation is not None
        assert again.reservation.id == first.reservation.id
        assert guard.audit.records == 1  # the first joined, the replay went the usual way
    assert [r["decision_id"] for r in records(store)] == [first.decision_id, again.decision_id]


def test_postgresql_records_budgeted_decisions_with_the_writer(postgres_url: str) -> None:
    """Not joined there: each call would hold its tenant's chain head for its whole
    reservation, where the writer appends many calls' records under one lock."""
    with (
        open_store(postgres_url) as store,
        Guard(policy(), store=store, reap_interval=None) as guard,
    ):
        assert guard.audit is not None
        decision = guard.check(pay())
        assert decision.reservation is not None
        assert guard.audit.records == 1
        assert [r["decision_id"] for r in records(store)] == [decision.decision_id]
