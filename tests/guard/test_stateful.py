"""The guard on a store: audited decisions, approvals bound to the exact call, rate
limits, budgets and guarded model calls — against a real SQLite file."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from interlock import Action, ActionDenied, ApprovalRequired, Context, Guard, Verdict
from interlock.deciders.stateful import StatefulDecider
from interlock.errors import ActionUndetermined, SelfApproval, StoreError
from interlock.ledger.usage import Usage
from interlock.policy import load_policy_text
from interlock.store import ApprovalStatus, ReservationStatus, SqlStore, open_store

POLICY = """
version: 1
default: deny
approvals:
  url: "https://approvals.example.com/a/{id}"
  ttl: 1h
  grant_ttl: 15m
pricing:
  currency: USD
  models:
    "test-model": {input: 2, output: 10}
budgets:
  - id: tool-spend
    limit: 1
    unit: USD
    scope: agent
    kind: tool
    name: "paid_*"
    max_overage: 0       # a declared cost is what is charged: no overrun to hold for
  - id: big-spend
    limit: 100
    unit: USD
    scope: tenant
    name: "wire_*"
    on_exceed: require_approval
  - id: llm-tokens
    limit: 5000
    unit: tokens
    scope: agent
    kind: llm
  - id: llm-dollars
    limit: 0.5
    unit: USD
    scope: tenant
    kind: llm
rate_limits:
  - id: search-burst
    limit: 2
    per: 60s
    key: agent
    name: search
rules:
  - id: tools-ok
    decision: allow
    reason: tools are fine
    kind: tool
    name: ["search", "paid_*", "wire_*", "read_*"]
  - id: refund-large
    decision: require_approval
    reason: refunds over 100 need a human
    name: refund
    when: "args.amount > 100"
  - id: refund-small
    decision: allow
    reason: small refunds are routine
    name: refund
    when: "args.amount <= 100"
  - id: models
    decision: allow
    reason: the test model is allowed
    kind: llm
    name: test-model
