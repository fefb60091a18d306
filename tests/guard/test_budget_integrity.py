"""Budgets that cannot be dodged, in-process (issue 12): a model call that states no
cost reserves a default or is refused; the real usage is always charged; concurrency
cannot multiply the overage a budget allows; only the agent that reserved settles; and
a guard without a store still enforces budgets and rate limits, in its own memory."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from interlock import Action, ActionDenied, Context, Guard, Verdict
from interlock.ledger.usage import Usage
from interlock.policy import load_policy_text
from interlock.store import SqlStore, open_store

AGENT = Context(tenant="acme", agent="bot")

MODEL_POLICY = """
version: 1
default: deny
budgets:
  - id: tokens
    limit: {limit}
    unit: tokens
    kind: llm{extra}
rules:
  - id: models
    decision: allow
    reason: models are fine
    kind: llm
"""


def model_policy(limit: int = 1000, extra: str = "") -> Any:
    return load_policy_text(MODEL_POLICY.format(limit=limit, extra=extra))


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqlStore]:
    with open_store(f"sqlite:///{tmp_path / 'state.db'}") as opened:
        yield opened


def counters(store: SqlStore, budget_id: str = "tokens") -> tuple[int, int]:
    (row,) = store.budget_rows(budget_id=budget_id)
    return row.spent, row.reserved


# -- a call must say what it may cost, or the policy must -------------------------------


@pytest.mark.parametrize("estimate", [None, Usage(0, 0)], ids=["no estimate", "zero"])
def test_a_model_call_that_states_no_cost_is_refused_and_never_runs(
    store: SqlStore, estimate: Usage | None
) -> None:
    ran: list[bool] = []
    with (
        Guard(model_policy(), store=store, context=AGENT, reap_interval=None) as guard,
        pytest.raises(ActionDenied) as refused,
        guard.llm_call("m", estimate=estimate) as call,
    ):
        ran.append(True)
        call.record(Usage(1_000_000, 500_000))
    assert ran == []
    assert refused.value.rule_ids == ("budget:tokens",)
    reason = refused.value.reason
    assert "max_tokens" in reason and "default_estimate" in reason  # says how to fix it
    assert store.budget_rows() == []


def test_no_model_call_runs_past_an_exhausted_budget_whatever_it_states(store: SqlStore) -> None:
    with Guard(model_policy(), store=store, context=AGENT, reap_interval=None) as guard:
        with guard.llm_call("m", estimate=Usage(200, 200)) as call:
            call.record(Usage(600, 400))  # within twice the reservation
        assert counters(store) == (1000, 0)
        for estimate in (None, Usage(0, 0), Usage(1, 1)):
            with pytest.raises(ActionDenied), guard.llm_call("m", estimate=estimate) as call:
                call.record(Usage(1_000_000, 500_000))
    assert counters(store) == (1000, 0)


@pytest.mark.parametrize("estimate", [None, Usage(0, 0)], ids=["no estimate", "zero"])
def test_a_default_estimate_reserves_for_a_silent_call_and_the_real_usage_is_charged(
    store: SqlStore, estimate: Usage | None
) -> None:
    policy = model_policy(extra="\n    default_estimate: 200")
    with Guard(policy, store=store, context=AGENT, reap_interval=None) as guard:
        with guard.llm_call("m", estimate=estimate) as call:
            assert counters(store) == (0, 200)
            call.record(Usage(250, 120))  # more than reserved: charged in full
        assert counters(store) == (370, 0)
        with guard.llm_call("m", estimate=estimate):
            pass  # nothing recorded: what was reserved is charged
        assert counters(store) == (570, 0)


def test_a_model_default_max_tokens_bounds_a_call_that_names_none(store: SqlStore) -> None:
    policy = load_policy_text(
        MODEL_POLICY.format(limit=10_000, extra="")
        + 'pricing:\n  default_max_tokens:\n    "m-*": 300\n'
    )
    with Guard(policy, store=store, context=AGENT, reap_interval=None) as guard:
        decision = guard.check(
            Action.llm("m-large", arguments={"messages": [{"role": "user", "content": "x" * 400}]})
        )
        assert decision.verdict is Verdict.ALLOW
        assert decision.reservation is not None
        # the prompt's 404 characters ("user" and the content) / 4, rounded up, + 300
        assert decision.reservation.amounts == (("tokens", 101 + 300, "tokens"),)
        guard.release(decision)
        other = guard.check(Action.llm("other-model", arguments={"messages": []}))
        assert other.verdict is Verdict.DENY and "max_tokens" in other.reason


# -- the overage a budget allows cannot be multiplied by concurrency -----------------------


def run_concurrently(
    guard: Guard, calls: int, estimate: Usage, used: Usage
) -> list[tuple[Verdict, Any]]:
    """``calls`` threads check at once; once all have their verdict, the allowed ones
    commit ``used``."""
    checked = threading.Barrier(calls)
    outcomes: list[tuple[Verdict, Any]] = []
    lock = threading.Lock()

    def one() -> None:
        action = Action.llm("m", arguments=estimate.as_arguments())
        decision = guard.check(action)
        checked.wait(30)  # every reservation is in flight before any commits
        settled = guard.commit(decision, used, model="m") if decision.allowed else None
        with lock:
            outcomes.append((decision.verdict, settled))

    threads = [threading.Thread(target=one) for _ in range(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(outcomes) == calls
    return outcomes


def test_twenty_concurrent_calls_cannot_multiply_the_allowed_overage(store: SqlStore) -> None:
    # Each call reserves 10 and really uses 20: within the default max_overage (the
    # reservation's own size). Only as many are admitted as could all use that much.
    with Guard(model_policy(limit=200), store=store, context=AGENT, reap_interval=None) as guard:
        outcomes = run_concurrently(guard, 20, Usage(5, 5), Usage(10, 10))
    allowed = [o for o in outcomes if o[0] is Verdict.ALLOW]
    assert len(allowed) == 10
    (row,) = store.budget_rows(budget_id="tokens")
    assert (row.spent, row.reserved, row.excess) == (200, 0, 0)
    assert row.spent <= row.cap


def test_calls_that_overrun_their_bound_are_charged_recorded_and_close_the_budget(
    store: SqlStore,
) -> None:
    with Guard(model_policy(limit=1000), store=store, context=AGENT, reap_interval=None) as guard:
        outcomes = run_concurrently(guard, 20, Usage(5, 5), Usage(100_000, 10))
        allowed = sum(1 for verdict, _ in outcomes if verdict is Verdict.ALLOW)
        assert allowed == 20  # 20 × (10 + 10) fit under 1000: nothing said otherwise
        (row,) = store.budget_rows(budget_id="tokens")
        # every token used is charged; what ran past reservation + max_overage is
        # recorded, and is the only part of spent beyond the cap
        assert row.spent == 20 * 100_010
        assert row.excess == 20 * (100_010 - 10 - 10)
        assert row.spent - row.excess <= row.cap
        assert row.closed_us is not None
        with pytest.raises(ActionDenied) as refused, guard.llm_call("m", estimate=Usage(1, 1)):
            pass
        assert "closed" in refused.value.reason and "reopen" in refused.value.reason
        (reopened,) = store.reopen_budget(tenant="acme", budget_id="tokens")
        assert reopened.scope_key == "tenant" and reopened.excess == row.excess
        assert store.budget_rows(budget_id="tokens")[0].closed_us is None


# -- only the agent that reserved settles --------------------------------------------------


def test_another_agent_cannot_release_or_commit_a_reservation(store: SqlStore) -> None:
    from interlock.errors import ReservationNotOwned

    policy = model_policy()
    with (
        Guard(policy, store=store, context=AGENT, reap_interval=None) as owner,
        Guard(policy, store=store, context=Context(tenant="acme", agent="mallory")) as other,
    ):
        decision = owner.check(Action.llm("m", arguments=Usage(100, 100).as_arguments()))
        assert decision.reservation is not None
        with pytest.raises(ReservationNotOwned):
            other.release(decision)
        with pytest.raises(ReservationNotOwned):
            other.commit(decision, Usage(0, 0), model="m")
        assert counters(store) == (0, 200)
        owner.commit(decision, Usage(150, 50), model="m")
    assert counters(store) == (200, 0)


def test_usage_is_priced_on_the_reservation_as_made_whichever_instance_commits(
    store: SqlStore, tmp_path: Path
) -> None:
    """The instance that reserved prices a commit from what it holds (no read); another
    (another process's store on the same file) reads the reservation: both charge the
    usage, and a stranger is refused on either before anything is priced."""
    from interlock.errors import ReservationNotOwned

    policy = model_policy(limit=10_000)
    with (
        Guard(policy, store=store, context=AGENT, reap_interval=None) as here,
        open_store(f"sqlite:///{tmp_path / 'state.db'}") as elsewhere_store,
        Guard(policy, store=elsewhere_store, context=AGENT, reap_interval=None) as elsewhere,
        Guard(policy, store=elsewhere_store, context=Context(tenant="acme", agent="eve")) as eve,
    ):
        first = here.check(Action.llm("m", arguments=Usage(100, 100).as_arguments()))
        second = here.check(Action.llm("m", arguments=Usage(100, 100).as_arguments()))
        assert store.reservation_terms(first.reservation.id).lines  # type: ignore[union-attr]
        with pytest.raises(ReservationNotOwned):
            eve.commit(second, Usage(0, 0), model="m")
        here.commit(first, Usage(30, 20), model="m")  # priced from memory
        elsewhere.commit(second, Usage(300, 100), model="m")  # read back, then priced
        assert counters(store) == (450, 0)
        here.commit(second, Usage(1, 1), model="m")  # settled elsewhere: changes nothing
        assert counters(store) == (450, 0)


# -- a guard without a store ---------------------------------------------------------------

NO_STORE_POLICY = """
version: 1
default: deny
budgets:
  - id: spend
    limit: 1
    unit: USD
    name: paid
    max_overage: 0
rate_limits:
  - id: burst
    limit: 2
    per: 60s
    name: search
rules:
  - id: tools
    decision: allow
    reason: tools are fine
    name: [paid, search]
"""


def test_a_guard_without_a_store_enforces_budgets_and_rate_limits_in_memory(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="interlock"):
        guard = Guard(load_policy_text(NO_STORE_POLICY), context=AGENT)
    assert "memory" in caplog.text and "one process" in caplog.text
    verdicts = [guard.check(Action.tool("paid", {"est_cost": 5})).verdict for _ in range(3)]
    assert verdicts == [Verdict.DENY] * 3
    small = guard.check(Action.tool("paid", {"est_cost": 0.6}))
    assert small.verdict is Verdict.ALLOW and small.reservation is not None
    assert guard.check(Action.tool("paid", {"est_cost": 0.6})).verdict is Verdict.DENY
    guard.release(small)
    assert guard.check(Action.tool("paid", {"est_cost": 0.6})).verdict is Verdict.ALLOW
    searches = [guard.check(Action.tool("search", {"q": "x"})).verdict for _ in range(3)]
    assert searches == [Verdict.ALLOW, Verdict.ALLOW, Verdict.DENY]
    guard.close()


def test_a_guard_without_a_store_reserves_and_commits_model_calls_sync_and_async() -> None:
    import asyncio

    guard = Guard(model_policy(limit=1000), context=AGENT)
    with guard.llm_call("m", estimate=Usage(100, 100)) as call:
        call.record(Usage(150, 100))

    async def twice() -> None:
        async with guard.llm_call("m", estimate=Usage(100, 100)) as call:
            call.record(Usage(100, 50))
        decision = await guard.acheck(Action.llm("m", arguments={"max_tokens": 400}))
        assert decision.verdict is Verdict.DENY  # 250 + 150 spent; 400 + 400 held: over

    asyncio.run(twice())
    assert guard.ledger is not None and guard.store is None
    (row,) = guard.ledger.budget_rows()
    assert (row.spent, row.reserved, row.headroom) == (400, 0, 0)
    # a new policy keeps the counts: they live in the guard's ledger, not the policy
    guard.replace_policy(model_policy(limit=500))
    assert guard.check(Action.llm("m", arguments={"max_tokens": 60})).verdict is Verdict.DENY
    assert guard.check(Action.llm("m", arguments={"max_tokens": 50})).verdict is Verdict.ALLOW
    guard.close()


def test_a_guard_without_a_store_or_budgets_keeps_no_ledger(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="interlock"):
        guard = Guard(
            load_policy_text(NO_STORE_POLICY.split("budgets:", maxsplit=1)[0] + "rules: []\n")
        )
    assert guard.ledger is None and caplog.text == ""


def _first_use_from_threads(guard: Guard, calls: int) -> list[Verdict]:
    start = threading.Barrier(calls)
    verdicts: list[Verdict] = []

    def call() -> None:
        start.wait()
        decision = guard.check(Action.llm("m", arguments={"max_tokens": 100}))
        verdicts.append(decision.verdict)

    threads = [threading.Thread(target=call) for _ in range(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return verdicts


def test_the_memory_ledger_made_on_first_use_is_one_however_many_calls_race_for_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The guard makes its memory ledger when a call first needs it (ADR 0014): calls
    racing to be that first call still share one, so the budget is never split."""
    from interlock.ledger import memory

    made: list[object] = []
    real_init = memory.MemoryLedger.__init__

    def slow_init(self: Any, **options: Any) -> None:  # widens the race
        made.append(self)
        time.sleep(0.02)
        real_init(self, **options)

    monkeypatch.setattr(memory.MemoryLedger, "__init__", slow_init)
    sequential = Guard(model_policy(limit=1000), context=AGENT)
    allowed = [
        sequential.check(Action.llm("m", arguments={"max_tokens": 100})).verdict for _ in range(12)
    ].count(Verdict.ALLOW)
    assert 0 < allowed < 12
    for _ in range(5):
        guard = Guard(model_policy(limit=1000), context=AGENT)
        assert guard._ledger is None  # not made yet
        made.clear()
        verdicts = _first_use_from_threads(guard, 12)
        assert len(made) == 1
        assert verdicts.count(Verdict.ALLOW) == allowed
        assert guard.ledger is not None and guard.ledger is guard.decider.ledger  # type: ignore[attr-defined]
        (row,) = guard.ledger.budget_rows()
        (expected,) = sequential.ledger.budget_rows()  # type: ignore[union-attr]
        assert row.reserved == expected.reserved


def test_a_new_policy_uses_the_same_memory_ledger_made_before_or_after_it() -> None:
    guard = Guard(model_policy(limit=150), context=AGENT)
    guard.replace_policy(model_policy(limit=150))  # before any call made the ledger
    assert guard.check(Action.llm("m", arguments={"max_tokens": 60})).verdict is Verdict.ALLOW
    ledger = guard.ledger
    guard.replace_policy(model_policy(limit=150))
    assert guard.ledger is ledger
    assert guard.check(Action.llm("m", arguments={"max_tokens": 60})).verdict is Verdict.DENY
