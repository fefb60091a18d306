"""Must show: PostgreSQL fails mid-run and every check still answers within its deadline.

A real server of the test's own (never the shared one) is crashed (``pg_ctl stop -m
immediate``) or hung (every server process SIGSTOPped: the nastier case, sockets stay
open and nothing answers) while checks run from threads and asyncio tasks. Each check
must answer ``undetermined`` within its timeout + ε, and checks must be allowed again
once the server is back.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import interlock.guard
from interlock import Action, Context, Decision, Guard, Verdict, load_policy_text
from interlock.errors import StoreUnavailable

from .cluster import Blackhole, Cluster, wait_until

pytestmark = pytest.mark.slow

TIMEOUT = 2.0
#: Slack for a noisy, shared 2-core machine: the bound is timeout + EPSILON.
EPSILON = 1.5

POLICY = load_policy_text(
    """
version: 1
default: deny
budgets:
  - id: spend
    limit: 1000000
    unit: USD
    scope: agent
    kind: tool
rate_limits:
  - id: lookups
    limit: 100000
    per: 1s
    key: agent
    name: lookup
rules:
  - id: lookups-ok
    decision: allow
    reason: lookups are fine
    name: lookup
"""
)

LOOKUP = Action.tool("lookup", {"q": "x", "est_cost": 0.01})


@pytest.fixture
def guard(cluster: Cluster) -> Iterator[Guard]:
    with Guard(POLICY, store=cluster.url, context=Context(agent="bot")) as made:
        yield made


Timed = tuple[Decision, float]


def _checks_from_threads_and_tasks(
    guard: Guard, rounds: int = 2, threads: int = 3, tasks: int = 3, **options: Any
) -> list[Timed]:
    """``rounds`` checks in each of ``threads`` threads and ``tasks`` asyncio tasks at
    once; each with how long it took."""
    results: list[Timed] = []
    lock = threading.Lock()

    def timed(check: Callable[[], Decision]) -> None:
        started = time.monotonic()
        decision = check()
        with lock:
            results.append((decision, time.monotonic() - started))

    def in_thread() -> None:
        for _ in range(rounds):
            timed(lambda: guard.check(LOOKUP, **options))

    async def in_tasks() -> None:
        async def one() -> None:
            for _ in range(rounds):
                started = time.monotonic()
                decision = await guard.acheck(LOOKUP, **options)
                with lock:
                    results.append((decision, time.monotonic() - started))

        await asyncio.gather(*(one() for _ in range(tasks)))

    workers = [threading.Thread(target=in_thread) for _ in range(threads)]
    loop_thread = threading.Thread(target=lambda: asyncio.run(in_tasks()))
    for worker in [*workers, loop_thread]:
        worker.start()
    for worker in [*workers, loop_thread]:
        worker.join(120)
        assert not worker.is_alive(), "a check never answered"
    assert len(results) == rounds * (threads + tasks)
    return results


def _assert_undetermined_in_time(results: list[Timed], bound: float) -> None:
    slow = [round(took, 2) for _, took in results if took > bound]
    assert slow == [], f"checks answered after their {bound:.1f} s bound: {slow}"
    verdicts = {decision.verdict for decision, _ in results}
    assert verdicts == {Verdict.UNDETERMINED}, [d.reason for d, _ in results]


def _recovers(guard: Guard, within: float = 60) -> bool:
    return wait_until(lambda: guard.check(LOOKUP, timeout=TIMEOUT).allowed, timeout=within)


#: How long the crashed server stays down: long enough for a reconnect backoff left
#: unbounded (1, 2, 4, 8, 16 s…) to keep the pool away well after the server is back.
OUTAGE = 16.0
#: Checks are allowed again this soon after the server is back (generous).
RECOVERY = 6.0


def test_a_crashed_server_gives_undetermined_within_the_deadline_then_recovers(
    cluster: Cluster, guard: Guard
) -> None:
    assert guard.check(LOOKUP, timeout=TIMEOUT).allowed
    cluster.stop()
    down_since = time.monotonic()
    results = _checks_from_threads_and_tasks(guard, timeout=TIMEOUT)
    while time.monotonic() - down_since < OUTAGE:  # a long outage, checks going on
        results.append((guard.check(LOOKUP, timeout=TIMEOUT), 0.0))
        time.sleep(0.5)
    _assert_undetermined_in_time(results, TIMEOUT + EPSILON)
    cluster.start()
    assert _recovers(guard, within=RECOVERY), f"still refused {RECOVERY} s after the restart"


def test_a_hung_server_gives_undetermined_within_the_deadline_then_recovers(
    cluster: Cluster, guard: Guard
) -> None:
    assert guard.check(LOOKUP, timeout=TIMEOUT).allowed
    cluster.freeze()
    try:
        results = _checks_from_threads_and_tasks(guard, timeout=TIMEOUT)
    finally:
        cluster.thaw()
    _assert_undetermined_in_time(results, TIMEOUT + EPSILON)
    assert _recovers(guard)
    # Nothing the hung server held was lost or written twice: once the server is back,
    # every check made during the hang has its record, and the last record of each
    # decision says what its caller was told.
    assert guard.audit is not None and guard.audit.flush(30)
    assert guard.store is not None
    records: dict[str, list[str]] = {}
    for row in guard.store.audit_rows(kind="decision"):
        body = json.loads(row.body)
        records.setdefault(body["decision_id"], []).append(body["decision"])
    for decision, _ in results:
        told = records.get(decision.decision_id)
        assert told is not None, f"no record of {decision.decision_id}"
        assert told[-1] == "undetermined", told
        assert len(told) == len(set(told)), f"a record written twice: {told}"
    assert guard.store.verify_audit().ok


def test_a_check_without_a_timeout_is_bounded_by_the_default(
    cluster: Cluster, guard: Guard, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(interlock.guard, "DEFAULT_TIMEOUT", 1.0)
    assert guard.check(LOOKUP).allowed
    cluster.freeze()
    try:
        results = _checks_from_threads_and_tasks(guard, rounds=1, threads=2, tasks=2)
    finally:
        cluster.thaw()
    _assert_undetermined_in_time(results, 1.0 + EPSILON)


def test_opening_a_store_behind_a_blackhole_fails_within_the_connect_timeout(
    blackhole: Blackhole,
) -> None:
    started = time.monotonic()
    with pytest.raises(StoreUnavailable, match="cannot connect"):
        Guard(POLICY, store=f"{blackhole.url}?connect_timeout=2")
    took = time.monotonic() - started
    assert took < 2 + EPSILON, f"{took:.1f} s"