"""

AGENT = Context(tenant="acme", agent="support-bot", session_id="s-1")


@pytest.fixture
def store(tmp_path: Path) -> Any:
    with open_store(f"sqlite:///{tmp_path / 'state.db'}") as opened:
        yield opened


@pytest.fixture
def guard(store: SqlStore) -> Any:
    with Guard(load_policy_text(POLICY), store=store, context=AGENT) as made:
        yield made


def refund(amount: float, order: int = 42) -> Action:
    return Action.tool("refund", {"order_id": order, "amount": amount})


# -- audit ---------------------------------------------------------------------------


def test_every_decision_is_in_the_chain_before_it_is_returned(
    guard: Guard, store: SqlStore
) -> None:
    decisions = [
        guard.check(Action.tool("read_file", {"path": "a"})),
        guard.check(Action.tool("shell", {"command": "rm -rf /"})),
        guard.check(refund(500)),
    ]
    rows = {row.decision_id: row for row in store.audit_rows(tenant="acme")}
    for decision in decisions:
        assert decision.decision_id in rows  # durable before check() returned
        assert rows[decision.decision_id].decision == decision.verdict.value
    assert rows[decisions[0].decision_id].agent == "support-bot"
    assert store.verify_audit().ok


def test_secrets_never_reach_the_audit_log(guard: Guard, store: SqlStore) -> None:
    guard.check(Action.tool("read_file", {"path": "a", "api_key": "sk-live-abcdef1234567890"}))
    bodies = " ".join(row.body for row in store.audit_rows())
    assert "sk-live-abcdef1234567890" not in bodies
    assert "read_file" in bodies


def test_a_decision_that_cannot_be_recorded_does_not_stand(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'gone.db'}")
    guard = Guard(load_policy_text(POLICY), store=store, context=AGENT)
    guard.audit.timeout = 2.0  # type: ignore[union-attr]
    store.close()  # the database is gone: nothing can be made durable
    ran: list[str] = []

    @guard.protect(name="read_file")
    def read_file(path: str) -> str:
        ran.append(path)
        return "data"

    decision = guard.check(Action.tool("read_file", {"path": "a"}))
    assert decision.verdict is Verdict.UNDETERMINED
    assert "could not be recorded" in decision.reason
    with pytest.raises(ActionUndetermined):
        read_file("a")
    assert ran == []


def test_async_checks_are_audited_without_blocking(guard: Guard, store: SqlStore) -> None:
    async def main() -> list[Any]:
        return await asyncio.gather(
            *(guard.acheck(Action.tool("read_file", {"path": f"f{i}"})) for i in range(20))
        )

    decisions = asyncio.run(main())
    recorded = {row.decision_id for row in store.audit_rows()}
    assert {d.decision_id for d in decisions} <= recorded
    assert store.verify_audit().checked["acme"] == 20


# -- approvals ---------------------------------------------------------------------


def test_require_approval_opens_one_request_bound_to_the_call(
    guard: Guard, store: SqlStore
) -> None:
    first = guard.check(refund(500))
    assert first.verdict is Verdict.REQUIRE_APPROVAL
    assert first.approval is not None and first.approval.id is not None
    assert first.approval.url == f"https://approvals.example.com/a/{first.approval.id}"
    assert first.approval.status == "pending"

    again = guard.check(refund(500))
    assert again.approval is not None and again.approval.id == first.approval.id

    other = guard.check(refund(501))
    assert other.approval is not None and other.approval.id != first.approval.id

    record = store.get_approval(first.approval.id)
    assert record.requested_by == "support-bot"
    assert record.action["arguments"] == {"order_id": 42, "amount": 500}
    assert record.rule_ids == ("refund-large",)


def test_an_approved_call_runs_exactly_once(guard: Guard, store: SqlStore) -> None:
    runs: list[float] = []

    @guard.protect(name="refund")
    def do_refund(order_id: int, amount: float) -> str:
        runs.append(amount)
        return "refunded"

    with pytest.raises(ApprovalRequired) as pending:
        do_refund(42, 500)
    approval_id = pending.value.approval_id
    assert approval_id is not None and runs == []

    with pytest.raises(SelfApproval):
        store.approve(approval_id, by="support-bot")
    store.approve(approval_id, by="alice", reason="customer is verified")

    assert do_refund(42, 500) == "refunded"
    assert runs == [500]
    with pytest.raises(ApprovalRequired) as again:  # the grant was single-use
        do_refund(42, 500)
    assert again.value.approval_id != approval_id
    assert runs == [500]
    assert store.get_approval(approval_id).status is ApprovalStatus.CLAIMED


def test_a_changed_argument_does_not_ride_on_an_approval(guard: Guard, store: SqlStore) -> None:
    decision = guard.check(refund(500))
    assert decision.approval is not None and decision.approval.id is not None
    store.approve(decision.approval.id, by="alice")
    changed = guard.check(refund(5000))
    assert changed.verdict is Verdict.REQUIRE_APPROVAL
    assert store.get_approval(decision.approval.id).status is ApprovalStatus.APPROVED


def test_a_denied_request_denies_the_retry_with_the_approvers_reason(
    guard: Guard, store: SqlStore
) -> None:
    decision = guard.check(refund(500))
    assert decision.approval is not None and decision.approval.id is not None
    store.deny(decision.approval.id, by="alice", reason="looks like fraud")
    retry = guard.check(refund(500))
    assert retry.verdict is Verdict.DENY
    assert "alice" in retry.reason and "looks like fraud" in retry.reason


def test_twenty_concurrent_retries_claim_an_approval_once(guard: Guard, store: SqlStore) -> None:
    decision = guard.check(refund(500))
    assert decision.approval is not None and decision.approval.id is not None
    store.approve(decision.approval.id, by="alice")
    barrier = threading.Barrier(20)
    verdicts: list[Verdict] = []
    lock = threading.Lock()

    def retry() -> None:
        barrier.wait()
        outcome = guard.check(refund(500)).verdict
        with lock:
            verdicts.append(outcome)

    threads = [threading.Thread(target=retry) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert verdicts.count(Verdict.ALLOW) == 1
    assert verdicts.count(Verdict.REQUIRE_APPROVAL) == 19


def test_wait_for_approval_wakes_when_decided(guard: Guard, store: SqlStore) -> None:
    decision = guard.check(refund(500))
    assert decision.approval is not None and decision.approval.id is not None
    approval_id = decision.approval.id
    threading.Timer(0.2, lambda: store.approve(approval_id, by="alice")).start()
    started = time.monotonic()
    record = guard.wait_for_approval(approval_id, timeout=10)
    assert record.status is ApprovalStatus.APPROVED
    assert time.monotonic() - started < 5  # woke on the decision, not the timeout
    assert guard.check(refund(500)).verdict is Verdict.ALLOW


def test_await_approval_wakes_when_decided(guard: Guard, store: SqlStore) -> None:
    decision = guard.check(refund(500))
    assert decision.approval is not None and decision.approval.id is not None
    approval_id = decision.approval.id

    async def main() -> Any:
        asyncio.get_running_loop().call_later(
            0.2,
            lambda: threading.Thread(
                target=store.approve, args=(approval_id,), kwargs={"by": "alice"}
            ).start(),
        )
        started = time.monotonic()
        record = await guard.await_approval(approval_id, timeout=10)
        return record, time.monotonic() - started

    record, waited = asyncio.run(main())
    assert record.status is ApprovalStatus.APPROVED
    assert waited < 5


def test_wait_for_approval_returns_the_pending_record_at_the_timeout(guard: Guard) -> None:
    decision = guard.check(refund(500))
    assert decision.approval is not None and decision.approval.id is not None
    record = guard.wait_for_approval(decision.approval.id, timeout=0.1)
    assert record.status is ApprovalStatus.PENDING


def test_a_guard_without_a_store_has_no_approval_ids() -> None:
    guard = Guard(load_policy_text(POLICY))
    decision = guard.check(refund(500))
    assert decision.verdict is Verdict.REQUIRE_APPROVAL
    assert decision.approval is not None and decision.approval.id is None
    with pytest.raises(StoreError):
        guard.wait_for_approval("apr_x", timeout=0.1)


# -- rate limits ---------------------------------------------------------------------


def test_a_rate_limit_denies_past_its_burst_and_names_itself(guard: Guard) -> None:
    search = Action.tool("search", {"q": "x"})
    assert guard.check(search).verdict is Verdict.ALLOW
    assert guard.check(search).verdict is Verdict.ALLOW
    third = guard.check(search)
    assert third.verdict is Verdict.DENY
    assert third.rule_ids == ("rate:search-burst",)
    assert "search-burst" in third.reason and "retry in" in third.reason
    other_agent = Action.tool("search", {"q": "x"}, context=Context(tenant="acme", agent="b"))
    assert guard.check(other_agent).verdict is Verdict.ALLOW


# -- budgets -------------------------------------------------------------------------


@pytest.fixture
def store_calls(store: SqlStore, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the stateful store operations the guard calls, in order."""
    calls: list[str] = []
    for name in ("reserve", "rate_acquire", "resolve_approval"):
        real = getattr(store, name)

        def counted(*args: Any, _name: str = name, _real: Any = real, **kwargs: Any) -> Any:
            calls.append(_name)
            return _real(*args, **kwargs)

        monkeypatch.setattr(store, name, counted)
    real_settle = StatefulDecider.settle

    def settle(self: StatefulDecider, action: Action, decision: Any, lines: Any = None) -> Any:
        calls.append(f"settle on {'the caller' if _on_loop() else 'a worker'}")
        return real_settle(self, action, decision, lines)

    monkeypatch.setattr(StatefulDecider, "settle", settle)
    return calls


