"""PostgreSQL wakes approval waiters by ``LISTEN``/``NOTIFY``, not by polling: with the
safety-net re-read set to an hour (``approval_poll=3600``), a waiter released before
its deadline was woken by a notification — from another store object, and after the
listener's connection was killed and came back (a decision made while nobody listened
is caught by the re-read every waiter makes when the listener reconnects). Also: the
URL's own parameters are checked, naming the one that is wrong.

No latency is asserted: a waiter that was not woken returns at its deadline (10 s),
one that was returns in milliseconds; the line is drawn at half the deadline.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from interlock.errors import StoreError
from interlock.store import ApprovalStatus, SqlStore, open_store

WAIT_S = 10.0
QUIET = "approval_poll=3600"  # the safety-net re-read: once an hour


def ask(store: SqlStore, intent: str) -> str:
    return store.resolve_approval(
        tenant="acme",
        intent_hash=intent,
        action={"name": "refund", "arguments": {"amount": 500}},
        context={"agent": "bot"},
        rule_ids=["refunds"],
        reason="refunds need a human",
        requested_by="bot",
        ttl_us=600_000_000,
        grant_ttl_us=300_000_000,
    ).record.id


@pytest.fixture
def quiet(postgres_url: str) -> Iterator[tuple[SqlStore, SqlStore]]:
    """(the waiter's store, polling once an hour; an approver's store)."""
    waiter = open_store(f"{postgres_url}&{QUIET}")
    approver = open_store(postgres_url)
    yield waiter, approver
    waiter.close()
    approver.close()


def wait_in_thread(store: SqlStore, approval_id: str) -> tuple[threading.Thread, list[Any]]:
    """Start a waiter; returns once it is registered and listening."""
    seen: list[Any] = []

    def run() -> None:
        started = time.monotonic()
        seen.append(store.wait_for_approval(approval_id, WAIT_S))
        seen.append(time.monotonic() - started)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    deadline = time.monotonic() + WAIT_S
    while not store._approval_waiters._callbacks.get(approval_id):  # registered
        assert time.monotonic() < deadline, "the waiter never registered"
        time.sleep(0.005)
    return thread, seen


def test_a_waiter_polling_once_an_hour_is_woken_by_notify(
    quiet: tuple[SqlStore, SqlStore],
) -> None:
    waiter, approver = quiet
    approval_id = ask(approver, "intent-notify")
    thread, seen = wait_in_thread(waiter, approval_id)
    approver.approve(approval_id, by="alice")
    thread.join(WAIT_S * 2)
    record, elapsed = seen
    assert record.status is ApprovalStatus.APPROVED
    assert elapsed < WAIT_S / 2, "woken at the deadline: the NOTIFY did not arrive"


async def test_an_async_waiter_polling_once_an_hour_is_woken_by_notify(
    quiet: tuple[SqlStore, SqlStore],
) -> None:
    waiter, approver = quiet
    approval_id = ask(approver, "intent-notify-async")
    timer = threading.Timer(0.2, approver.approve, args=(approval_id,), kwargs={"by": "alice"})
    started = time.monotonic()
    timer.start()
    record = await waiter.await_approval(approval_id, WAIT_S)
    timer.join()
    assert record.status is ApprovalStatus.APPROVED
    assert time.monotonic() - started < WAIT_S / 2, "woken at the deadline: no NOTIFY"


def _kill_listener(store: SqlStore, approver: SqlStore) -> None:
    """Terminate the waiter's LISTEN connection from the server side."""
    with approver.transaction() as cur:
        cur.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE query LIKE 'LISTEN interlock_approvals%' AND pid <> pg_backend_pid()"
        )
        assert cur.fetchall(), "no listener connection found"


def test_a_decision_made_while_the_listener_reconnects_still_wakes_the_waiter(
    quiet: tuple[SqlStore, SqlStore],
) -> None:
    waiter, approver = quiet
    approval_id = ask(approver, "intent-gap")
    thread, seen = wait_in_thread(waiter, approval_id)
    _kill_listener(waiter, approver)
    approver.approve(approval_id, by="alice")  # announced to nobody (most likely)
    thread.join(WAIT_S * 2)
    record, elapsed = seen
    assert record.status is ApprovalStatus.APPROVED
    assert elapsed < WAIT_S / 2, "the reconnected listener did not make the waiter re-read"

    # and the listener is back: the next decision wakes a new waiter by NOTIFY
    second = ask(approver, "intent-after")
    thread, seen = wait_in_thread(waiter, second)
    approver.approve(second, by="alice")
    thread.join(WAIT_S * 2)
    assert seen[0].status is ApprovalStatus.APPROVED and seen[1] < WAIT_S / 2


@pytest.mark.parametrize(
    ("param", "message"),
    [
        ("pool_max=lots", "invalid pool_max='lots'"),
        ("pool_min=1.5", "invalid pool_min='1.5'"),
        ("pool_min=5&pool_max=2", "need 0 <= pool_min <= pool_max"),
        ("pool_max=0", "pool_max >= 1"),
        ("approval_poll=soon", "invalid approval_poll='soon'"),
        ("approval_poll=0", "invalid approval_poll"),
        ("approval_poll=inf", "invalid approval_poll"),
    ],
)
def test_bad_url_parameters_are_refused_naming_the_parameter(
    postgres_url: str, param: str, message: str
) -> None:
    with pytest.raises(StoreError, match=message) as raised:
        open_store(f"{postgres_url}&{param}")
    assert "postgresql://" in str(raised.value)  # the URL it came from (password hidden)