def _on_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return threading.current_thread() is threading.main_thread()
    return True


async def test_only_calls_a_budget_rate_limit_or_approval_covers_reach_the_store(
    guard: Guard, store_calls: list[str]
) -> None:
    # allowed, and no budget nor rate limit covers it; a budget covers it but it states
    # no cost (refused); denied: decided from the policy alone, sync and async (no
    # store, no thread)
    assert guard.check(Action.tool("read_file", {"path": "a"})).verdict is Verdict.ALLOW
    assert (await guard.acheck(Action.tool("read_file", {"path": "b"}))).verdict is Verdict.ALLOW
    assert (await guard.acheck(Action.tool("paid_lookup", {"q": "a"}))).verdict is Verdict.DENY
    assert guard.check(Action.tool("delete_all", {})).verdict is Verdict.DENY
    assert store_calls == []
    # each of the others does
    assert (await guard.acheck(Action.tool("search", {"q": "a"}))).verdict is Verdict.ALLOW
    paid = Action.tool("paid_lookup", {"q": "a", "est_cost": 0.1})
    assert (await guard.acheck(paid)).verdict is Verdict.ALLOW
    assert (await guard.acheck(refund(500))).verdict is Verdict.REQUIRE_APPROVAL
    worker = "settle on a worker"  # async: the store is synchronous, so a thread
    assert store_calls == [
        *(worker, "rate_acquire"),
        *(worker, "reserve"),
        *(worker, "resolve_approval"),
    ]


def test_a_declared_cost_is_reserved_then_committed_by_protect(
    guard: Guard, store: SqlStore
) -> None:
    @guard.protect(name="paid_lookup")
    def paid_lookup(query: str, est_cost: float) -> str:
        return "found"

    assert paid_lookup("a", est_cost=0.4) == "found"
    assert paid_lookup("b", est_cost=0.4) == "found"
    with pytest.raises(ActionDenied) as refused:
        paid_lookup("c", est_cost=0.4)
    assert refused.value.rule_ids == ("budget:tool-spend",)
    assert "tool-spend" in refused.value.reason and "0.2 USD" in refused.value.reason
    (row,) = store.budget_rows(budget_id="tool-spend")
    assert (row.spent, row.reserved) == (800_000, 0)


def test_a_body_that_raises_releases_its_reservation(guard: Guard, store: SqlStore) -> None:
    @guard.protect(name="paid_lookup")
    def paid_lookup(query: str, est_cost: float) -> str:
        raise RuntimeError("upstream down")

    with pytest.raises(RuntimeError):
        paid_lookup("a", est_cost=0.4)
    (row,) = store.budget_rows(budget_id="tool-spend")
    assert (row.spent, row.reserved) == (0, 0)


def test_check_holds_the_reservation_until_commit_or_release(guard: Guard, store: SqlStore) -> None:
    decision = guard.check(Action.tool("paid_lookup", {"q": "a", "est_cost": 0.25}))
    assert decision.reservation is not None
    assert decision.reservation.amounts == (("tool-spend", 250_000, "USD"),)
    (row,) = store.budget_rows(budget_id="tool-spend")
    assert (row.spent, row.reserved) == (0, 250_000)
    committed = guard.commit(decision)
    assert committed is not None and committed.status is ReservationStatus.COMMITTED
    assert guard.commit(decision) is not None  # twice changes nothing
    (row,) = store.budget_rows(budget_id="tool-spend")
    assert (row.spent, row.reserved) == (250_000, 0)
    kinds = [r.kind for r in store.audit_rows()]
    assert kinds.count("budget") == 1


def test_over_budget_can_require_approval_then_records_the_overspend(
    guard: Guard, store: SqlStore
) -> None:
    wire = Action.tool("wire_money", {"to": "acct-1", "est_cost": 150})
    first = guard.check(wire)
    assert first.verdict is Verdict.REQUIRE_APPROVAL
    assert first.rule_ids == ("budget:big-spend",)
    assert first.approval is not None and first.approval.id is not None
    store.approve(first.approval.id, by="cfo", reason="one-off")
    approved = guard.check(wire)
    assert approved.verdict is Verdict.ALLOW and approved.reservation is not None
    guard.commit(approved)
    (row,) = store.budget_rows(budget_id="big-spend")
    assert row.spent == 150_000_000 and row.spent > row.cap


def test_a_halted_batch_gives_back_what_it_reserved(guard: Guard, store: SqlStore) -> None:
    decision = guard.check_batch(
        [
            Action.tool("paid_lookup", {"q": "a", "est_cost": 0.3}),
            Action.tool("shell", {"command": "rm -rf /"}),
        ]
    )
    assert decision is not None and decision.verdict is Verdict.DENY
    (row,) = store.budget_rows(budget_id="tool-spend")
    assert (row.spent, row.reserved) == (0, 0)


def test_a_verdict_past_its_deadline_gives_back_its_reservation(
    guard: Guard, store: SqlStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_reserve = store.reserve

    def slow_reserve(**kwargs: Any) -> Any:
        outcome = real_reserve(**kwargs)
        time.sleep(0.2)  # the verdict arrives after the check's deadline
        return outcome

    monkeypatch.setattr(store, "reserve", slow_reserve)
    decision = guard.check(Action.tool("paid_lookup", {"q": "a", "est_cost": 0.3}), timeout=0.05)
    assert decision.verdict is Verdict.UNDETERMINED
    (row,) = store.budget_rows(budget_id="tool-spend")
    assert (row.spent, row.reserved) == (0, 0)


def test_a_claimed_approval_is_returned_when_the_check_times_out(
    guard: Guard, store: SqlStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    pending = guard.check(refund(500))
    assert pending.approval is not None and pending.approval.id is not None
    store.approve(pending.approval.id, by="alice")
    real = store.resolve_approval

    def slow(**kwargs: Any) -> Any:
        outcome = real(**kwargs)
        time.sleep(0.2)
        return outcome

    monkeypatch.setattr(store, "resolve_approval", slow)
    assert guard.check(refund(500), timeout=0.05).verdict is Verdict.UNDETERMINED
    monkeypatch.setattr(store, "resolve_approval", real)
    assert store.get_approval(pending.approval.id).status is ApprovalStatus.APPROVED
    assert guard.check(refund(500)).verdict is Verdict.ALLOW


# -- model calls ---------------------------------------------------------------------


def test_llm_call_reserves_then_commits_real_usage(guard: Guard, store: SqlStore) -> None:
    with guard.llm_call("test-model", estimate=Usage(1_000, 1_000)) as call:
        reserved = {r.budget_id: r.reserved for r in store.budget_rows()}
        assert reserved == {"llm-tokens": 2_000, "llm-dollars": 12_000}  # $0.002 + $0.01
        call.record({"prompt_tokens": 600, "completion_tokens": 100})
    rows = {r.budget_id: r for r in store.budget_rows()}
    assert (rows["llm-tokens"].spent, rows["llm-tokens"].reserved) == (700, 0)
    assert (rows["llm-dollars"].spent, rows["llm-dollars"].reserved) == (2_200, 0)


def test_llm_call_without_recorded_usage_charges_the_estimate(
    guard: Guard, store: SqlStore
) -> None:
    with guard.llm_call("test-model", estimate=Usage(100, 100)):
        pass
    rows = {r.budget_id: r for r in store.budget_rows()}
    assert rows["llm-tokens"].spent == 200


def test_llm_call_releases_on_an_exception(guard: Guard, store: SqlStore) -> None:
    with pytest.raises(ConnectionError), guard.llm_call("test-model", estimate=Usage(100, 100)):
        raise ConnectionError("provider down")
    rows = {r.budget_id: r for r in store.budget_rows()}
    assert (rows["llm-tokens"].spent, rows["llm-tokens"].reserved) == (0, 0)


def test_llm_call_over_budget_never_calls_the_model(guard: Guard, store: SqlStore) -> None:
    called: list[bool] = []
    with (
        pytest.raises(ActionDenied) as refused,
        guard.llm_call("test-model", estimate=Usage(100, 6_000)),
    ):
        called.append(True)
    assert called == []
    assert refused.value.rule_ids == ("budget:llm-tokens",)


def test_llm_call_with_an_unpriced_model_fails_closed(guard: Guard) -> None:
    policy_with_any_model = POLICY.replace("name: test-model", 'name: "*"')
    with (
        Guard(load_policy_text(policy_with_any_model), store=guard.store, context=AGENT) as other,
        pytest.raises(ActionUndetermined) as failed,
        other.llm_call("mystery-model", estimate=Usage(10, 10)),
    ):
        pass
    assert "no price for model 'mystery-model'" in str(failed.value)


def test_async_llm_call_releases_on_cancellation(guard: Guard, store: SqlStore) -> None:
    entered = asyncio.Event()

    async def model_call() -> None:
        async with guard.llm_call("test-model", estimate=Usage(100, 100)):
            entered.set()
            await asyncio.sleep(10)

    async def main() -> None:
        task = asyncio.create_task(model_call())
        await entered.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    rows = {r.budget_id: r for r in store.budget_rows()}
    assert (rows["llm-tokens"].spent, rows["llm-tokens"].reserved) == (0, 0)


def test_async_llm_call_commits_real_usage(guard: Guard, store: SqlStore) -> None:
    async def main() -> None:
        async with guard.llm_call("test-model", estimate=Usage(100, 100)) as call:
            call.record(Usage(50, 25))

    asyncio.run(main())
    rows = {r.budget_id: r for r in store.budget_rows()}
    assert rows["llm-tokens"].spent == 75


def test_guard_opens_and_closes_a_store_from_a_url(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'own.db'}"
    with Guard(load_policy_text(POLICY), store=url, context=AGENT) as guard:
        guard.check(Action.tool("read_file", {"path": "a"}))
    with open_store(url) as store:
        assert store.verify_audit().checked == {"acme": 1}


def test_the_guards_reaper_charges_what_a_crashed_agent_left_reserved(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'reap.db'}"
    with open_store(url) as crashed_agents_store:
        crashed = Guard(
            load_policy_text(POLICY),
            store=crashed_agents_store,
            context=AGENT,
            reservation_ttl=0.2,
            reap_interval=None,
        )
        held = crashed.check(Action.tool("paid_lookup", {"q": "a", "est_cost": 0.5}))
        assert held.reservation is not None  # and then the agent dies, unsettled
        crashed.audit.close()  # type: ignore[union-attr]
    with Guard(load_policy_text(POLICY), store=url, reap_interval=0.05) as survivor:
        assert survivor.store is not None
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            (row,) = survivor.store.budget_rows(budget_id="tool-spend")
            if row.reserved == 0:
                break
            time.sleep(0.05)
        assert (row.spent, row.reserved) == (500_000, 0)  # the lookup may have run
        assert survivor.store.get_reservation(held.reservation.id).status is (
            ReservationStatus.EXPIRED
        )
